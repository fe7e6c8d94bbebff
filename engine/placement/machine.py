"""This machine as a planner profile: CPU and RAM from engine.hardware, GPUs from ggml's own
backend device list (through our C API), cached by a fingerprint of what was found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine import knobs
from engine.hardware import detect
from engine.placement.planner import Gpu, HardwareProfile

# Sustained bandwidth guess when the micro-benchmark cannot run.
DEFAULT_CPU_BW_GBS = 30.0


def measure_cpu_bandwidth() -> float:
    """Sustained memory read bandwidth in GB/s with one thread per physical core, as decode reads
    weights (native micro-benchmark, 1 GB, ~0.6 s), cached per CPU, RAM size and core count. A
    single-threaded numpy sum measured 19 GB/s here where decode sustains ~38."""
    from engine import native
    from engine.atomic import write_text_atomic

    key, path, cache = _bandwidth_cache()
    if key not in cache:
        cache[key] = round(native.lib().specee_measure_read_bandwidth(detect().physical_cores, 1 << 30), 1)
        write_text_atomic(path, json.dumps(cache))
    return float(cache[key])


def cached_cpu_bandwidth() -> float | None:
    """measure_cpu_bandwidth's figure if it was measured on this machine before, else None."""
    key, _path, cache = _bandwidth_cache()
    return float(cache[key]) if key in cache else None


def _bandwidth_cache() -> tuple[str, Path, dict[str, Any]]:
    from engine.paths import cache_dir

    hw = detect()
    path = cache_dir() / "cpu-bandwidth.json"
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    return f"{hw.cpu_model}|{hw.ram_total_gb}|{hw.physical_cores}", path, cache


def devices() -> list[dict]:
    """ggml's backend devices (name, description, backend, type, memory_free/total in bytes)."""
    from engine import native

    return json.loads(native.lib().specee_devices_json().decode())


# Vulkan drivers that run on the CPU (Mesa's lavapipe reports itself as llvmpipe; Google's
# SwiftShader): ~200x slower than our CPU backend, so never a place for a user's model. ggml's Vulkan
# backend already hides CPU-type devices unless GGML_VK_VISIBLE_DEVICES names them; tests name
# lavapipe there and opt in here too.
SOFTWARE_GPU_NAMES = ("llvmpipe", "lavapipe", "softpipe", "swiftshader")
ALLOW_SOFTWARE_GPU_ENV = knobs.ALLOW_SOFTWARE_GPU.name


def is_software_gpu(device: dict) -> bool:
    text = f"{device.get('name', '')} {device.get('description', '')}".lower()
    return any(name in text for name in SOFTWARE_GPU_NAMES)


def vulkan_gpu_present() -> bool:
    """Whether ggml lists a Vulkan GPU device here (lavapipe included where a test opted into it)."""
    return any(d["backend"].lower() == "vulkan" and d["type"] in ("gpu", "igpu") for d in devices())


def usable_gpus() -> tuple[list[dict], list[str]]:
    """The GPU devices a model may go on, and why each other GPU device may not."""
    allow_software = bool(knobs.ALLOW_SOFTWARE_GPU.flag())
    usable, skipped = [], []
    for d in devices():
        if d["type"] not in ("gpu", "igpu"):
            continue
        if is_software_gpu(d) and not allow_software:
            skipped.append(f"{d['description'] or d['name']} ({d['backend']}) is a software renderer on the CPU, "
                           f"slower than the CPU backend; set {ALLOW_SOFTWARE_GPU_ENV}=1 to use it anyway")  # fmt: skip
            continue
        usable.append(d)
    return usable, skipped


def backend_report() -> dict:
    """What `specee doctor` says about GPUs: the backends this build ships and loaded, the devices
    found, the one the planner may use, and why a GPU is not used when none is."""
    from engine import native

    found = native.backends()
    usable, skipped = usable_gpus()
    why: list[str] = list(skipped)
    gpu_backends = [b for b in found if b["name"] != "cpu"]
    if not usable and not skipped:
        if not gpu_backends:
            why.append("this build has no GPU backend (native/build.py builds Vulkan where glslc and the Vulkan headers "
                       "are installed, CUDA where nvcc and an NVIDIA device are)")  # fmt: skip
        for b in gpu_backends:
            if not b["loaded"]:
                runtime = "the Vulkan loader libvulkan1 and a GPU driver" if b["name"] == "vulkan" else "the GPU driver"
                why.append(f"the {b['name']} backend did not load: its runtime is missing ({runtime})")
            elif b["devices"] == 0:
                why.append(f"the {b['name']} backend found no device it may use (no GPU driver installed, "
                           "or only a software renderer, which ggml hides)")  # fmt: skip
    chosen = usable[0] if usable else None
    return {"backends": found, "devices": devices(), "gpu": chosen, "why_no_gpu": [] if chosen else why}


def this_machine(measure: bool = False) -> HardwareProfile:
    """measure: run the CPU bandwidth benchmark if it never ran here (doctor, bench). Without it a
    load measures only when a usable GPU is found: the bandwidth weighs a CPU/GPU split; with no GPU
    it feeds only the speed prediction, which is not worth ~1 s of a first start (the default
    figure stands in until something measures)."""
    hw = detect()
    gpu = None
    usable = usable_gpus()[0]
    if usable:
        d = usable[0]
        gpu = Gpu(d["description"] or d["name"], d["backend"], d["memory_total"] / 1e9, d["memory_free"] / 1e9,
                  bw_gbs=200.0 if d["type"] == "gpu" else 60.0, unified=d["type"] == "igpu")  # fmt: skip
    cached = cached_cpu_bandwidth()
    if cached is not None:
        bw, measured = cached, True
    elif gpu is None and not measure:
        bw, measured = DEFAULT_CPU_BW_GBS, False
    else:
        try:
            bw, measured = measure_cpu_bandwidth(), True
        except (MemoryError, OSError):
            bw, measured = DEFAULT_CPU_BW_GBS, False
    return HardwareProfile(f"this machine ({hw.cpu_model})", hw.ram_total_gb, hw.ram_available_gb, bw,
                           hw.physical_cores, gpu, cpu_bw_measured=measured)  # fmt: skip


def measure_memory(
    model_path: str | Path, n_ctx: int, n_gpu_layers: int = 0, n_first: int = -1, output_on_gpu: bool = False
) -> dict:
    """llama.cpp's dry-run measurement (model, KV context, compute buffers; host vs device bytes)."""
    from engine import native

    raw = native.lib().specee_measure_memory(str(model_path).encode(), n_ctx, n_gpu_layers, n_first, output_on_gpu)
    if raw is None:
        raise RuntimeError(f"llama.cpp could not measure {model_path}")
    return json.loads(raw.decode())
