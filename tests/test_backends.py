"""One build, backends chosen at run time: the CPU backend and the GPU backends this machine could
compile are modules (GGML_BACKEND_DL) that ggml loads from beside itself (patch 0011); a machine
without a driver runs on the CPU, and a software Vulkan device is never where a model goes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.native import backends
from engine.placement.machine import ALLOW_SOFTWARE_GPU_ENV, devices, is_software_gpu, this_machine, usable_gpus
from tests.conftest import HAS_GPU, LAVAPIPE_ICDS, ON_LAVAPIPE, TEST_GPU

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "native"))
import build as native_build  # noqa: E402

pytestmark = pytest.mark.slow  # the native build, subprocesses


def _shipped() -> dict[str, dict]:
    return {b["name"]: b for b in backends()}


def test_the_build_ships_the_vulkan_backend_wherever_its_toolchain_is() -> None:
    found = _shipped()
    assert found["cpu"]["shipped"] and found["cpu"]["loaded"] and found["cpu"]["devices"] == 1
    if native_build.vulkan_toolchain() and not os.environ.get("SPECEE_BACKEND"):
        assert found.get("vulkan", {}).get("shipped"), "glslc and the Vulkan headers are here: the build must carry Vulkan"


def test_every_gpu_case_runs_on_lavapipe_where_there_is_no_real_gpu() -> None:
    """The `gpu` cases of the backend-parametrised tests are skipped nowhere the Vulkan backend is
    built: with no real GPU they run on Mesa's lavapipe."""
    if "vulkan" not in _shipped() or not LAVAPIPE_ICDS or TEST_GPU == "real":
        pytest.skip("no Vulkan backend in this build or no lavapipe (mesa-vulkan-drivers) on this machine")
    assert HAS_GPU
    if ON_LAVAPIPE:
        assert any(is_software_gpu(d) and d["backend"].lower() == "vulkan" for d in devices())


def test_a_process_that_only_knows_llama_cpp_finds_the_backends() -> None:
    """llama-cpp-python never calls ggml_backend_load_all: without patch 0011 a dynamic-backend
    build would have no device at all and every model load would fail."""
    code = (
        "import ctypes; from llama_cpp import llama_cpp as C; lib = C._lib;"
        "lib.ggml_backend_dev_count.restype = ctypes.c_size_t; print(lib.ggml_backend_dev_count())"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_BACKEND_PATH",)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd="/")
    assert int(out.stdout.strip()) >= 1  # at least the CPU, found beside libggml (not in the cwd or the python binary's dir)


@pytest.mark.skipif(not ON_LAVAPIPE, reason="the tests did not opt into lavapipe here")
def test_a_software_vulkan_device_is_listed_but_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    lavapipe = [d for d in devices() if is_software_gpu(d)]
    assert lavapipe and lavapipe[0]["type"] in ("gpu", "igpu")
    usable, why = usable_gpus()
    assert usable == [] and this_machine().gpu is None
    assert any(ALLOW_SOFTWARE_GPU_ENV in reason for reason in why)
    monkeypatch.setenv(ALLOW_SOFTWARE_GPU_ENV, "1")
    assert usable_gpus()[0] == lavapipe and this_machine().gpu is not None


def test_doctor_without_a_vulkan_driver_runs_on_the_cpu_and_says_why() -> None:
    env = {**os.environ, "VK_ICD_FILENAMES": "/nonexistent/no_icd.json"}
    env.pop("GGML_VK_VISIBLE_DEVICES", None)
    cmd = [sys.executable, "-m", "engine.cli", "doctor", "--json"]
    report = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)
    gpu = report["gpu"]
    assert all(d["type"] == "cpu" for d in gpu["devices"]) and gpu["gpu"] is None
    assert gpu["why_no_gpu"]
    text = subprocess.run([*cmd[:-1]], capture_output=True, text=True, check=True, env=env).stdout
    assert "backends cpu (1 device)" in text and "GPU      not used: " in text
