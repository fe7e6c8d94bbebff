"""What the window says about a model's acceleration: the mode the engine runs and the speeds it
measured (the weights installed for each model: engine.models.acceleration.installed_weights). Kept
in one place so the wording follows the worker's Loaded/AutoDecided fields as they grow: one name for
each mode wherever the user sees it (mode_label), and every speed saying whether it was measured
here or predicted (speeds_text)."""

from __future__ import annotations

from engine import protocol as p

# What each mode does, in words: beside its name in tooltips, never instead of it
MODE_MEANINGS = {
    "vanilla": "plain decoding",
    "eagle": "EAGLE drafting",
    "specee": "SpecEE early exit",
    "ngram": "n-gram drafting",
    "draft": "draft-model drafting",
    "combined": "n-gram drafting + SpecEE early exit",
    "auto": "the fastest mode measured here",
}
# Where a speed comes from: the engine timed it on this machine, or the placement planner estimated it
MEASURED, PREDICTED = "measured here", "predicted"


def mode_label(mode: str) -> str:
    """A mode as the user sees it everywhere (header, status bar, Settings, the engine's own reasons
    and the CLI): the engine's value name ("vanilla", "ngram"), one set of names."""
    return str(mode)


def mode_meaning(mode: str) -> str:
    """'ngram (n-gram drafting)': the name, then what it does (tooltips)."""
    meaning = MODE_MEANINGS.get(str(mode))
    return f"{mode_label(mode)} ({meaning})" if meaning else mode_label(mode)


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
    badge = mode_label(mode)
    if speeds.get(mode):
        badge += f" · {speeds[mode]:.1f} tok/s {MEASURED}"
    elif decided.measuring if decided else loaded.measuring:
        badge += " · auto: measuring"
    modes = [mode_meaning(m) for m in loaded.acceleration.modes]
    if modes:
        reason += f"\nThis model can run here: {', '.join(modes)}."
    return badge, reason


def speeds_text(speeds: dict[str, float], source: str) -> str:
    """'vanilla 41.2 tok/s measured here, ngram 43.0 tok/s measured here (1.04x)' in the order given:
    each figure says where it comes from (MEASURED or PREDICTED), as both kinds are shown side by side."""
    base = speeds.get("vanilla", 0.0)
    parts = []
    for mode, tok_s in speeds.items():
        rel = f" ({tok_s / base:.2f}x)" if base and mode != "vanilla" else ""
        parts.append(f"{mode_label(mode)} {tok_s:.1f} tok/s {source}{rel}")
    return ", ".join(parts)


def remote_state(loaded: p.Loaded, tok_s: float) -> tuple[str, str]:
    """(badge, tooltip) while a remote engine answers: "remote · 41.2 tok/s measured here" once an
    answer has streamed (network included), and where the answers come from."""
    badge = f"remote · {tok_s:.1f} tok/s {MEASURED}" if tok_s > 0 else "remote"
    return badge, f"{loaded.name}: {loaded.plan}"
