"""This machine as a planner profile: CPU and RAM from engine.hardware, GPUs from ggml's own
backend device list (through our C API), cached by a fingerprint of what was found."""

from __future__ import annotations

import json

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
    from engine.paths import cache_dir

    hw = detect()
    key = f"{hw.cpu_model}|{hw.ram_total_gb}|{hw.physical_cores}"
    path = cache_dir() / "cpu-bandwidth.json"
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key not in cache:
        cache[key] = round(native.lib().specee_measure_read_bandwidth(hw.physical_cores, 1 << 30), 1)
        write_text_atomic(path, json.dumps(cache))
    return float(cache[key])


def devices() -> list[dict]:
    """ggml's backend devices (name, description, backend, type, memory_free/total in bytes)."""
    from engine import native

    return json.loads(native.lib().specee_devices_json().decode())


def this_machine() -> HardwareProfile:
    hw = detect()
    gpu = None
    for d in devices():
        if d["type"] in ("gpu", "igpu"):
            gpu = Gpu(d["description"] or d["name"], d["backend"], d["memory_total"] / 1e9, d["memory_free"] / 1e9,
                      bw_gbs=200.0 if d["type"] == "gpu" else 60.0, unified=d["type"] == "igpu")  # fmt: skip
            break
    try:
        bw, measured = measure_cpu_bandwidth(), True
    except (MemoryError, OSError):
        bw, measured = DEFAULT_CPU_BW_GBS, False
    return HardwareProfile(f"this machine ({hw.cpu_model})", hw.ram_total_gb, hw.ram_available_gb, bw,
                           hw.physical_cores, gpu, cpu_bw_measured=measured)  # fmt: skip


def measure_memory(model_path, n_ctx: int, n_gpu_layers: int = 0, n_first: int = -1, output_on_gpu: bool = False) -> dict:  # type: ignore[no-untyped-def]
    """llama.cpp's dry-run measurement (model, KV context, compute buffers; host vs device bytes)."""
    from engine import native

    raw = native.lib().specee_measure_memory(str(model_path).encode(), n_ctx, n_gpu_layers, n_first, output_on_gpu)
    if raw is None:
        raise RuntimeError(f"llama.cpp could not measure {model_path}")
    return json.loads(raw.decode())
