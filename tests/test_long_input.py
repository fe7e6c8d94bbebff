"""The message box against the context, Qt-free (engine/chats/long_input.py; issue 23, item 16)."""

from __future__ import annotations

from engine import protocol as p
from engine.chats.long_input import DraftRoom, is_long, may_be_cut, preview


def test_only_the_newest_count_counts_and_a_message_that_will_be_cut_is_confirmed_once() -> None:
    room = DraftRoom()
    old = room.ask([], "Hello", 512)
    new = room.ask([], "Hello there", 512)
    assert not room.on_count(p.TokenCount(old.request_id, 1, 10, 3584, 4096))  # stale: the text changed since
    assert room.on_count(p.TokenCount(new.request_id, 2, 12, 3584, 4096))
    assert room.current("Hello there") is not None and room.current("Hello") is None
    assert room.summary() == ("2 tokens · 3,572 left", False)
    assert room.must_confirm("Hello there") == ""  # it fits

    huge = "word " * 10_000
    room.on_count(p.TokenCount(room.ask([], huge, 512).request_id, 10_000, 10_010, 3584, 4096))
    text, over = room.summary()
    assert over and "6,426 more than the 4,096-token context" in text
    warning = room.must_confirm(huge)
    assert "will not fit" in warning and "cut" in warning and "Send again" in warning
    assert room.must_confirm(huge) == ""  # the second Send sends it

    history = [{"role": "user", "content": "x" * 20_000}]
    room.on_count(p.TokenCount(room.ask(history, "And now?", 512).request_id, 3, 5000, 3584, 4096))
    assert room.must_confirm("And now?") == ""  # only the oldest messages go: said, not asked
    assert room.summary() == ("3 tokens · the chat's oldest messages will be left out to fit the context", False)


def test_a_send_waits_for_its_count_only_when_the_message_alone_could_be_too_long() -> None:
    assert not may_be_cut("What is the capital of France?", 4096, 512)
    assert may_be_cut("x" * 4000, 4096, 512)  # a token covers at least one byte: 4,000 bytes may not fit 3,584


def test_long_pastes_are_collapsed_to_their_first_lines() -> None:
    assert not is_long("a short question") and is_long("x" * 3001) and is_long("line\n" * 40)
    shown = preview("\n".join(f"line {i}" for i in range(100)))
    assert shown.startswith("line 0\nline 1") and shown.endswith(" …") and "line 8" not in shown
