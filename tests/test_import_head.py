"""`specee models import-head` end to end: small synthetic EAGLE-3 checkpoints in each layout llama.cpp's
converter accepts (tests/eagle3_checkpoints.py), served by the local hub server, imported for tiny
targets (tests/tiny_models.py) with the real converter, loaded by the real worker in eagle mode with
greedy output identical to vanilla, bound to the target's sha256, measured before auto may use them;
wrong inputs get a sentence saying what is wrong."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import protocol as p
from engine.cli import main as cli_main
from engine.client import WorkerClient, WorkerError
from engine.models.acceleration import AccelerationError, check_eagle_head, find_pack, model_sha256
from engine.models.catalog import heads_for
from engine.models.gguf_file import inspect_gguf
from engine.models.head_import import HeadImportError, import_head
from tests.conftest import placement_for_backend
from tests.eagle3_checkpoints import Shape, write_checkpoint
from tests.hf_server import HubServer
from tests.tiny_models import write_tiny_gguf

N_LAYER = 4
PROMPTS = ("Explain how a bicycle works.", "Write a haiku about rain.")
GREEDY = p.Sampling.greedy(16)
PLACEMENT = placement_for_backend("cpu", n_ctx=512)  # every row computed alike: eagle's answers equal vanilla's exactly


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Iterator[HubServer]:
    """The hub server and a data dir for the whole module (after the default model is in place): the
    workers started here inherit both."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECEE_DATA_DIR", str(tmp_path_factory.mktemp("import-head-data")))
    mp.delenv("HF_TOKEN", raising=False)
    mp.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    mp.setattr("engine.models.download._token", lambda: None)
    with HubServer() as server:
        mp.setenv("HF_ENDPOINT", server.url)
        yield server
    mp.undo()


def serve(hub: HubServer, repo: str, folder: Path) -> str:
    hub.add_repo(repo, {f.name: f for f in folder.iterdir()})
    return repo


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory, model_path: Path, hub: HubServer) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("import-head-targets")

    def tiny(name: str, arch: str, **kw: object) -> Path:
        return write_tiny_gguf(folder / f"{name}.gguf", arch, n_layer=N_LAYER, tokenizer_from=model_path, **kw)

    return {
        "llama": tiny("llama", "llama", tied=False),
        "qwen3": tiny("qwen3", "qwen3", tied=False),
        "tied": tiny("tied", "llama", tied=True),  # echoes its input: a warm-started head's drafts get accepted
        "other": tiny("other", "llama", tied=False, seed=1),
        "bad": tiny("bad", "llama", tied=False, seed=2),
    }


@pytest.fixture(scope="module")
def worker(hub: HubServer) -> Iterator[WorkerClient]:
    client = WorkerClient()
    client.start()
    yield client
    client.stop()


_VANILLA: dict[Path, list[list[int]]] = {}


def answers(worker: WorkerClient, model: Path, mode: str) -> list[list[int]]:
    """Greedy answers to PROMPTS in `mode` (vanilla's once per model)."""
    if mode == "vanilla" and model in _VANILLA:
        return _VANILLA[model]
    assert worker.load(model, PLACEMENT, mode=mode).mode == mode
    out = []
    for text in PROMPTS:
        done = list(worker.stream([{"role": "user", "content": text}], GREEDY))[-1]
        assert isinstance(done, p.Done) and done.n_generated > 0
        out.append(done.tokens)
    if mode == "vanilla":
        _VANILLA[model] = out
    return out


def auto_candidates(worker: WorkerClient, model: Path) -> str:
    """What auto measures for the model (its reason while it measures), then back to vanilla so that
    the measurement does not run on in the background."""
    reason = worker.load(model, PLACEMENT, mode="auto").mode_reason
    worker.load(model, PLACEMENT, mode="vanilla")
    return reason


# ---- the target's tokenizer, rebuilt for the converter -------------------------------------------


def test_rebuilt_tokenizers_tokenize_like_llama_cpp(model_path: Path, tmp_path: Path) -> None:
    """The tokenizer.json written from a GGUF tokenizes as llama.cpp does with that GGUF, for each
    pre-tokenizer we rebuild (the converter then recognises it by its hash)."""
    import llama_cpp
    from tokenizers import Tokenizer

    from engine.models.gguf_fields import read_header
    from engine.models.head_convert import converter_script
    from engine.models.hf_tokenizer import write_hf_tokenizer

    vocabs = converter_script().parent / "models"
    text = "Hello world!\n\n  3.14159 x 12345 = ?? 'I've' naïve café 你好 🚀 def f(x):\n\treturn x**2  # done"
    for gguf in (model_path, vocabs / "ggml-vocab-llama-bpe.gguf", vocabs / "ggml-vocab-qwen2.gguf"):
        fields = read_header(gguf, keep=lambda key: key.startswith("tokenizer.")).fields
        out = write_hf_tokenizer(fields, {}, tmp_path / gguf.stem)
        hf = Tokenizer.from_file(str(out / "tokenizer.json")).encode(text, add_special_tokens=False).ids
        llm = llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)
        try:
            assert hf == llm.tokenize(text.encode(), add_bos=False, special=False), gguf.name
        finally:
            llm.close()


# ---- each layout: converted, bound, loaded by the worker, lossless -------------------------------

LAYOUTS = [  # (layout, target, architecture it declares)
    ("specforge", "llama", "LlamaForCausalLMEagle3"),
    ("angelslim", "qwen3", "Eagle3LlamaForCausalLM"),
    ("speculators", "llama", "Eagle3Speculator"),
]


@pytest.mark.parametrize(("layout", "target", "architecture"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_layout_imports_loads_and_is_lossless(
    layout: str, target: str, architecture: str, hub: HubServer, targets: dict[str, Path], worker: WorkerClient, tmp_path: Path
) -> None:
    model = targets[target]
    repo = serve(hub, f"someone/tiny-{layout}-eagle3", write_checkpoint(tmp_path / "ckpt", layout, seed=3))
    manifest = import_head(model, repo, force=True, work=tmp_path / "work")

    source = manifest["eagle"]["source"]
    assert (source["repo"], source["architecture"]) == (repo, architecture)
    assert source["revision"] == hub.repos[repo].commit and source["requested_revision"] == "main"
    assert "measured" not in manifest["eagle"]
    pack = find_pack(model)
    assert pack is not None and pack.eagle_head is not None and not pack.eagle_measured
    head, target_info = inspect_gguf(pack.eagle_head), inspect_gguf(model)
    assert head.architecture == "eagle3" and head.metadata["specee.target_sha256"] == model_sha256(model)
    assert head.tokenizer_sha256 == target_info.tokenizer_sha256  # the target's own tokenizer fields
    assert json.loads(head.metadata["specee.source"])["repo"] == repo
    check_eagle_head(pack.eagle_head, model)

    assert answers(worker, model, "eagle") == answers(worker, model, "vanilla")
    if layout == LAYOUTS[0][0]:  # once is enough
        assert "eagle" not in auto_candidates(worker, model).split(";")[0], "auto must not use an unmeasured imported head"


# ---- the command line, with the measurement auto waits for ---------------------------------------


@pytest.fixture(scope="module")
def imported(hub: HubServer, targets: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """The EAGLE reference layout (pytorch_model.bin), warm-started so that its drafts are accepted,
    imported through `specee models import-head` with a short measurement."""
    folder = tmp_path_factory.mktemp("reference-ckpt")
    ckpt = write_checkpoint(
        folder,
        "eagle-reference",
        Shape(draft_vocab=49152),
        warm_start=targets["tied"],
        eagle_aux_hidden_state_layer_ids=[0, 1, 3],
    )
    repo = serve(hub, "someone/EAGLE3-tiny-reference", ckpt)
    rc = cli_main(["models", "import-head", str(targets["tied"]), repo, "--measure-prompts", "2", "--max-tokens", "16"])
    return targets["tied"], rc, repo


def test_cli_imports_and_measures_before_auto_uses_the_head(imported: tuple[Path, int, str], worker: WorkerClient) -> None:
    model, rc, repo = imported
    assert rc == 0
    pack = find_pack(model)
    assert pack is not None and pack.eagle_measured
    eagle = pack.manifest["eagle"]
    assert eagle["source"]["repo"] == repo
    assert eagle["source"]["layout"].startswith("LlamaForCausalLMEagle3") and "pytorch .bin" in eagle["source"]["layout"]
    assert eagle["layers"] == [0, 1, 3]
    m = eagle["measured"]
    assert m["prompts"] == 2 and m["non_tie_divergences"] == 0 and m["early_endings"] == 0
    if m["placement"].startswith("0 GPU layers"):
        assert m["identical_to_vanilla"] == "2/2"
    # the measurement runs eagle as the app does, verifying only the drafts the gate prices as paying;
    # on this tiny target that depends on the machine's timings, so what it drafted must land, and
    # whether the head's drafts land at all is checked on a fixed chain below
    assert m["drafted"] == 0 or m["accept_rate"] > 0.3, m
    assert m["decode_tok_s_median"] > 0 and m["vanilla_decode_tok_s_median"] > 0
    assert worker.load(model, PLACEMENT, mode="eagle", n_draft=3).mode == "eagle"
    stats = [e for e in worker.stream([{"role": "user", "content": PROMPTS[0]}], GREEDY) if isinstance(e, p.Stats)]
    assert stats and stats[-1].accel["accept_rate"] > 0.3, stats
    assert answers(worker, model, "eagle") == answers(worker, model, "vanilla")
    assert "eagle" in auto_candidates(worker, model).split(";")[0]


def test_an_imported_head_is_refused_for_another_model(
    imported: tuple[Path, int, str], targets: dict[str, Path], worker: WorkerClient
) -> None:
    model, _rc, _repo = imported
    pack = find_pack(model)
    assert pack is not None and pack.eagle_head is not None
    other = targets["other"]
    with pytest.raises(AccelerationError) as err:
        check_eagle_head(pack.eagle_head, other)
    assert err.value.kind == "wrong_head" and "trained for another model" in str(err.value)
    # a manifest that claims the head for the other model does not fool the engine: the GGUF is bound
    fake = pack.folder.parent / "fake-for-other"
    fake.mkdir(parents=True)
    shutil.copyfile(pack.eagle_head, fake / "eagle.gguf")
    (fake / "manifest.json").write_text(json.dumps({**pack.manifest, "target_sha256": model_sha256(other)}))
    try:
        with pytest.raises(WorkerError) as werr:
            worker.load(other, PLACEMENT, mode="eagle")
        assert werr.value.kind == "wrong_head" and "trained for another model" in str(werr.value)
    finally:
        shutil.rmtree(fake)


# ---- wrong inputs ---------------------------------------------------------------------------------


def _truncate(folder: Path) -> Path:
    f = folder / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    return folder


BAD = {
    "wrong hidden size": (
        lambda d: write_checkpoint(d, "specforge", Shape(n_embd=128, n_ff=256)),
        "wrong_model",
        "hidden size 64",
    ),
    "other vocabulary": (lambda d: write_checkpoint(d, "specforge", Shape(n_vocab=32000)), "wrong_model", "32000-token"),
    "unknown architecture": (
        lambda d: write_checkpoint(d, "specforge", architectures=["Qwen2ForCausalLM"]),
        "unknown_architecture",
        "'Qwen2ForCausalLM'",
    ),
    "truncated safetensors": (lambda d: _truncate(write_checkpoint(d, "specforge")), "damaged", "truncated"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_get_clear_errors(case: str, hub: HubServer, targets: dict[str, Path], tmp_path: Path) -> None:
    make, kind, words = BAD[case]
    repo = serve(hub, f"someone/bad-{case.replace(' ', '-')}", make(tmp_path / "ckpt"))
    with pytest.raises(HeadImportError) as err:
        import_head(targets["bad"], repo, work=tmp_path / "work")
    assert err.value.kind == kind and words in str(err.value), str(err.value)
    assert find_pack(targets["bad"]) is None, "nothing is installed after a failed import"


def test_a_missing_repo_is_named(hub: HubServer, targets: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(HeadImportError) as err:
        import_head(targets["bad"], "nobody/no-such-head", work=tmp_path / "work")
    assert err.value.kind == "not_found" and "nobody/no-such-head was not found" in str(err.value)


def test_a_tokenizer_the_converter_cannot_be_given_is_refused_before_any_download(hub: HubServer, tmp_path: Path) -> None:
    """A SentencePiece GGUF (Llama 2, Mistral 7B v0.1): its tokenizer.model cannot be rebuilt from the GGUF."""
    from engine.models.head_convert import converter_script

    spm = converter_script().parent / "models" / "ggml-vocab-llama-spm.gguf"
    model = write_tiny_gguf(tmp_path / "spm.gguf", "llama", n_layer=N_LAYER, tokenizer_from=spm)
    before = len(hub.requests)
    with pytest.raises(HeadImportError) as err:
        import_head(model, "someone/any-head", work=tmp_path / "work")
    assert err.value.kind == "unsupported_model" and "byte-level BPE" in str(err.value)
    assert len(hub.requests) == before


def test_the_catalog_pairs_models_with_published_heads() -> None:
    assert [h.head for h in heads_for("Meta Llama 3.1 8B Instruct", "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")] == [
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    ]
    assert "AngelSlim/Qwen3-4B_eagle3" in [h.head for h in heads_for("Qwen3 4B", "Qwen3-4B-Q4_K_M.gguf")]
    assert heads_for("SmolLM2 135M Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf") == []
