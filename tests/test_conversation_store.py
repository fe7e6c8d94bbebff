"""The conversation store: streamed answers survive a kill, search, export/import, damage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.chats.store import SCHEMA_VERSION, ConversationStore, StoreError


def test_create_append_rename_delete_and_order(tmp_path: Path) -> None:
    s = ConversationStore(tmp_path / "c.db")
    a = s.create("First")
    b = s.create("Second", system_prompt="Be brief.")
    s.append(a.id, "user", "hello")
    assert [c.id for c in s.list()] == [a.id, b.id]  # most recently updated first
    s.rename(b.id, "  ")
    assert s.get(b.id).title == "Untitled" and s.get(b.id).system_prompt == "Be brief."
    s.delete(a.id)
    assert [c.id for c in s.list()] == [b.id]
    with pytest.raises(StoreError):
        s.get(a.id)
    with pytest.raises(StoreError):
        s.append(b.id, "robot", "x")


def test_a_killed_process_loses_nothing_already_streamed(tmp_path: Path) -> None:
    """A writer streaming an answer is SIGKILLed mid-answer; what it wrote is all there."""
    db = tmp_path / "c.db"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
        from engine.chats.store import ConversationStore
        s = ConversationStore(__import__("pathlib").Path({str(db)!r}))
        c = s.create("streaming")
        s.append(c.id, "user", "count")
        mid = s.append(c.id, "assistant", "", complete=False)
        text = ""
        for i in range(50):
            text += f"{{i}} "
            s.update_message(mid, text, complete=False)
        print(c.id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == -9
    conv_id = out.stdout.split()[0]
    conv = ConversationStore(db).get(conv_id)
    assert [m.role for m in conv.messages] == ["user", "assistant"]
    answer = conv.messages[1]
    assert answer.content.split() == [str(i) for i in range(50)] and not answer.complete


def test_search_export_import_and_truncate(tmp_path: Path) -> None:
    s = ConversationStore(tmp_path / "c.db")
    c = s.create("Bikes")
    s.append(c.id, "user", "How do bicycles stay upright?")
    mid = s.append(c.id, "assistant", "Gyroscopic effects and steering geometry.", stats={"decode_tok_s": 80.0})
    other = s.create("Bread")
    s.append(other.id, "user", "Bake sourdough")
    hits = s.search("steer")
    assert [h[0] for h in hits] == [c.id] and "[steer" in hits[0][1]
    assert s.search("steer", ("<", ">"))[0][1] == "Gyroscopic effects and <steering> geometry."  # the window's marks
    assert s.matches(c.id, "steer") == [mid] and s.matches(other.id, "steer") == [] and s.matches(c.id, " ") == []
    assert s.search('"') == []
    md = s.export_markdown(c.id)
    assert md.startswith("# Bikes") and "Gyroscopic" in md
    copy = s.import_json(s.export_json(c.id))
    assert [m.content for m in copy.messages] == [m.content for m in s.get(c.id).messages]
    assert copy.messages[1].stats == {"decode_tok_s": 80.0}
    with pytest.raises(StoreError, match="cannot import"):
        s.import_json(json.dumps({"format": "other"}))
    s.truncate_from(c.id, mid)
    assert [m.role for m in s.get(c.id).messages] == ["user"]
    s.update_message(s.get(other.id).messages[0].id, "Bake rye", True)
    assert s.search("sourdough") == [] and s.search("rye")[0][0] == other.id


def test_a_damaged_database_file_gives_an_actionable_error(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    db.write_bytes(os.urandom(4096))
    with pytest.raises(StoreError, match="move it aside"):
        ConversationStore(db)


def test_trashed_conversations_can_be_restored_until_the_store_reopens(tmp_path: Path) -> None:
    s = ConversationStore(tmp_path / "c.db")
    a, b = s.create("Keep"), s.create("Oops")
    s.append(b.id, "user", "a question worth keeping")
    s.trash(b.id)
    assert [c.id for c in s.list()] == [a.id] and s.get(b.id).title == "Oops"
    s.restore(b.id)
    assert {c.id for c in s.list()} == {a.id, b.id} and s.get(b.id).messages[0].content == "a question worth keeping"
    s.trash(b.id)
    s.close()
    again = ConversationStore(tmp_path / "c.db")  # the next app start empties the trash
    assert [c.id for c in again.list()] == [a.id]
    with pytest.raises(StoreError):
        again.get(b.id)


# The schema as version 1 wrote it (no messages.engine), with its full-text index.
_SCHEMA_V1 = """
CREATE TABLE conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL, system_prompt TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE, position INTEGER NOT NULL,
    role TEXT NOT NULL, content TEXT NOT NULL, stats TEXT NOT NULL DEFAULT '{}', complete INTEGER NOT NULL DEFAULT 1,
    created REAL NOT NULL);
CREATE TABLE trash (conversation_id TEXT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE, deleted REAL NOT NULL);
CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id');
CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
INSERT INTO conversations VALUES ('old', 'From before', '', '{}', 1.0, 1.0);
INSERT INTO messages (conversation_id, position, role, content, stats, complete, created)
    VALUES ('old', 0, 'user', 'an old question', '{}', 1, 1.0), ('old', 1, 'assistant', 'an old answer', '{}', 1, 1.0);
PRAGMA user_version = 1;
"""


def test_a_version_1_database_opens_and_records_the_answering_engine_from_then_on(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "c.db"
    with sqlite3.connect(db) as old:
        old.executescript(_SCHEMA_V1)
    s = ConversationStore(db)
    conv = s.get("old")
    assert [(m.content, m.engine) for m in conv.messages] == [("an old question", ""), ("an old answer", "")]
    mid = s.append("old", "assistant", "", complete=False, engine="remote:lab/qwen")
    s.update_message(mid, "a new answer", complete=True, stats={"decode_tok_s": 9.0})  # engine: kept
    assert s.get("old").messages[-1].engine == "remote:lab/qwen"
    s.update_message(mid, "a new answer", complete=True, engine="local:SmolLM2 (eagle)")
    s.close()
    again = ConversationStore(db)  # migrated once: opening again changes nothing
    assert again.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    last = again.get("old").messages[-1]
    assert (last.content, last.engine, last.stats) == ("a new answer", "local:SmolLM2 (eagle)", {"decode_tok_s": 9.0})
    assert again.search("old question")[0][0] == "old"
    copy = again.import_json(again.export_json("old"))
    assert [m.engine for m in copy.messages] == ["", "", "local:SmolLM2 (eagle)"]


def _texts(s: ConversationStore, conv_id: str) -> list[str]:
    return [m.content for m in s.get(conv_id).messages]


def test_edits_and_regenerations_are_versions_and_every_branch_stays(tmp_path: Path) -> None:
    s = ConversationStore(tmp_path / "c.db")
    c = s.create("Tree")
    q1 = s.append(c.id, "user", "Q1")
    s.append(c.id, "assistant", "A1")
    q2 = s.append(c.id, "user", "Q2")
    a2 = s.append(c.id, "assistant", "A2")
    a2b = s.append(c.id, "assistant", "A2 again", parent=q2)  # a regeneration: a second version
    conv = s.get(c.id)
    assert [m.content for m in conv.messages] == ["Q1", "A1", "Q2", "A2 again"]
    assert conv.messages[-1].versions == [a2, a2b] and conv.messages[0].versions == [q1]
    assert conv.messages[2].parent_id == conv.messages[1].id and conv.messages[0].parent_id is None
    q1b = s.append(c.id, "user", "Q1 edited", parent=None)  # the first question edited: a new branch
    s.append(c.id, "assistant", "B1")
    assert _texts(s, c.id) == ["Q1 edited", "B1"] and s.get(c.id).messages[0].versions == [q1, q1b]
    s.select(c.id, q1)  # paging back: that version's newest branch
    assert _texts(s, c.id) == ["Q1", "A1", "Q2", "A2 again"]
    s.select(c.id, a2)
    assert _texts(s, c.id) == ["Q1", "A1", "Q2", "A2"]
    s.update_message(a2, "A2", True, finish="length")
    s.close()
    again = ConversationStore(tmp_path / "c.db")
    assert _texts(again, c.id) == ["Q1", "A1", "Q2", "A2"]  # the branch shown is remembered
    assert again.get(c.id).messages[-1].finish == "length"
    assert again.search("edited")[0][0] == c.id  # every branch is searched
    again.truncate_from(c.id, a2)  # e.g. a regeneration that could not be sent: the other version shows
    assert _texts(again, c.id) == ["Q1", "A1", "Q2", "A2 again"] and again.get(c.id).messages[-1].versions == [a2b]
    with pytest.raises(StoreError):
        again.append(c.id, "user", "x", parent=a2)  # gone
    md = again.export_markdown(c.id)
    assert "A2 again" in md and "B1" not in md  # exports hold the branch shown
    assert not again.select_match(c.id, "again") and not again.select_match(c.id, "nowhere")
    assert again.select_match(c.id, "B1") and _texts(again, c.id) == ["Q1 edited", "B1"]  # a search hit's branch
    assert not again.select_match(c.id, "edited")  # already shown
    copy = again.import_json(again.export_json(c.id))  # every version travels, the branch shown too
    assert [m.content for m in copy.messages] == ["Q1 edited", "B1"] and len(copy.messages[0].versions) == 2
    again.select(copy.id, copy.messages[0].versions[0])
    assert _texts(again, copy.id) == ["Q1", "A1", "Q2", "A2 again"]
    assert again.get(copy.id).messages[-1].finish == "" and len(again.get(copy.id).messages[-1].versions) == 1
    with pytest.raises(StoreError, match="cannot import"):
        bad_tree = [{"role": "user", "content": "x", "parent": 3}]  # a parent that does not come before it
        again.import_json(json.dumps({"format": "specee-chat-conversation", "messages": [], "tree": bad_tree}))


# The schema as version 2 wrote it (messages by position, no branches), with rows as it appended them.
_SCHEMA_V2 = """
CREATE TABLE conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL, system_prompt TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE, position INTEGER NOT NULL,
    role TEXT NOT NULL, content TEXT NOT NULL, stats TEXT NOT NULL DEFAULT '{}', complete INTEGER NOT NULL DEFAULT 1,
    created REAL NOT NULL, engine TEXT NOT NULL DEFAULT '');
CREATE TABLE trash (conversation_id TEXT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE, deleted REAL NOT NULL);
CREATE INDEX messages_by_conversation ON messages(conversation_id, position);
CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id');
CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_au AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
INSERT INTO conversations VALUES ('a', 'Two turns', '', '{}', 1.0, 2.0), ('b', 'Cut off', '', '{}', 1.0, 3.0);
INSERT INTO messages (conversation_id, position, role, content, stats, complete, created, engine) VALUES
    ('a', 0, 'user', 'first question', '{}', 1, 1.0, ''),
    ('b', 0, 'user', 'other chat', '{}', 1, 1.0, ''),
    ('a', 1, 'assistant', 'first answer', '{"decode_tok_s": 5.0}', 1, 1.0, 'local:SmolLM2 (vanilla)'),
    ('b', 1, 'assistant', 'half an ans', '{}', 0, 1.0, ''),
    ('a', 2, 'user', 'second question', '{}', 1, 1.0, ''),
    ('a', 3, 'assistant', 'second answer', '{}', 1, 1.0, 'remote:lab/qwen');
PRAGMA user_version = 2;
"""


def test_a_version_2_database_opens_as_one_branch_and_branches_from_then_on(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "c.db"
    with sqlite3.connect(db) as old:
        old.executescript(_SCHEMA_V2)
    s = ConversationStore(db)
    a = s.get("a")
    assert [m.content for m in a.messages] == ["first question", "first answer", "second question", "second answer"]
    assert [len(m.versions) for m in a.messages] == [1, 1, 1, 1] and a.messages[1].stats == {"decode_tok_s": 5.0}
    assert [m.engine for m in a.messages] == ["", "local:SmolLM2 (vanilla)", "", "remote:lab/qwen"]
    b = s.get("b")
    assert [(m.content, m.complete, m.finish) for m in b.messages] == [("other chat", True, ""), ("half an ans", False, "")]
    old_q2 = a.messages[2].id
    s.append("a", "user", "second question, edited", parent=a.messages[1].id)
    assert _texts(s, "a") == ["first question", "first answer", "second question, edited"]
    assert s.get("a").messages[2].versions == [old_q2, s.get("a").messages[2].id]
    s.append("b", "assistant", "more", parent=b.messages[0].id)
    assert _texts(s, "b") == ["other chat", "more"]
    s.close()
    again = ConversationStore(db)
    assert again.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    again.select("a", old_q2)
    assert _texts(again, "a") == ["first question", "first answer", "second question", "second answer"]
    assert {h[0] for h in again.search("question")} == {"a"} and again.search("half")[0][0] == "b"
    assert [c.id for c in again.list()] == ["b", "a"]


V3_DATABASE = Path(__file__).parent / "data" / "conversations-v3.sqlite3"  # written by version 3's store (main at 8c6bcb0)


def test_a_version_3_database_opens_with_every_version_and_gains_generation_and_attachments(tmp_path: Path) -> None:
    """Schema 4 (issue 23, items 15 and 17): a database the previous release wrote opens as it was
    (its branches, the branch shown, finish reasons, the preset it kept), and takes each chat's
    generation controls and files from then on."""
    import shutil

    from engine.chats.attachments import Attachment

    db = tmp_path / "c.db"
    shutil.copy(V3_DATABASE, db)
    s = ConversationStore(db)
    assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    bread, plain = sorted(s.list(), key=lambda c: c.title)
    conv = s.get(bread.id)
    assert (conv.system_prompt, conv.settings, conv.generation) == ("You are a baker.", {"preset": "Precise"}, {})
    assert [(m.role, m.content, m.finish) for m in conv.messages] == [
        ("user", "How long does dough rise?", ""),
        ("assistant", "One to two hours, until doubled.", "length"),
    ]
    assert len(conv.messages[-1].versions) == 2 and conv.messages[0].attachments == []
    assert [m.content for m in s.get(plain.id).messages] == ["Hello", "Hi there!"]
    s.set_generation(bread.id, {"temperature": 0.3, "n_ctx": 2048})
    q = s.append(plain.id, "user", "Read this", attachments=[Attachment("notes.md", "markdown", 12, "# Notes\nhi")])
    s.close()
    again = ConversationStore(db)  # migrated once: opening again changes nothing and keeps what was added
    assert again.get(bread.id).generation == {"temperature": 0.3, "n_ctx": 2048}
    [m] = [m for m in again.get(plain.id).messages if m.id == q]
    assert m.attachments == [Attachment("notes.md", "markdown", 12, "# Notes\nhi")]


def test_attachments_go_with_their_message_through_export_import_and_deletion(tmp_path: Path) -> None:
    from engine.chats.attachments import Attachment

    s = ConversationStore(tmp_path / "c.db")
    c = s.create("Files", generation={"temperature": 1.0})
    pdf = Attachment("paper.pdf", "pdf", 9000, "[page 1]\nAbstract", pages=1)
    q = s.append(c.id, "user", "Summarise", attachments=[pdf, Attachment("a.py", "code", 5, "x = 1", "python")])
    s.append(c.id, "assistant", "It is about x.")
    assert "Summarise\n\n*Attached: paper.pdf · 1 page*\n\n*Attached: a.py · 5 B*" in s.export_markdown(c.id)
    copy = s.import_json(s.export_json(c.id))
    assert copy.generation == {"temperature": 1.0}
    assert [a.name for a in copy.messages[0].attachments] == ["paper.pdf", "a.py"]
    assert copy.messages[0].attachments[0] == pdf and copy.messages[1].attachments == []
    s.truncate_from(c.id, q)
    assert s.db.execute("SELECT COUNT(*) FROM attachments WHERE message_id = ?", (q,)).fetchone()[0] == 0
