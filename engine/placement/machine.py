"""This machine as a planner profile: CPU and RAM from engine.hardware, GPUs from ggml's own
backend device list (through our C API), cached by a fingerprint of what was found."""

from __future__ import annotations

import json

from engine.hardware import detect
from engine.placement.planner import Gpu, HardwareProfile

# Sustained bandwidth guess when the micro-benchmark cannot run.
DEFAULT_CPU_BW_GBS = 30.0


def measure_cpu_bandwidth() -> float:
    """Memory read bandwidth in GB/s (decode is bound by it): a 0.3 s micro-benchmark, cached per
    CPU and RAM size, so plans here use this machine's number rather than a guess."""
    import time

    import numpy as np

    from engine.atomic import write_text_atomic
    from engine.paths import cache_dir

    hw = detect()
    key = f"{hw.cpu_model}|{hw.ram_total_gb}"
    path = cache_dir() / "cpu-bandwidth.json"
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key not in cache:
        a = np.ones(32 * 1024 * 1024, dtype=np.float64)  # 256 MB, far beyond any cache
        a.sum()
        t0 = time.perf_counter()
        for _ in range(3):
            a.sum()
        cache[key] = round(3 * a.nbytes / (time.perf_counter() - t0) / 1e9, 1)
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
        bw = measure_cpu_bandwidth()
    except (MemoryError, OSError):
        bw = DEFAULT_CPU_BW_GBS
    return HardwareProfile(f"this machine ({hw.cpu_model})", hw.ram_total_gb, hw.ram_available_gb, bw,
                           hw.physical_cores, gpu)  # fmt: skip


def measure_memory(model_path, n_ctx: int, n_gpu_layers: int = 0, n_first: int = -1, output_on_gpu: bool = False) -> dict:  # type: ignore[no-untyped-def]
    """llama.cpp's dry-run measurement (model, KV context, compute buffers; host vs device bytes)."""
    from engine import native

    raw = native.lib().specee_measure_memory(str(model_path).encode(), n_ctx, n_gpu_layers, n_first, output_on_gpu)
    if raw is None:
        raise RuntimeError(f"llama.cpp could not measure {model_path}")
    return json.loads(raw.decode())
