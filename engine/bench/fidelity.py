"""How a mode's greedy answer relates to vanilla's: identical, diverging at a numerical tie, diverging
for real, or ending early. Lossless modes may differ from vanilla only where vanilla's top two logits
were within TIE_GAP of each other (a different but equally valid summation order can flip them);
any other divergence, or an answer that stops while vanilla runs on, is a fidelity bug."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.sequences import common_prefix

TIE_GAP = 0.05  # logits; below it the two best tokens are a numerical tie


@dataclass(frozen=True)
class Divergence:
    position: int  # first generated token that differs (or where one answer ended)
    token: int | None  # the mode's token there; None when the mode's answer ended there
    vanilla_token: int | None  # None when vanilla's answer ended there
    gap: float  # vanilla's top-1 minus top-2 logit at that position; nan if unknown

    @property
    def is_tie(self) -> bool:
        return not math.isnan(self.gap) and self.gap < TIE_GAP


def first_divergence(tokens: Sequence[int], vanilla: Sequence[int], vanilla_margins: Sequence[float]) -> Divergence | None:
    """None when the answers are identical. Both answers are cut at their own max_tokens, so a
    length difference means one of them ended (end-of-generation or stop string) there."""
    i = common_prefix(tokens, vanilla)
    if i == len(tokens) == len(vanilla):
        return None
    gap = float(vanilla_margins[i]) if i < len(vanilla_margins) else math.nan
    return Divergence(i, tokens[i] if i < len(tokens) else None, vanilla[i] if i < len(vanilla) else None, gap)


def ended_early(tokens: Sequence[int], finish: str, vanilla: Sequence[int]) -> bool:
    """The mode stopped (end-of-generation or stop string) where vanilla went on generating."""
    return finish == "stop" and len(tokens) < len(vanilla)
