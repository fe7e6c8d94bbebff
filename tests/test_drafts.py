"""The Qt-free drafts file (engine/chats/drafts.py): each chat's unsent message and the chat open
last, written whole or not at all; a damaged file is set aside with nothing in it lost."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.chats.drafts import NEW_CHAT, Drafts, drafts_path


def test_drafts_come_back_per_chat_with_the_chat_open_last(tmp_path: Path) -> None:
    path = drafts_path(tmp_path / "chats.db")
    assert path == tmp_path / "chats.drafts.json"
    d = Drafts.load(path)
    assert d.current == NEW_CHAT and d.get("a") == "" and not d.problem
    assert d.set("a", "half a question") and d.set(NEW_CHAT, "a new chat's") and d.set("b", "ünïcode ✓")
    assert not d.set("a", "half a question")  # unchanged
    d.current = "b"
    d.save()
    again = Drafts.load(path)
    got = (again.current, again.get("a"), again.get("b"), again.get(NEW_CHAT))
    assert got == ("b", "half a question", "ünïcode ✓", "a new chat's")
    again.set("a", "")  # sent, or cleared: no draft left behind
    again.keep_only(["b"])  # "a" and "c" were deleted meanwhile
    assert again.texts == {"b": "ünïcode ✓", NEW_CHAT: "a new chat's"}
    again.current = "c"
    again.keep_only(["b"])
    assert again.current == NEW_CHAT  # a chat deleted since does not reopen


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "not JSON"),
        ('["a list"]', "not a drafts file"),
        ('{"format": "specee-chat-drafts", "drafts": 3}', "no drafts table"),
    ],
)
def test_a_damaged_file_is_set_aside_and_says_so(tmp_path: Path, content: str, why: str) -> None:
    path = tmp_path / "chats.drafts.json"
    path.write_text(content)
    d = Drafts.load(path)
    assert d.texts == {} and d.current == NEW_CHAT
    assert why in d.problem and "kept as chats.drafts.json.damaged-" in d.problem
    (kept,) = tmp_path.glob("chats.drafts.json.damaged-*")
    assert kept.read_text() == content and kept.name in d.problem and not path.exists()  # nothing in it is lost
    d.set("x", "new text")
    d.save()
    assert Drafts.load(path).get("x") == "new text"
    path.write_text(content)  # damaged again, the same second: the first copy set aside stays
    Drafts.load(path)
    assert sorted(p.read_text() for p in tmp_path.glob("chats.drafts.json.damaged-*")) == [content, content]


def test_what_is_readable_of_a_damaged_file_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"format": "specee-chat-drafts", "current": "a", "drafts": {"a": "kept", "b": 42}}))
    d = Drafts.load(path)
    assert d.get("a") == "kept" and d.current == "a" and "1 draft not text" in d.problem
    assert list(tmp_path.glob("d.json.damaged-*"))


def test_a_failed_write_leaves_the_last_good_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "d.json"
    d = Drafts.load(path)
    d.set("a", "saved")
    d.save()
    d.set("a", "not saved")

    def disk_full(*_a: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError):
        d.save()
    monkeypatch.undo()
    assert Drafts.load(path).get("a") == "saved" and [p.name for p in tmp_path.iterdir()] == ["d.json"]
