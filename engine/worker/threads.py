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

SAMPLE_INTERVAL_S = 0.5
# A neighbour using less than this share of a core (an app window repainting) keeps every thread.
TOLERATED_CORES = 0.4


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
    own = psutil.Process().cpu_times()
    return CpuSample(time.monotonic(), busy, own.user + own.system)


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
    ) -> None:
        self.apply, self.n_max, self.sample, self.interval_s = apply, n_max, sample, interval_s
        self.current = n_max
        self.others_cores = 0.0
        self._last = sample()

    def restart(self) -> None:
        """At the start of an answer: measure from now (what ran between answers says little)."""
        self._last = self.sample()

    def tick(self) -> int:
        """Call between decode steps; returns the thread count now in use."""
        now = self.sample()
        wall = now.wall_s - self._last.wall_s
        if wall < self.interval_s:
            return self.current
        self.others_cores = max(0.0, (now.busy_s - self._last.busy_s) - (now.own_s - self._last.own_s)) / wall
        self._last = now
        want = threads_for(self.others_cores, self.n_max)
        if want != self.current:
            self.current = want
            self.apply(want)
        return self.current
