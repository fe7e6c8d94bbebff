"""What machine we run on: CPU, ISA features llama.cpp cares about, memory, power.

GPU enumeration through ggml's backend devices arrives with the placement work; here the CPU
facts that decide threads and memory.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

# ISA features that change which llama.cpp kernels run.
ISA_FLAGS = (
    "sse3",
    "ssse3",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vnni",
    "avx_vnni",
    "amx_tile",
    "neon",
    "asimd",
    "sve",
    "dotprod",
    "i8mm",
)


@dataclass
class Hardware:
    cpu_model: str
    physical_cores: int
    logical_cores: int
    isa: list[str] = field(default_factory=list)
    ram_total_gb: float = 0.0
    ram_available_gb: float = 0.0
    on_battery: bool | None = None
    os: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def physical_cores() -> int:
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def _cpu_model_and_flags() -> tuple[str, list[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^(model name|Hardware|cpu model)\s*:\s*(.+)$", text, re.M)
        if m:
            model = m.group(2).strip()
        f = re.search(r"^(flags|Features)\s*:\s*(.+)$", text, re.M)
        if f:
            flags = set(f.group(2).split())
    except OSError:
        pass
    if platform.machine() in ("arm64", "aarch64"):
        flags.add("neon")
    return model, [name for name in ISA_FLAGS if name in flags]


def detect() -> Hardware:
    model, isa = _cpu_model_and_flags()
    mem = psutil.virtual_memory()
    battery = None
    try:
        b = psutil.sensors_battery()
        battery = None if b is None else not b.power_plugged
    except (AttributeError, NotImplementedError, OSError):
        pass
    return Hardware(
        cpu_model=model,
        physical_cores=physical_cores(),
        logical_cores=psutil.cpu_count(logical=True) or 1,
        isa=isa,
        ram_total_gb=round(mem.total / 2**30, 1),
        ram_available_gb=round(mem.available / 2**30, 1),
        on_battery=battery,
        os=f"{platform.system()} {platform.release()}",
    )
