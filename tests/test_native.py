"""Our native build is what the engine loads, and the build pipeline behaves."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.native import EXPECTED_API_VERSION, build_info, require_patched

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "native"))
import build as native_build  # noqa: E402

from tests.conftest import BACKENDS, gpu_layers  # noqa: E402


def test_loaded_llama_cpp_is_our_patched_build(native_build: dict) -> None:
    info = require_patched()
    assert info["api_version"] >= EXPECTED_API_VERSION
    assert "build-info" in info["features"]
    patches = sorted(p.stem for p in (REPO / "native" / "patches").glob("*.patch"))
    assert info["patches"].split(",") == patches


def test_build_key_of_the_checkout_matches_the_loaded_library(native_build: dict) -> None:
    key = subprocess.run([sys.executable, str(REPO / "native" / "build.py"), "--print-key"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert build_info()["build_key"] == key, "native sources changed since the build: run `make setup`"


def test_build_key_changes_with_any_input(tmp_path: Path, monkeypatch) -> None:
    base = native_build.make_recipe(upstream=False)
    extra = tmp_path / "extra.cpp"
    extra.write_text("// new\n")
    changed = native_build.Recipe(base.patches, (*base.sources, extra), base.cmake_args, base.backend)
    assert changed.key != base.key
    flags = native_build.Recipe(base.patches, base.sources, (*base.cmake_args, "-DX=1"), base.backend)
    assert flags.key != base.key
    assert native_build.make_recipe(upstream=True).key != base.key
    # the same file in another folder (native/src/ -> native/src/spec/) is another build (issue 47)
    first = base.sources[0]
    moved = tmp_path / "native" / "src" / "spec" / first.name
    moved.parent.mkdir(parents=True)
    moved.write_bytes(first.read_bytes())
    monkeypatch.setattr(native_build, "NATIVE_DIR", tmp_path / "native")
    at_home = tmp_path / "native" / "src" / first.name
    at_home.write_bytes(first.read_bytes())
    others = tuple(s for s in base.sources if s != first)
    here = native_build.Recipe(base.patches, (at_home, *others), base.cmake_args, base.backend)
    there = native_build.Recipe(base.patches, (moved, *others), base.cmake_args, base.backend)
    assert here.key != there.key


def test_sync_tree_rewrites_only_changed_files(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "d").mkdir(parents=True)
    (src / "a.c").write_text("a")
    (src / "d" / "b.c").write_text("b")
    assert native_build.sync_tree(src, dst) == 2
    mtime = (dst / "a.c").stat().st_mtime_ns
    (src / "d" / "b.c").write_text("B")
    (dst / "stale.c").write_text("x")
    assert native_build.sync_tree(src, dst) == 2  # b.c rewritten, stale.c removed
    assert (dst / "a.c").stat().st_mtime_ns == mtime
    assert (dst / "d" / "b.c").read_text() == "B" and not (dst / "stale.c").exists()


def test_compile_progress_follows_the_main_build_not_a_sub_build() -> None:
    """vulkan-shaders-gen's own "[1/2]", "[2/2]" in the middle of the main build once sent the bar to
    100% forty seconds into a seven-minute compile (the order of a real build log's lines)."""
    progress = native_build.BuildProgress()
    lines = ["-- Configuring done", "  [0/2] Re-running CMake", "  [1/477] cd x", "  [11/477] g++ a.c",
             "  [1/2] Building CXX object vulkan-shaders-gen", "  [2/2] Linking vulkan-shaders-gen",
             "  [12/477] g++ b.c", "  [477/477] Linking libllama.so"]  # fmt: skip
    assert [progress.percent(line) for line in lines] == [None, 0, 0, 2, None, None, 2, 100]
    make = native_build.BuildProgress()
    assert [make.percent(line) for line in ["[ 10%] Building", "[100%] Built target ggml"]] == [10, 100]


def test_unknown_backend_is_an_actionable_error(monkeypatch) -> None:
    monkeypatch.setenv("SPECEE_BACKEND", "quantum")
    try:
        native_build.detect_backends()
    except native_build.BuildError as exc:
        assert "how to fix" in str(exc) and exc.step == "detect"
    else:
        raise AssertionError("expected BuildError")


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_batches_give_bit_identical_logits_to_one_token_decodes(model_path: Path, backend: str) -> None:
    """A verify batch of a few tokens must compute exactly what one-token decoding computes, or
    speculative decoding would drift from vanilla output (native/build.py: GGML_LLAMAFILE=OFF)."""
    import numpy as np
    from llama_cpp import Llama
    from llama_cpp import llama_cpp as C

    llm = Llama(str(model_path), n_ctx=512, n_threads=2, n_gpu_layers=gpu_layers(backend), verbose=False)
    ctx, mem = llm._ctx.ctx, C.llama_get_memory(llm._ctx.ctx)

    def decode(tokens: list[int], pos0: int) -> np.ndarray:
        b = C.llama_batch_init(len(tokens), 0, 1)
        for i, t in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, pos0 + i, 1, 1
            b.seq_id[i][0] = 0
        b.n_tokens = len(tokens)
        assert C.llama_decode(ctx, b) == 0
        out = np.ctypeslib.as_array(C.llama_get_logits(ctx), shape=(len(tokens), llm.n_vocab())).copy()
        C.llama_batch_free(b)
        return out

    prompt = llm.tokenize(
        b"<|im_start|>user\nName a fruit and describe its taste.<|im_end|>\n<|im_start|>assistant\n", special=True
    )
    C.llama_memory_clear(mem, True)
    seq = [int(decode(prompt, 0)[-1].argmax())]
    singles = []
    for i in range(11):
        row = decode([seq[-1]], len(prompt) + i)[0]
        singles.append(row)
        seq.append(int(row.argmax()))
    C.llama_memory_clear(mem, True)
    decode(prompt, 0)
    batched = np.concatenate([decode(seq[i : i + 4], len(prompt) + i) for i in range(0, 12, 4)])
    assert np.array_equal(batched[:11], np.stack(singles)), "verify batches must be bit-identical"
    llm.close()


def _library_dirs() -> list[Path]:
    """The installed build's libraries, plus any folders in SPECEE_CHECK_LIB_DIRS (e.g. a CUDA
    build's libraries copied to a CPU machine: the check reads symbols, it loads nothing)."""
    import os

    import llama_cpp

    extra = [Path(d) for d in os.environ.get("SPECEE_CHECK_LIB_DIRS", "").split(os.pathsep) if d]
    return [Path(llama_cpp.__file__).parent / "lib", *extra]


@pytest.mark.skipif(sys.platform != "linux", reason="ELF symbol tables; macOS and Windows export explicitly")
def test_no_native_library_exports_cxx_library_symbols(native_build: dict) -> None:
    """Patch 0004 (native/src/c-api.map): an exported std:: instantiation in one library (CUDA's
    host code) interposes on another's, so model load crashed when numpy came before llama_cpp.
    C++ exports are allowed only for libllama's own free functions (its extension API)."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    libs = sorted({p.resolve() for d in _library_dirs() for p in d.glob("lib*.so*") if p.is_file()})
    assert any(p.name.startswith("libllama") for p in libs) and any(p.name.startswith("libggml-base") for p in libs)
    offenders: dict[str, list[str]] = {}
    for lib in libs:
        out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
        cxx = [line.split()[-1] for line in out.splitlines() if line.split() and line.split()[-1].startswith("_Z")]
        names = subprocess.run(["c++filt"], input="\n".join(cxx), capture_output=True, text=True).stdout.splitlines()
        # a free function llama_x(...) of libllama is fine; anything else (std::, typeinfo/vtable for
        # a class, a method llama_model::f) is not
        bad = [n for n in names if not (lib.name.startswith("libllama") and re.fullmatch(r"llama_\w+\(.*\)( const)?", n))]
        if bad:
            offenders[lib.name] = [f"{len(bad)} C++ symbols, e.g.", *bad[:5]]
    assert not offenders, offenders
