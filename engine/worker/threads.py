"""Decode threads that survive a busy laptop.

llama.cpp's CPU threads meet at a spinning barrier after every operation. When another process
takes one of the cores, the thread scheduled behind it stalls every barrier for a time slice and
decode collapses (2 cores, Qwen2.5-Coder-0.5B: 45 tok/s quiet, 13-18 with a busy-loop neighbour on
2 threads, 22-25 on 1 thread). Sleeping instead of spinning (OMP_WAIT_POLICY=passive) costs half
the quiet speed, so the threads stay spinning and their number follows what the rest of the
machine leaves free: sampled twice a second during an answer, from the system's CPU time minus
our own, and applied with llama_set_n_threads (cheap, takes effect at the next decode call).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine import knobs

SAMPLE_INTERVAL_S = 0.5
# A neighbour using less than this share of a core (an app window repainting) keeps every thread.
TOLERATED_CORES = 0.4
# Tests simulate a busy machine by naming a file that holds the cores other processes use (a float,
# rewritten at will): the worker's readings then report that load instead of the machine's.
SIMULATED_LOAD_ENV = knobs.SIMULATED_LOAD.name


@dataclass
class CpuSample:
    wall_s: float
    busy_s: float  # CPU time of every process on the machine
    own_s: float  # CPU time of this process (all its threads)


def sample_cpu() -> CpuSample:
    import psutil

    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    busy = sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    # to the clock tick: a float sum of the same ticks read a femtosecond lower than the one before
    busy = round(busy, 2)
    own = psutil.Process().cpu_times()
    return CpuSample(time.monotonic(), busy, own.user + own.system)


def _simulated(path: str) -> Callable[[], CpuSample]:
    """Readings of this process's real CPU time beside a neighbour using as many cores as `path` says."""
    state = {"t": time.monotonic(), "others": 0.0}

    def sample() -> CpuSample:
        real = sample_cpu()
        try:
            cores = float(Path(path).read_text().strip() or 0)
        except (OSError, ValueError):
            cores = 0.0
        state["others"] += cores * max(0.0, real.wall_s - state["t"])
        state["t"] = real.wall_s
        return CpuSample(real.wall_s, real.own_s + state["others"], real.own_s)

    return sample


def machine_sampler() -> Callable[[], CpuSample]:
    """The machine's CPU readings (or, under SPECEE_TEST_SIMULATED_LOAD, a simulated neighbour's)."""
    path = knobs.SIMULATED_LOAD.text()
    return _simulated(path) if path else sample_cpu


def cores_used_by_others(before: CpuSample, after: CpuSample) -> float:
    """The cores other processes kept busy between two readings."""
    wall = after.wall_s - before.wall_s
    if wall <= 0:
        return 0.0
    return max(0.0, (after.busy_s - before.busy_s) - (after.own_s - before.own_s)) / wall


def threads_for(others_cores: float, n_max: int) -> int:
    """The decode threads to use when other processes keep `others_cores` cores busy."""
    taken = max(0, math.ceil(others_cores - TOLERATED_CORES))
    return max(1, n_max - taken)


class ThreadGovernor:
    def __init__(
        self,
        apply: Callable[[int], None],
        n_max: int,
        sample: Callable[[], CpuSample] = sample_cpu,
        interval_s: float = SAMPLE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,  # the clock of the samples' wall_s
    ) -> None:
        self.apply, self.n_max, self.sample, self.interval_s, self.clock = apply, n_max, sample, interval_s, clock
        self.current = n_max
        self.others_cores = 0.0
        self._last = sample()

    def restart(self) -> None:
        """At the start of an answer: measure from now (what ran between answers says little)."""
        self._last = self.sample()

    def tick(self) -> int:
        """Call between decode steps; returns the thread count now in use."""
        if self.clock() - self._last.wall_s < self.interval_s:
            return self.current  # reading the CPU times costs ~0.1 ms, ~1% of a step on a small model
        now = self.sample()
        self.others_cores = cores_used_by_others(self._last, now)
        self._last = now
        want = threads_for(self.others_cores, self.n_max)
        if want != self.current:
            self.current = want
            self.apply(want)
        return self.current
