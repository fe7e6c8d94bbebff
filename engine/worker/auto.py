"""`auto`'s proof: every mode available for this model measured against vanilla on this machine, in
small units while the worker is idle, so the first answer never waits for it. The decision is
cached per (model, acceleration weights, native build, CPU, threads, context length, placement): a
new build or new weights are measured again.

Only a quiet machine's measurement counts: a unit during which other processes kept a core busy is
set aside and run again later (never cached), since llama.cpp's spinning threads collapse beside a
busy neighbour and every mode would look like noise. Speeds compare like with like: vanilla's speed
is kept per thread count and prompt-length band (VanillaReference), an answer is compared only with
vanilla measured in its own conditions, and answers that keep running slower than that contradict
auto's decision (AnswerCheck): it is forgotten and measured again."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from engine import protocol as p
from engine.atomic import write_text_atomic
from engine.worker.threads import TOLERATED_CORES, CpuSample, cores_used_by_others, sample_cpu

if TYPE_CHECKING:  # only a type: auto's rules import (and test) without the native build
    from engine.llm.decoders import Decoder

CALIBRATION_TOKENS = 48
MIN_GAIN = 1.03  # below it a mode is noise away from vanilla: keep vanilla
BUSY_RETRY_S = (2.0, 60.0)  # a unit set aside for load is tried again after this wait, doubling up to the second
MIN_COMPARE_TOKENS = 16  # an answer with fewer decoded tokens says too little about its speed
SLOWER = 0.97  # an answer below this share of vanilla's speed ran slower than vanilla
CONTRADICTIONS = 3  # comparable answers in a row that ran slower: auto's decision is measured again


def prompt_band(n_tokens: int) -> int:
    """Decode slows as the context fills, so speeds compare within a band of prompt lengths:
    0 up to 512 tokens, 1 up to 2048, 2 up to 8192, and so on (x4)."""
    band, limit = 0, 512
    while n_tokens > limit:
        band, limit = band + 1, limit * 4
    return band


class VanillaReference:
    """Vanilla's decode speed on this machine per (decode threads, prompt band): from auto's quiet
    calibration and from vanilla's own answers. Another mode's answer is compared only with vanilla
    in its own conditions; where none was measured there is no ratio (never one from other conditions)."""

    def __init__(self, speeds: dict[str, float] | None = None) -> None:
        self.speeds: dict[str, float] = dict(speeds or {})  # "threads/band" -> tok/s

    @staticmethod
    def key(threads: int, band: int) -> str:
        return f"{threads}/{band}"

    def get(self, threads: int, band: int) -> float:
        return self.speeds.get(self.key(threads, band), 0.0)

    def record(self, threads: int, band: int, tok_s: float) -> None:
        if tok_s > 0:
            self.speeds[self.key(threads, band)] = tok_s

    def ratio(self, tok_s: float, threads: int, band: int) -> float:
        """tok_s against vanilla in the same conditions; 0 where vanilla was not measured in them."""
        ref = self.get(threads, band)
        return tok_s / ref if ref > 0 and tok_s > 0 else 0.0


class AnswerCheck:
    """Whether the answers bear auto's decision out: CONTRADICTIONS comparable answers in a row that
    ran slower than vanilla in their conditions contradict it."""

    def __init__(self) -> None:
        self.slow = 0

    def add(self, ratio: float) -> bool:
        """One answer's ratio to vanilla (0: not comparable, says nothing); True once contradicted."""
        if ratio <= 0:
            return False
        self.slow = self.slow + 1 if ratio < SLOWER else 0
        return self.slow >= CONTRADICTIONS


def choose(speeds: dict[str, float]) -> str:
    best = max(speeds, key=lambda m: speeds[m])
    return best if speeds[best] > speeds["vanilla"] * MIN_GAIN else "vanilla"


def explain(speeds: dict[str, float], mode: str, failed: dict[str, str] | None = None) -> str:
    v = speeds["vanilla"]
    parts = ", ".join(f"{m} {s:.0f} tok/s ({s / max(v, 1e-9):.2f}x)" for m, s in speeds.items())
    skipped = "".join(f"; {m} could not run: {why}" for m, why in (failed or {}).items())
    return f"auto: measured here {parts}; using {mode}{skipped}"


class DecisionCache:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _all(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def get(self, key: str) -> dict | None:
        return self._all().get(key)

    def like(self, key: str) -> dict:
        """The entry measured for the same model, weights, build, machine, context and placement under
        any set of modes ({} if none): an explicitly chosen mode can still be compared with vanilla."""
        prefix = key.rsplit("|", 1)[0] + "|"
        for other, entry in self._all().items():
            if other.startswith(prefix) and entry.get("speeds"):
                return entry
        return {}

    def put(self, key: str, mode: str, speeds: dict[str, float], failed: dict[str, str], reference: dict[str, float]) -> None:
        """Only ever a quiet machine's measurement (AutoCalibration sets the others aside)."""
        data = self._all()
        data[key] = {"mode": mode, "speeds": speeds, "failed": failed, "vanilla_reference": reference}
        write_text_atomic(self.path, json.dumps(data, indent=1))

    def forget(self, key: str) -> None:
        """A decision the answers contradicted: the next load measures again."""
        data = self._all()
        if data.pop(key, None) is not None:
            write_text_atomic(self.path, json.dumps(data, indent=1))


class AutoCalibration:
    """Units of (prompt, mode), interleaved so that drift hits every mode alike. A unit interrupted
    by a command (a user's question) is dropped and run again later; one that fails removes its mode;
    one during which other processes kept more than TOLERATED_CORES busy is set aside and tried again
    after a wait (BUSY_RETRY_S), so a busy machine's speeds are never counted. threads: the decode
    threads the units run with; sample: the machine's CPU readings (tests inject a busy one)."""

    def __init__(
        self,
        prompts: list[list[int]],
        makers: dict[str, Callable[[], Decoder]],
        vanilla: Decoder,
        threads: int = 1,
        sample: Callable[[], CpuSample] = sample_cpu,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        modes = ["vanilla", *makers]
        self.prompts, self.makers = prompts, makers
        self.units = [(i, m) for i in range(len(prompts)) for m in modes]
        self.decoders: dict[str, Decoder] = {"vanilla": vanilla}
        self.totals = {m: [0, 0.0] for m in modes}
        self.failed: dict[str, str] = {}
        self.threads, self.band = threads, max((prompt_band(len(t)) for t in prompts), default=0)
        self.sample, self.clock = sample, clock
        self.busy_cores = 0.0  # what other processes used during the unit set aside last
        self.postponed = False  # units are being set aside for load (until one counts again)
        self.retry_at = 0.0
        self._wait = BUSY_RETRY_S[0]

    @property
    def done(self) -> bool:
        return not self.units

    @property
    def waiting(self) -> bool:
        """Set aside for load: nothing to run before retry_at."""
        return self.clock() < self.retry_at

    def _drop(self, mode: str, why: str) -> None:
        self.failed[mode] = why
        self.units = [u for u in self.units if u[1] != mode]
        self.totals.pop(mode, None)
        dec = self.decoders.pop(mode, None)
        if dec is not None:
            dec.close()

    def step(self, interrupted: Callable[[], bool]) -> None:
        if self.waiting:
            return
        i, mode = self.units[0]
        before = self.sample()
        try:
            dec = self.decoders.get(mode) or self.decoders.setdefault(mode, self.makers[mode]())
        except Exception as exc:  # a mode that cannot start here (LoadError, RuntimeError): measured as absent
            self._drop(mode, str(exc))
            return
        n, t_first, complete = 0, 0.0, True
        stream = dec.stream(self.prompts[i], p.Sampling.greedy(CALIBRATION_TOKENS))
        try:
            for _tok in stream:
                n += 1
                if n == 1:
                    t_first = time.perf_counter()
                if n >= CALIBRATION_TOKENS:
                    break
                if interrupted():
                    complete = False
                    break
        except RuntimeError as exc:
            self._drop(mode, str(exc))
            complete = False
        finally:
            stream.close()
            for d in self.decoders.values():
                d.forget()  # they share the target's KV cache
        if not complete:
            return
        elapsed = time.perf_counter() - t_first
        busy = cores_used_by_others(before, self.sample())
        if busy > TOLERATED_CORES:  # measured beside a busy neighbour: says nothing about this machine
            self.busy_cores, self.postponed = busy, True
            self.retry_at = self.clock() + self._wait
            self._wait = min(self._wait * 2, BUSY_RETRY_S[1])
            return
        self.postponed, self._wait = False, BUSY_RETRY_S[0]
        self.totals[mode][0] += n - 1
        self.totals[mode][1] += elapsed
        self.units.pop(0)

    def speeds(self) -> dict[str, float]:
        return {m: n / max(t, 1e-9) for m, (n, t) in self.totals.items()}

    def reference(self) -> dict[str, float]:
        """Vanilla's measured speed in the units' conditions (VanillaReference.speeds)."""
        ref = VanillaReference()
        ref.record(self.threads, self.band, self.speeds().get("vanilla", 0.0))
        return ref.speeds

    def take(self, mode: str) -> Decoder:
        """The chosen mode's decoder; every other measured one (but vanilla's) is closed."""
        for name, dec in list(self.decoders.items()):
            if name not in (mode, "vanilla"):
                dec.close()
        return self.decoders[mode]

    def close(self) -> None:
        for name, dec in self.decoders.items():
            if name != "vanilla":
                dec.close()
