"""Decode threads follow what other processes leave free (engine/worker/threads.py)."""

from __future__ import annotations

from engine.worker.threads import CpuSample, ThreadGovernor, sample_cpu, threads_for


def test_a_busy_core_takes_one_thread_and_light_noise_none() -> None:
    assert threads_for(0.0, 2) == 2
    assert threads_for(0.3, 2) == 2  # a window repainting
    assert threads_for(0.95, 2) == 1  # a busy-loop neighbour
    assert threads_for(3.0, 2) == 1  # never fewer than one
    assert threads_for(1.0, 8) == 7


class FakeMachine:
    """Two cores; `others` cores busy elsewhere, `own` cores used by us, per second."""

    def __init__(self) -> None:
        self.t = self.busy = self.own_s = 0.0
        self.others, self.own = 0.0, 2.0

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.busy += (self.others + self.own) * seconds
        self.own_s += self.own * seconds

    def sample(self) -> CpuSample:
        return CpuSample(self.t, self.busy, self.own_s)


def test_the_governor_drops_a_thread_under_a_neighbour_and_takes_it_back() -> None:
    m = FakeMachine()
    applied: list[int] = []
    gov = ThreadGovernor(applied.append, 2, sample=m.sample, clock=lambda: m.t)
    m.advance(0.2)
    assert gov.tick() == 2 and applied == []  # too soon to judge
    m.advance(0.4)
    assert gov.tick() == 2
    m.others, m.own = 0.9, 1.1  # a hog starts; it gets most of a core
    m.advance(0.6)
    assert gov.tick() == 1 and applied == [1] and abs(gov.others_cores - 0.9) < 1e-9
    m.own = 1.0
    m.advance(0.6)
    assert gov.tick() == 1 and applied == [1]  # still busy: no flapping
    m.others = 0.0  # the hog is gone
    m.advance(0.6)
    assert gov.tick() == 2 and applied == [1, 2]


def test_the_real_sampler_reads_this_machine() -> None:
    a = sample_cpu()
    sum(i * i for i in range(200_000))  # some CPU time of our own
    b = sample_cpu()
    assert b.wall_s > a.wall_s and b.own_s >= a.own_s and b.busy_s >= a.busy_s
