"""Token-sequence helpers shared by the worker (KV prefix reuse), the bench (agreement) and the
offline replays of the copy drafter (`CopyLookup`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of a and b."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class CopyLookup:
    """The copy drafter's lookup (native/src/spec/copy-draft.cpp) in Python, for offline replays: a
    context with an index of its token pairs, and the longest earlier occurrence of its last tokens."""

    MIN_MATCH = 2  # the index is of token pairs
    MAX_MATCH = 32
    MAX_CANDIDATES = 64  # the most recent occurrences examined

    def __init__(self, tokens: Iterable[int]) -> None:
        self.ctx: list[int] = []
        self.index: dict[tuple[int, int], list[int]] = defaultdict(list)
        for tok in tokens:
            self.push(tok)

    def push(self, tok: int) -> None:
        self.ctx.append(tok)
        if len(self.ctx) >= 2:
            self.index[(self.ctx[-2], self.ctx[-1])].append(len(self.ctx) - 1)

    def earlier(self) -> list[int]:
        """End positions of the examined earlier occurrences of the context's last two tokens."""
        if len(self.ctx) < self.MIN_MATCH:
            return []
        hits = self.index.get((self.ctx[-2], self.ctx[-1]), [])
        if hits and hits[-1] + 1 >= len(self.ctx):
            hits = hits[:-1]  # the context's own last pair: nothing follows it yet
        return hits[-self.MAX_CANDIDATES :]

    def longest_match(self) -> tuple[int, int]:
        """The end position of the longest earlier occurrence of the context's last tokens (the latest
        on ties), or -1, and its length."""
        ctx, n = self.ctx, len(self.ctx)
        best_len, best_pos = 0, -1
        for i in reversed(self.earlier()):
            length = self.MIN_MATCH
            while length < self.MAX_MATCH and i - length >= 0 and ctx[i - length] == ctx[n - 1 - length]:
                length += 1
            if length > best_len:
                best_len, best_pos = length, i
        return best_pos, best_len

    def proposal(self) -> int:
        """The token the drafter would propose next, or -1."""
        pos = self.longest_match()[0]
        return self.ctx[pos + 1] if pos >= 0 else -1
