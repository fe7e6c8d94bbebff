"""Conversations on disk: SQLite in WAL mode under the user data dir, written as answers stream so
a crash or kill loses nothing already shown. Full-text search over message text (FTS5).

A conversation is a tree: each message has a parent (None for a first question), so editing a
question or regenerating an answer adds a sibling (a version) instead of deleting anything, and
every branch stays reachable. The conversation's leaf names the branch shown; get() returns that
branch, root to leaf, each message with the ids of its versions.

Qt-free: the GUI calls it from its thread (every call is short), tests use it directly.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.chats.attachments import Attachment
from engine.paths import data_dir

# 2: messages.engine; 3: branches (messages.parent_id, conversations.leaf_id), messages.finish;
# 4: conversations.generation (the chat's generation controls), attachments (files sent with a question)
SCHEMA_VERSION = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    leaf_id INTEGER,
    generation TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    stats TEXT NOT NULL DEFAULT '{}',
    complete INTEGER NOT NULL DEFAULT 1,
    created REAL NOT NULL,
    engine TEXT NOT NULL DEFAULT '',
    parent_id INTEGER,
    finish TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS attachments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    size INTEGER NOT NULL,
    text TEXT NOT NULL,
    language TEXT NOT NULL DEFAULT '',
    pages INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS attachments_by_message ON attachments(message_id);
CREATE TABLE IF NOT EXISTS trash (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    deleted REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, position);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content, content='messages', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_au AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
"""


class StoreError(Exception):
    pass


LEAF = object()  # append()'s default parent: the end of the branch shown


@dataclass
class Message:
    role: str
    content: str
    stats: dict[str, Any] = field(default_factory=dict)
    complete: bool = True
    id: int = 0
    engine: str = ""  # which engine answered (see ChatSession.engine); '' for questions and older answers
    parent_id: int | None = None  # the message this one follows; None: the conversation's first
    finish: str = ""  # an answer's protocol FinishReason (stop, length, cancelled, ...); '' while streaming or unknown
    versions: list[int] = field(default_factory=list)  # ids of this message and its siblings, oldest first
    attachments: list[Attachment] = field(default_factory=list)  # files sent with a question


@dataclass
class Conversation:
    id: str
    title: str
    system_prompt: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    updated: float = 0.0
    messages: list[Message] = field(default_factory=list)  # the branch shown, first message to leaf
    generation: dict[str, Any] = field(default_factory=dict)  # the chat's generation controls (engine.chats.generation)


def default_path() -> Path:
    return data_dir() / "conversations.sqlite3"


class ConversationStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(_SCHEMA)
            self._migrate()
            self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self.empty_trash()  # what was deleted in an earlier session is gone for good
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"the conversation database {self.path} is damaged ({exc}); move it aside to start fresh") from None

    def _migrate(self) -> None:
        """Bring a database an older version made up to this schema (CREATE ... IF NOT EXISTS leaves
        existing tables as they were)."""
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(messages)")}
        if "engine" not in columns:  # version 1
            self.db.execute("ALTER TABLE messages ADD COLUMN engine TEXT NOT NULL DEFAULT ''")
        if "parent_id" not in columns:  # versions 1-2: a list by position becomes a one-branch tree
            with self.db:
                self.db.execute("BEGIN")
                self.db.execute("ALTER TABLE messages ADD COLUMN parent_id INTEGER")
                self.db.execute("ALTER TABLE messages ADD COLUMN finish TEXT NOT NULL DEFAULT ''")
                self.db.execute(
                    "UPDATE messages SET parent_id = (SELECT m.id FROM messages m WHERE m.conversation_id ="
                    " messages.conversation_id AND m.position < messages.position ORDER BY m.position DESC LIMIT 1)"
                )
        conv_columns = {row[1] for row in self.db.execute("PRAGMA table_info(conversations)")}
        if "generation" not in conv_columns:  # versions 1-3 (the attachments table is new: the schema made it)
            self.db.execute("ALTER TABLE conversations ADD COLUMN generation TEXT NOT NULL DEFAULT '{}'")
        if "leaf_id" not in conv_columns:
            with self.db:
                self.db.execute("BEGIN")
                self.db.execute("ALTER TABLE conversations ADD COLUMN leaf_id INTEGER")
                self.db.execute(
                    "UPDATE conversations SET leaf_id = (SELECT m.id FROM messages m WHERE m.conversation_id ="
                    " conversations.id ORDER BY m.position DESC LIMIT 1)"
                )
        self.db.execute("CREATE INDEX IF NOT EXISTS messages_by_parent ON messages(conversation_id, parent_id)")

    def close(self) -> None:
        self.db.close()

    # -- conversations --------------------------------------------------------------------------

    def create(
        self,
        title: str = "New chat",
        system_prompt: str = "",
        settings: dict[str, Any] | None = None,
        generation: dict[str, Any] | None = None,
    ) -> Conversation:
        now = time.time()
        conv = Conversation(uuid.uuid4().hex, title, system_prompt, settings or {}, now, now, generation=generation or {})
        self.db.execute(
            "INSERT INTO conversations (id, title, system_prompt, settings, created, updated, generation)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (conv.id, conv.title, conv.system_prompt, json.dumps(conv.settings), now, now, json.dumps(conv.generation)),
        )
        return conv

    def list(self) -> list[Conversation]:
        rows = self.db.execute(
            "SELECT id, title, system_prompt, settings, created, updated FROM conversations"
            " WHERE id NOT IN (SELECT conversation_id FROM trash) ORDER BY updated DESC"
        ).fetchall()
        return [Conversation(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5]) for r in rows]

    def get(self, conv_id: str) -> Conversation:
        r = self.db.execute(
            "SELECT id, title, system_prompt, settings, created, updated, generation FROM conversations WHERE id = ?",
            (conv_id,),
        ).fetchone()
        if r is None:
            raise StoreError(f"no conversation {conv_id}")
        conv = Conversation(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], generation=json.loads(r[6]))
        rows = self.db.execute(
            "SELECT id, role, content, stats, complete, engine, parent_id, finish FROM messages"
            " WHERE conversation_id = ? ORDER BY id",
            (conv_id,),
        ).fetchall()
        by_id = {m[0]: m for m in rows}
        children: dict[int | None, builtins.list[int]] = {}
        for m in rows:
            children.setdefault(m[6], []).append(m[0])
        path: builtins.list[int] = []
        at = self._leaf(conv_id)
        while at is not None and at in by_id and len(path) <= len(rows):
            path.append(at)
            at = by_id[at][6]
        files = self.attachments([m[0] for m in rows])
        conv.messages = [
            Message(m[1], m[2], json.loads(m[3]), bool(m[4]), m[0], m[5], m[6], m[7], children[m[6]], files.get(m[0], []))
            for m in (by_id[i] for i in reversed(path))
        ]
        return conv

    def attachments(self, msg_ids: builtins.list[int]) -> dict[int, builtins.list[Attachment]]:
        """The files sent with these messages, by message id, in the order they were attached."""
        found: dict[int, builtins.list[Attachment]] = {}
        for i in range(0, len(msg_ids), 500):
            chunk = msg_ids[i : i + 500]
            rows = self.db.execute(
                "SELECT message_id, name, kind, size, text, language, pages FROM attachments"
                f" WHERE message_id IN ({','.join('?' * len(chunk))}) ORDER BY id",
                chunk,
            )
            for r in rows:
                found.setdefault(r[0], []).append(Attachment(r[1], r[2], r[3], r[4], r[5], r[6]))
        return found

    def select(self, conv_id: str, msg_id: int | None) -> None:
        """Show the branch through msg_id: the conversation's leaf becomes its newest descendant
        (following the newest child at each step). None: the newest first message's branch."""
        if msg_id is not None:
            self._parent(conv_id, msg_id)  # StoreError if it is not there
        at = msg_id
        while True:
            row = self.db.execute(
                "SELECT MAX(id) FROM messages WHERE conversation_id = ? AND parent_id IS ?", (conv_id, at)
            ).fetchone()
            if row[0] is None:
                break
            at = row[0]
        self.db.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?", (at, conv_id))  # a look is no update

    def _leaf(self, conv_id: str) -> int | None:
        row = self.db.execute(
            "SELECT c.leaf_id FROM conversations c JOIN messages m ON m.id = c.leaf_id AND m.conversation_id = c.id"
            " WHERE c.id = ?",
            (conv_id,),
        ).fetchone()
        if row is not None:
            return int(row[0])
        # no leaf recorded (or it was deleted): the newest message, which has no children
        row = self.db.execute("SELECT MAX(id) FROM messages WHERE conversation_id = ?", (conv_id,)).fetchone()
        return None if row[0] is None else int(row[0])

    def _parent(self, conv_id: str, msg_id: int) -> int | None:
        row = self.db.execute("SELECT parent_id FROM messages WHERE id = ? AND conversation_id = ?", (msg_id, conv_id)).fetchone()
        if row is None:
            raise StoreError(f"no message {msg_id} in {conv_id}")
        parent: int | None = row[0]
        return parent

    def rename(self, conv_id: str, title: str) -> None:
        self._update(conv_id, "title", title.strip() or "Untitled")

    def set_system_prompt(self, conv_id: str, text: str) -> None:
        self._update(conv_id, "system_prompt", text)

    def set_settings(self, conv_id: str, settings: dict[str, Any]) -> None:
        self._update(conv_id, "settings", json.dumps(settings))

    def set_generation(self, conv_id: str, generation: dict[str, Any]) -> None:
        self._update(conv_id, "generation", json.dumps(generation))

    def delete(self, conv_id: str) -> None:
        self.db.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))

    def trash(self, conv_id: str) -> None:
        """Delete with undo: hidden from list() until restore(), gone when the store next opens."""
        self.get(conv_id)  # StoreError if unknown
        self.db.execute("INSERT OR REPLACE INTO trash VALUES (?, ?)", (conv_id, time.time()))

    def restore(self, conv_id: str) -> None:
        self.db.execute("DELETE FROM trash WHERE conversation_id = ?", (conv_id,))

    def empty_trash(self) -> None:
        self.db.execute("DELETE FROM conversations WHERE id IN (SELECT conversation_id FROM trash)")

    def _update(self, conv_id: str, column: str, value: str) -> None:
        cur = self.db.execute(f"UPDATE conversations SET {column} = ?, updated = ? WHERE id = ?", (value, time.time(), conv_id))
        if cur.rowcount == 0:
            raise StoreError(f"no conversation {conv_id}")

    # -- messages -------------------------------------------------------------------------------

    def append(
        self,
        conv_id: str,
        role: str,
        content: str,
        complete: bool = True,
        stats: dict[str, Any] | None = None,
        engine: str = "",
        parent: int | object | None = LEAF,
        attachments: builtins.list[Attachment] | None = None,
    ) -> int:
        """A message after parent (LEAF: the end of the branch shown; None: a new first message),
        with the files sent with it; the branch through it becomes the one shown."""
        if role not in ("user", "assistant", "system"):
            raise StoreError(f"bad role {role!r}")
        with self.db:
            self.db.execute("BEGIN")
            parent_id = self._leaf(conv_id) if parent is LEAF else parent
            if parent_id is not None:
                self._parent(conv_id, parent_id)  # type: ignore[arg-type]  # StoreError if it is not there
            pos = self.db.execute(
                "SELECT COALESCE(MAX(position), -1) + 1 FROM messages WHERE conversation_id = ?", (conv_id,)
            ).fetchone()[0]
            cur = self.db.execute(
                "INSERT INTO messages (conversation_id, position, role, content, stats, complete, created, engine, parent_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (conv_id, pos, role, content, json.dumps(stats or {}), int(complete), time.time(), engine, parent_id),
            )
            for a in attachments or []:
                self.db.execute(
                    "INSERT INTO attachments (message_id, name, kind, size, text, language, pages) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (cur.lastrowid, a.name, a.kind, a.size, a.text, a.language, a.pages),
                )
            now = time.time()
            self.db.execute("UPDATE conversations SET updated = ?, leaf_id = ? WHERE id = ?", (now, cur.lastrowid, conv_id))
        assert cur.lastrowid is not None  # an INSERT sets it
        return cur.lastrowid

    def update_message(
        self,
        msg_id: int,
        content: str,
        complete: bool,
        stats: dict[str, Any] | None = None,
        engine: str | None = None,
        finish: str | None = None,
    ) -> None:
        """Called as an answer streams (autocommit: each call is on disk when it returns); stats,
        engine and finish: None keeps what is stored."""
        self.db.execute(
            "UPDATE messages SET content = ?, complete = ?, stats = COALESCE(?, stats), engine = COALESCE(?, engine),"
            " finish = COALESCE(?, finish) WHERE id = ?",
            (content, int(complete), None if stats is None else json.dumps(stats), engine, finish, msg_id),
        )

    def truncate_from(self, conv_id: str, msg_id: int) -> None:
        """Drop a message and everything that follows it on any branch (a request that could not be
        sent, a question that got no answer); the branch shown becomes its parent's newest one."""
        parent = self._parent(conv_id, msg_id)
        self.db.execute(
            "WITH RECURSIVE doomed(id) AS (SELECT ? UNION ALL SELECT m.id FROM messages m JOIN doomed d ON m.parent_id = d.id)"
            " DELETE FROM messages WHERE id IN (SELECT id FROM doomed)",
            (msg_id,),
        )
        self.select(conv_id, parent)

    def search(self, query: str, mark: tuple[str, str] = ("[", "]")) -> builtins.list[tuple[str, str]]:
        """(conversation id, snippet) of messages matching the words of query, best first; the
        snippet is a few words around the match, each matching word between the two marks."""
        fts = _fts_query(query)
        if not fts:
            return []
        rows = self.db.execute(
            "SELECT m.conversation_id, snippet(messages_fts, 0, ?, ?, '…', 10) FROM messages_fts"
            " JOIN messages m ON m.id = messages_fts.rowid WHERE messages_fts MATCH ? ORDER BY rank LIMIT 50",
            (*mark, fts),
        ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def matches(self, conv_id: str, query: str) -> builtins.list[int]:
        """The ids of conversation conv_id's messages (on any branch) matching the words of query, best first."""
        fts = _fts_query(query)
        if not fts:
            return []
        return [
            r[0]
            for r in self.db.execute(
                "SELECT m.id FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
                " WHERE messages_fts MATCH ? AND m.conversation_id = ? ORDER BY rank",
                (fts, conv_id),
            )
        ]

    def select_match(self, conv_id: str, query: str) -> bool:
        """Opening a search result: when the branch shown holds none of the hits (they are on an
        older version), show the best hit's branch. Whether the branch shown changed."""
        hits = self.matches(conv_id, query)
        if not hits or {m.id for m in self.get(conv_id).messages} & set(hits):
            return False
        self.select(conv_id, hits[0])
        return True

    # -- export / import ------------------------------------------------------------------------

    def export_json(self, conv_id: str) -> str:
        """The conversation as JSON: "messages" is the branch shown (what any reader of version 1
        imports), "tree" every message with its parent's index in it, so importing here keeps every
        version, and "leaf" the index of the branch shown's last message."""
        c = self.get(conv_id)
        rows = self.db.execute(
            "SELECT id, role, content, stats, engine, finish, parent_id FROM messages WHERE conversation_id = ? ORDER BY id",
            (conv_id,),
        ).fetchall()
        index = {r[0]: i for i, r in enumerate(rows)}
        files = self.attachments([r[0] for r in rows])
        tree = [
            {"role": r[1], "content": r[2], "stats": json.loads(r[3]), "engine": r[4], "finish": r[5], "parent": index.get(r[6])}
            | ({"attachments": [a.to_dict() for a in files[r[0]]]} if r[0] in files else {})
            for r in rows
        ]
        return json.dumps(
            {
                "format": "specee-chat-conversation",
                "version": 2,
                "title": c.title,
                "system_prompt": c.system_prompt,
                "settings": c.settings,
                "generation": c.generation,
                "messages": [{"role": m.role, "content": m.content, "stats": m.stats, "engine": m.engine} for m in c.messages],
                "tree": tree,
                "leaf": index.get(c.messages[-1].id) if c.messages else None,
            },
            indent=1,
            ensure_ascii=False,
        )

    def export_markdown(self, conv_id: str) -> str:
        c = self.get(conv_id)
        parts = [f"# {c.title}\n"]
        if c.system_prompt:
            parts.append(f"*System:* {c.system_prompt}\n")
        for m in c.messages:
            files = "".join(f"\n\n*Attached: {a.label}*" for a in m.attachments)
            parts.append(f"**{'You' if m.role == 'user' else 'Assistant'}:**\n\n{m.content}{files}\n")
        return "\n".join(parts)

    def import_json(self, text: str) -> Conversation:
        try:
            data = json.loads(text)
            if data.get("format") != "specee-chat-conversation":
                raise ValueError("not a SpecEE Chat conversation export")
            tree = data.get("tree")  # version 2: every version; version 1: "messages", one branch
            items = tree if isinstance(tree, list) else data["messages"]
            messages = [
                (
                    str(m["role"]),
                    str(m["content"]),
                    dict(m.get("stats", {})),
                    str(m.get("engine", "")),
                    str(m.get("finish", "")),
                    _parent_index(m, i) if isinstance(tree, list) else i - 1,
                    [Attachment.from_dict(a) for a in m.get("attachments", [])],
                )
                for i, m in enumerate(items)
            ]
            leaf = data.get("leaf") if isinstance(tree, list) else len(messages) - 1
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"cannot import this file: {exc}") from None
        generation = data.get("generation") if isinstance(data.get("generation"), dict) else {}
        conv = self.create(
            str(data.get("title") or "Imported chat"), str(data.get("system_prompt", "")), data.get("settings"), generation
        )
        ids: builtins.list[int] = []
        for role, content, stats, engine, finish, parent, files in messages:
            at = ids[parent] if parent >= 0 else None
            ids.append(self.append(conv.id, role, content, True, stats, engine, parent=at, attachments=files))
            if finish:
                self.update_message(ids[-1], content, True, finish=finish)
        if ids:
            self.select(conv.id, ids[leaf] if isinstance(leaf, int) and 0 <= leaf < len(ids) else ids[-1])
        return self.get(conv.id)


def _parent_index(m: dict[str, Any], i: int) -> int:
    """An exported message's parent: an earlier message's index, or -1 for a first message."""
    parent = m.get("parent")
    if parent is None:
        return -1
    if not isinstance(parent, int) or not 0 <= parent < i:
        raise ValueError(f"message {i} names a parent ({parent!r}) that does not come before it")
    return parent


def _fts_query(query: str) -> str:
    """query's words as an FTS5 query of prefixes ("" when it has none)."""
    return " ".join(f'"{w}"*' for w in query.replace('"', " ").split() if w)
