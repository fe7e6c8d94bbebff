"""The real engine on tiny random models of each llama-family architecture we support (tests/tiny_models.py):
the worker loads them and generates deterministically, and llama.cpp's layer capture (what EAGLE heads
and the SpecEE predictors read) works on each architecture's graph."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import protocol as p
from engine.client import WorkerClient
from engine.paths import REPO_ROOT
from tests.tiny_models import ARCHITECTURES, write_tiny_gguf

N_LAYER = 3
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> dict[tuple[str, bool], Path]:
    """(arch, tied) -> model. Tied tiny models mostly echo the last token (its own embedding dominates
    the residual), so the untied ones are what make the determinism check see varied text."""
    folder = tmp_path_factory.mktemp("tiny-models")
    return {
        (arch, tied): write_tiny_gguf(
            folder / f"{arch}-{'tied' if tied else 'untied'}.gguf", arch, n_layer=N_LAYER, tied=tied, tokenizer_from=model_path
        )
        for arch in ARCHITECTURES
        for tied in (True, False)
    }


@pytest.fixture(scope="module")
def worker() -> Iterator[WorkerClient]:
    client = WorkerClient()
    client.start()
    yield client
    client.stop()


def _greedy(client: WorkerClient) -> p.Done:
    done = list(client.stream(HI, p.Sampling.greedy(8)))[-1]
    assert isinstance(done, p.Done)
    return done


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_worker_loads_and_generates_deterministically(
    worker: WorkerClient, tiny_models: dict[tuple[str, bool], Path], arch: str, tied: bool
) -> None:
    loaded = worker.load(tiny_models[arch, tied], p.Placement(n_ctx=512), mode="vanilla")
    assert (loaded.architecture, loaded.n_layer, loaded.n_vocab) == (arch, N_LAYER, 49152)
    first, second = _greedy(worker), _greedy(worker)
    assert first.n_generated == len(first.tokens) == 8 and first.finish_reason == "length"
    assert first.n_prompt > 5, "the copied chat template must wrap the message"
    assert (first.tokens, first.text) == (second.tokens, second.text)


# Runs in a child process: on an architecture whose graph does not record layer inputs llama.cpp does
# not return NULL but aborts the process (GGML_ASSERT "layer input tensor is null" in our patched
# llama-graph.cpp), which in-process would take the whole test session down.
_CAPTURE_CHECK = """
import json, sys
import llama_cpp
import numpy as np
from engine import native

lib = native.lib()
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False)
tokens = llm.tokenize(b"Hello there, how are you today?", add_bos=False)
lib.specee_capture_layer_input(llm._ctx.ctx, 1, True)
llm.eval(tokens)
ptr = lib.specee_layer_input(llm._ctx.ctx, 1)
rows = None
if ptr:
    h = np.ctypeslib.as_array(ptr, shape=(len(tokens), llama_cpp.llama_model_n_embd(llm._model.model)))
    rows = {"finite": bool(np.isfinite(h).all()), "nonzero": bool(np.abs(h).sum(axis=1).all())}
llm.close()
print(json.dumps({"captured": bool(ptr), "rows": rows}))
"""


def _why(stderr: str) -> str:
    """ggml follows an assert with a long gdb backtrace: the assert or the Python error is the reason."""
    lines = stderr.strip().splitlines()
    reasons = [line for line in lines if "GGML_ASSERT" in line or "GGML_ABORT" in line or "Error" in line]
    return "\n".join(reasons[:3] or lines[-20:])


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_layer_capture_records_layer_inputs(tiny_models: dict[tuple[str, bool], Path], arch: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CAPTURE_CHECK, str(tiny_models[arch, True])],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{arch}: capturing layer 1's input failed (exit {proc.returncode}): {_why(proc.stderr)}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["captured"], f"{arch}: specee_layer_input(ctx, 1) is NULL after a decode with capture on"
    assert result["rows"] == {"finite": True, "nonzero": True}
