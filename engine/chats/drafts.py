"""Where the user left off: the chat that was open and each chat's unsent message (its draft), in a
small JSON file beside the conversation store (so a test's own store has its own), written atomically.

Qt-free: the window keeps it in step with the message box; a damaged file is set aside (nothing in
it is deleted), what of it could be read is kept, and `problem` says so in words."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path

from engine.atomic import write_text_atomic

NEW_CHAT = ""  # the key of the chat not saved yet (nothing sent in it): its draft is kept too
FORMAT = "specee-chat-drafts"
VERSION = 1


def drafts_path(store_path: Path) -> Path:
    """The drafts file of the conversation store at store_path: conversations.sqlite3 -> conversations.drafts.json."""
    return store_path.with_name(f"{store_path.stem}.drafts.json")


class Drafts:
    """The chat open last (`current`: a conversation id, NEW_CHAT for an unsaved one) and each chat's draft."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.current = NEW_CHAT
        self.texts: dict[str, str] = {}
        self.problem = ""  # why the file on disk could not be read whole ("" when it could)

    @classmethod
    def load(cls, path: Path) -> Drafts:
        drafts = cls(path)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return drafts
        except OSError as exc:  # unreadable (permissions): start empty, leave the file alone
            drafts.problem = f"Unsent drafts could not be read from {path} ({exc.strerror or exc}); they start empty."
            return drafts
        why = drafts._read(raw)
        if why:
            kept = _set_aside(path)
            where = f"the file was kept as {kept.name}" if kept else f"{path.name} could not be moved aside"
            drafts.problem = f"Unsent drafts in {path.name} were damaged ({why}); {where}."
        return drafts

    def _read(self, raw: str) -> str:
        """Take what is well formed; what was not, in words ("" when all was)."""
        try:
            data = json.loads(raw)
        except ValueError as exc:
            return f"not JSON: {exc}"
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return "not a drafts file"
        texts = data.get("drafts")
        if not isinstance(texts, dict):
            return "no drafts table"
        self.texts = {k: v for k, v in texts.items() if isinstance(k, str) and isinstance(v, str) and v}
        current = data.get("current", NEW_CHAT)
        self.current = current if isinstance(current, str) else NEW_CHAT
        bad = len(texts) - len([v for v in texts.values() if isinstance(v, str)])
        if bad:
            return f"{bad} draft{'s' if bad > 1 else ''} not text"
        return "" if isinstance(current, str) else "the last chat is not an id"

    def get(self, chat: str) -> str:
        return self.texts.get(chat, "")

    def set(self, chat: str, text: str) -> bool:
        """Whether it changed (an empty text drops the draft)."""
        if self.get(chat) == text:
            return False
        if text:
            self.texts[chat] = text
        else:
            self.texts.pop(chat, None)
        return True

    def keep_only(self, chats: Iterable[str]) -> None:
        """Forget the drafts (and the last chat) of conversations no longer in the store."""
        alive = set(chats) | {NEW_CHAT}
        self.texts = {k: v for k, v in self.texts.items() if k in alive}
        if self.current not in alive:
            self.current = NEW_CHAT

    def save(self) -> None:
        """On disk whole or not at all (OSError for a full or read-only disk: the caller says so)."""
        data = {"format": FORMAT, "version": VERSION, "current": self.current, "drafts": self.texts}
        write_text_atomic(self.path, json.dumps(data, indent=1, ensure_ascii=False))


def _set_aside(path: Path) -> Path | None:
    """Rename a damaged file out of the way (never over an earlier one), so nothing in it is lost."""
    target = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while target.exists():
        target = target.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
        n += 1
    try:
        path.rename(target)
    except OSError:
        return None
    return target
