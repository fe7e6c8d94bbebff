"""`specee bench --hog`: the same bench beside a process that keeps one core busy, as a laptop's
browser or compiler does; the target is at least half the quiet decode speed."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def busy_neighbour() -> Iterator[subprocess.Popen]:
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield hog
    finally:
        hog.kill()
        hog.wait()


def compare(quiet: dict, busy: dict) -> str:
    lines = ["decode speed beside a busy neighbour, per mode (target >= 0.50 of quiet):"]
    speeds = {m["mode"]: m["decode_tok_s_median"] for m in busy["modes"]}
    for m in quiet["modes"]:
        q, b = m["decode_tok_s_median"], speeds.get(m["mode"], 0.0)
        if q:
            lines.append(f"  {m['mode']:<12} quiet {q:6.1f} tok/s, busy {b:6.1f} tok/s = {b / q:.2f} of quiet")
    return "\n".join(lines)
