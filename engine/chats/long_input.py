"""Long input, Qt-free: the message being written against the model's context (which count to ask
the engine for, what the count says, whether sending must be confirmed first), and which sent
messages are long enough to show collapsed. The window draws it; the engine counts (CountTokens)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from engine import protocol as p

TEMPLATE_SLACK = 32  # tokens a chat template may add around one message
COLLAPSE_CHARS = 3000  # a user message longer than this (a paste) shows collapsed, with "Show all"
COLLAPSE_LINES = 40
PREVIEW_CHARS = 600
PREVIEW_LINES = 8


def is_long(content: str) -> bool:
    return len(content) > COLLAPSE_CHARS or content.count("\n") >= COLLAPSE_LINES


def preview(content: str) -> str:
    """The start of a long message: a few lines, at most PREVIEW_CHARS, ending in an ellipsis."""
    head = "\n".join(content[:PREVIEW_CHARS].split("\n")[:PREVIEW_LINES]).rstrip()
    return head + " …"


def may_be_cut(text: str, n_ctx: int, max_tokens: int) -> bool:
    """Whether the message could be too long for the context even alone (a token covers at least
    one byte), so that a send must wait for its count; short messages go at once."""
    return len(text.encode("utf-8")) + TEMPLATE_SLACK >= p.prompt_budget(n_ctx, max_tokens)


def is_cut(c: p.TokenCount) -> bool:
    """The message itself will not fit: the engine cuts its middle (not only older messages)."""
    return c.n_prompt > c.n_budget and c.n_text + TEMPLATE_SLACK > c.n_budget


@dataclass
class DraftRoom:
    """The message box's count: one request in flight at a time (the newest), its answer kept with
    the text it counted, and a message that will not fit confirmed once before it goes (a chat that
    outgrew the context only says that its oldest messages will be left out)."""

    rid: str = ""
    asked: str | None = None  # the text the request in flight counts
    count: p.TokenCount | None = None
    counted: str | None = None  # the text `count` is for
    confirmed: str | None = None  # a text the user chose to send although it does not fit

    def ask(self, history: list[dict[str, str]], text: str, max_tokens: int) -> p.CountTokens:
        self.rid, self.asked = uuid.uuid4().hex[:12], text
        return p.CountTokens(self.rid, history, text, max_tokens)

    def on_count(self, msg: p.TokenCount) -> bool:
        """Take the engine's answer; False for a stale one (the text changed since) or none at all."""
        if msg.request_id != self.rid or not msg.n_ctx:
            return False
        self.count, self.counted, self.rid = msg, self.asked, ""
        return True

    def clear(self) -> None:
        self.rid, self.asked, self.count, self.counted, self.confirmed = "", None, None, None, None

    def current(self, text: str) -> p.TokenCount | None:
        return self.count if self.count is not None and self.counted == text else None

    def summary(self) -> tuple[str, bool]:
        """The live readout, and whether it is over the room: "57 tokens · 3,012 left"."""
        c = self.count
        if c is None or not self.counted:
            return "", False
        room = c.n_budget - c.n_prompt
        if room >= 0:
            return f"{c.n_text:,} tokens · {room:,} left", False
        if is_cut(c):
            return f"{c.n_text:,} tokens · {-room:,} more than the {c.n_ctx:,}-token context holds", True
        return f"{c.n_text:,} tokens · the chat's oldest messages will be left out to fit the context", False

    def must_confirm(self, text: str) -> str:
        """The warning to show instead of sending `text` (counted, and it will not fit), once: the
        next send of the same text goes. "" when it fits, or was confirmed."""
        c = self.current(text)
        if c is None or not is_cut(c) or self.confirmed == text:
            return ""
        self.confirmed = text
        cut = int(len(text) * (1 - c.n_budget / max(c.n_text, 1)))
        return (
            f"This message ({c.n_text:,} tokens) will not fit the {c.n_ctx:,}-token context: about {cut:,} characters"
            " from its middle would be cut (its start and end are kept). Send again to send it anyway."
        )
