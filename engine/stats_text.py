"""One-line, human-readable summaries of a Stats event's acceleration numbers (GUI and CLI).

SpecEE's numbers must agree with each other: an exit after the last layer runs every layer and skips
only the lm_head, so "exits 20%" beside "30.0/30 layers" is true but reads as a contradiction unless
the line says where the exits happen; and a mean a hair under the full depth must not round up to it."""

from __future__ import annotations

from typing import Any


def _pct(x: float, decimals: int = 0) -> str:
    """A share as a percentage that is never rounded to 0% or 100% when it is not."""
    text = f"{x:.{decimals}%}"
    if x > 0 and float(text[:-1]) == 0:
        return f"<{1 / 10**decimals:g}%"
    if x < 1 and float(text[:-1]) == 100:
        return f">{100 - 1 / 10**decimals:g}%"
    return text


def _layers(mean: float, n_layer: int) -> str:
    """The mean layers run, with as many decimals as it takes not to read as the full depth when
    some layers were skipped (29.96 of 30 is "29.96", not "30.0")."""
    if mean >= n_layer:
        return f"{n_layer:.1f}"
    for decimals in (1, 2, 3):
        text = f"{mean:.{decimals}f}"
        if float(text) < n_layer:
            return text
    return f"{mean:.4f}"


def exit_split(accel: dict[str, Any]) -> tuple[float, float] | None:
    """(share of steps that exited before the last layer, share that exited after it, skipping only
    the lm_head); None when the numbers do not tell (no histogram and some layers skipped)."""
    n, steps, rate = accel["n_layer"], accel["steps"], accel["exit_rate"]
    hist = accel.get("exit_hist")  # steps ending after layer L (0-based); [n_layer]: no exit
    if hist and len(hist) > n and steps:
        return sum(hist[: n - 1]) / steps, hist[n - 1] / steps
    if accel["mean_layers"] >= n:  # every layer ran on every step: any exit skipped only the lm_head
        return 0.0, rate
    return None


def _specee(accel: dict[str, Any], short: bool) -> str:
    n, rate, hit = accel["n_layer"], accel["exit_rate"], accel["cand_hit_rate"]
    layers = _layers(accel["mean_layers"], n)
    split = exit_split(accel)
    early, last = split if split else (0.0, 0.0)
    if short:
        if not rate:
            where = "no exits"
        elif split is None:
            where = f"exits {_pct(rate)}"
        elif not early:
            where = f"exits {_pct(rate)} at the last layer"
        elif not last:
            where = f"exits {_pct(rate)} early"
        else:
            where = f"exits {_pct(rate)} ({_pct(early)} early)"
        hit_part = f" · hit {_pct(hit)}" if accel.get("uses_head", True) else ""
        return f"{where} · {layers}/{n} layers{hit_part}{_copy(accel, short)}"
    if not rate:
        where = "no exits: every step ran all layers and the lm_head"
    elif split is None:
        where = f"exits {_pct(rate)} of steps"
    else:
        # whole percentages when the parts add up to the total as shown, else one decimal
        tiny = any(0 < x < 0.01 for x in (early, last))
        d = 0 if round(early * 100) + round(last * 100) == round(rate * 100) and not tiny else 1
        before = "before the last layer (skipping layers and the lm_head)"
        after = "after the last layer (skipping only the lm_head)"
        if early and last:
            where = f"exits {_pct(rate, d)} of steps: {_pct(early, d)} {before}, {_pct(last, d)} {after}"
        else:
            where = f"exits {_pct(rate, d)} of steps, all {before if early else after}"
    # without layer predictors no EAGLE head runs: there are no candidates, only the shortlist
    hit_part = f" · candidates hit {_pct(hit)}" if accel.get("uses_head", True) else ""
    return f"{where} · {layers} of {n} layers run per token{hit_part}{_copy(accel, short)}"


def _copy(accel: dict[str, Any], short: bool) -> str:
    """The combined mode's copy drafts, where they ran."""
    if "acceptance_length" not in accel:
        return ""
    per = "tok/pass" if short else "tokens per target pass"
    return f" · {accel['acceptance_length']:.2f} {per}"


def accel_summary(mode: str, accel: dict[str, Any], short: bool = False) -> str:
    """'' when there is nothing to say (vanilla, or no steps yet). short: for the status bar."""
    if mode in ("specee", "combined") and accel.get("steps"):
        return _specee(accel, short)
    if mode == "eagle" and "acceptance_length" in accel:
        return f"{accel['acceptance_length']:.2f} tokens/pass"
    return ""
