"""`auto`'s proof: every mode available for this model measured against vanilla on this machine, in
small units while the worker is idle, so the first answer never waits for it. The decision is
cached per (model, acceleration weights, native build, CPU, threads, placement): a new build or new
weights are measured again."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from engine import protocol as p
from engine.atomic import write_text_atomic
from engine.llm.decoders import Decoder

CALIBRATION_TOKENS = 48
MIN_GAIN = 1.03  # below it a mode is noise away from vanilla: keep vanilla


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

    def speeds_like(self, key: str) -> dict[str, float]:
        """Speeds measured for the same model, weights, build, machine and placement under any set of
        modes: an explicitly chosen mode's meter can still show its ratio to vanilla."""
        prefix = key.rsplit("|", 1)[0] + "|"
        for other, entry in self._all().items():
            if other.startswith(prefix) and entry.get("speeds"):
                return dict(entry["speeds"])
        return {}

    def put(self, key: str, mode: str, speeds: dict[str, float], failed: dict[str, str]) -> None:
        data = self._all()
        data[key] = {"mode": mode, "speeds": speeds, "failed": failed}
        write_text_atomic(self.path, json.dumps(data, indent=1))


class AutoCalibration:
    """Units of (prompt, mode), interleaved so that drift hits every mode alike. A unit interrupted
    by a command (a user's question) is dropped and run again later; one that fails removes its mode."""

    def __init__(self, prompts: list[list[int]], makers: dict[str, Callable[[], Decoder]], vanilla: Decoder) -> None:
        modes = ["vanilla", *makers]
        self.prompts, self.makers = prompts, makers
        self.units = [(i, m) for i in range(len(prompts)) for m in modes]
        self.decoders: dict[str, Decoder] = {"vanilla": vanilla}
        self.totals = {m: [0, 0.0] for m in modes}
        self.failed: dict[str, str] = {}

    @property
    def done(self) -> bool:
        return not self.units

    def _drop(self, mode: str, why: str) -> None:
        self.failed[mode] = why
        self.units = [u for u in self.units if u[1] != mode]
        self.totals.pop(mode, None)
        dec = self.decoders.pop(mode, None)
        if dec is not None:
            dec.close()

    def step(self, interrupted: Callable[[], bool]) -> None:
        i, mode = self.units[0]
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
        if complete:
            self.totals[mode][0] += n - 1
            self.totals[mode][1] += time.perf_counter() - t_first
            self.units.pop(0)

    def speeds(self) -> dict[str, float]:
        return {m: n / max(t, 1e-9) for m, (n, t) in self.totals.items()}

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
