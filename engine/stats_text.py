"""One-line, human-readable summaries of a Stats event's acceleration numbers (GUI and CLI)."""

from __future__ import annotations

from typing import Any


def accel_summary(mode: str, accel: dict[str, Any], short: bool = False) -> str:
    """'' when there is nothing to say (vanilla, or no steps yet). short: for the status bar."""
    if mode == "specee" and accel.get("steps"):
        hit = "hit" if short else "candidates hit"
        return (
            f"exits {accel['exit_rate']:.0%} · {accel['mean_layers']:.1f}/{accel['n_layer']} layers"
            f" · {hit} {accel['cand_hit_rate']:.0%}"
        )
    if mode == "eagle" and "acceptance_length" in accel:
        return f"{accel['acceptance_length']:.2f} tokens/pass"
    return ""
