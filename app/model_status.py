"""What the header says about a model's acceleration: the mode the engine runs and the speeds it
measured (the weights installed for each model: engine.models.acceleration.installed_weights). Kept
in one place so the wording follows the worker's Loaded/AutoDecided fields as they grow."""

from __future__ import annotations

from engine import protocol as p

MODE_NAMES = {
    "vanilla": "plain decoding",
    "eagle": "EAGLE drafting",
    "specee": "SpecEE early exit",
    "ngram": "n-gram drafting",
    "draft": "draft-model drafting",
    "auto": "auto",
}


def acceleration_state(loaded: p.Loaded | None, decided: p.AutoDecided | None = None) -> tuple[str, str]:
    """(badge, tooltip) for the loaded model, from the worker's flags: the mode running now and its
    measured speed, whether auto is still measuring, the modes it can run here, and why."""
    if loaded is None:
        return "", ""
    mode = decided.mode if decided else loaded.mode
    reason = (decided.mode_reason if decided else loaded.mode_reason) or f"acceleration: {mode}"
    speeds = dict(loaded.measured_tok_s)
    if decided:
        speeds.update(decided.measured_tok_s)
    badge = MODE_NAMES.get(mode, mode)
    if speeds.get(mode):
        badge += f" · {speeds[mode]:.1f} tok/s measured"
    elif decided.measuring if decided else loaded.measuring:
        badge += " · auto: measuring"
    modes = [MODE_NAMES.get(m, m) for m in loaded.acceleration.modes]
    if modes:
        reason += f"\nThis model can run here: {', '.join(modes)}."
    return badge, reason


def measured_speeds_text(speeds: dict[str, float]) -> str:
    """'vanilla 41.2 tok/s, ngram 43.0 tok/s (1.04x)' in the order measured."""
    base = speeds.get("vanilla", 0.0)
    parts = []
    for mode, tok_s in speeds.items():
        rel = f" ({tok_s / base:.2f}x)" if base and mode != "vanilla" else ""
        parts.append(f"{MODE_NAMES.get(mode, mode)} {tok_s:.1f} tok/s{rel}")
    return ", ".join(parts)


def remote_state(loaded: p.Loaded, tok_s: float) -> tuple[str, str]:
    """(badge, tooltip) while a remote engine answers: "remote · 41.2 tok/s measured" once an
    answer has streamed (the speed measured here, network included), and where the answers come from."""
    badge = f"remote · {tok_s:.1f} tok/s measured" if tok_s > 0 else "remote"
    return badge, f"{loaded.name}: {loaded.plan}"
