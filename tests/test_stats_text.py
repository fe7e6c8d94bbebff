"""The acceleration readout's words (engine/stats_text.py): SpecEE's numbers agree with each other
(issue 45 item 2: "exits 20% · 30.0/30 layers · hit 50%" read as a contradiction)."""

from __future__ import annotations

import re

from engine.stats_text import accel_summary

N = 30


def specee(steps: int, exits_after: dict[int, int], hit: float = 0.5) -> dict:
    """SpecEE's Stats.accel as the worker sends it: exits_after[L] steps ended after layer L (0-based)."""
    hist = [0] * (N + 1)
    for layer, count in exits_after.items():
        hist[layer] += count
    hist[N] = steps - sum(exits_after.values())  # the rest ran at full depth
    run = sum((layer + 1) * c for layer, c in exits_after.items()) + N * hist[N]
    return {
        "steps": steps,
        "exit_rate": sum(exits_after.values()) / steps,
        "mean_layers": run / steps,
        "n_layer": N,
        "cand_hit_rate": hit,
        "exit_hist": hist,
    }


def layers_shown(text: str) -> float:
    found = re.search(r"(\d+(?:\.\d+)?)(?:/| of )30 layers", text)
    assert found, text
    return float(found.group(1))


def test_exits_after_the_last_layer_say_they_skip_only_the_lm_head() -> None:
    accel = specee(10, {N - 1: 2})  # 20% of steps exit, all after the last layer: every layer ran
    short, full = accel_summary("specee", accel, short=True), accel_summary("specee", accel)
    assert short == "exits 20% at the last layer · 30.0/30 layers · hit 50%"
    assert "20% of steps, all after the last layer (skipping only the lm_head)" in full
    assert "30.0 of 30 layers run per token" in full
    # the stored stats of an answer hold no histogram: every layer ran, so the exits were at the last one
    del accel["exit_hist"]
    assert accel_summary("specee", accel, short=True) == short


def test_early_and_last_layer_exits_are_told_apart_and_add_up() -> None:
    accel = specee(100, {19: 5, N - 1: 15})
    assert accel_summary("specee", accel, short=True) == "exits 20% (5% early) · 29.5/30 layers · hit 50%"
    full = accel_summary("specee", accel)
    assert "exits 20% of steps: 5% before the last layer" in full and "15% after the last layer" in full


def test_a_few_skipped_layers_never_round_up_to_the_full_depth() -> None:
    accel = specee(1000, {3: 1, N - 1: 1})  # 26 layers skipped in 1000 steps: 29.974 layers a token
    for short in (True, False):
        text = accel_summary("specee", accel, short=short)
        assert layers_shown(text) < N, text
        assert "0%" not in text.replace("50%", ""), text  # a rare exit is "<1%" or "0.1%", never "0%"
    assert "0.1% before the last layer" in accel_summary("specee", accel)


def test_no_exits_and_other_modes() -> None:
    assert accel_summary("specee", specee(10, {}), short=True) == "no exits · 30.0/30 layers · hit 50%"
    assert accel_summary("specee", {"steps": 0}) == ""
    assert accel_summary("vanilla", {}) == ""
    assert accel_summary("eagle", {"acceptance_length": 2.345}) == "2.35 tokens/pass"
