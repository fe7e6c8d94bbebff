"""The chat state machine without Qt and without a worker: events are fed by hand."""

from __future__ import annotations

from pathlib import Path

from engine import protocol as p
from engine.chats.session import ChatSession
from engine.chats.store import ConversationStore


def _stream(chat: ChatSession, gen: p.Generate, pieces: list[str], finish: str = "stop") -> None:
    for piece in pieces:
        assert chat.on_event(p.Token(gen.request_id, piece)) == "token"
    chat.on_event(p.Stats(request_id=gen.request_id, decode_tok_s=50.0, n_generated=len(pieces), mode="vanilla"))
    assert chat.on_event(p.Done(request_id=gen.request_id, finish_reason=finish)) == "done"


def test_send_stream_and_store(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.db")
    chat = ChatSession(store, p.Sampling.greedy(8), system_prompt="Be brief.")
    gen = chat.send("  What is 2+2?  ")
    assert gen is not None
    assert gen.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    assert chat.streaming and chat.send("again?") is None  # one request at a time
    _stream(chat, gen, ["4", "."])
    assert not chat.streaming and chat.answer == "4." and chat.messages[-1]["stats"]["decode_tok_s"] == 50.0
    stored = store.get(chat.conv_id).messages
    assert [(m.role, m.content, m.complete) for m in stored] == [("user", "What is 2+2?", True), ("assistant", "4.", True)]
    assert chat.on_event(p.Token("someone-else", "x")) == ""  # another request's events change nothing


def test_regenerate_edit_and_continue_at_the_length_limit(tmp_path: Path) -> None:
    chat = ChatSession(ConversationStore(tmp_path / "c.db"), p.Sampling.greedy(2))
    assert chat.regenerate() is None and chat.edit_last() is None  # empty chat: nothing to act on
    gen = chat.send("Tell a story")
    _stream(chat, gen, ["Once", " upon"], finish="length")
    assert chat.can_continue and "2-token limit" in chat.notices[-1]
    more = chat.continue_answer()
    assert more is not None and more.continue_answer and more.messages[-1] == {"role": "assistant", "content": "Once upon"}
    _stream(chat, more, [" a", " time"])
    assert [m["role"] for m in chat.messages] == ["user", "assistant"] and chat.answer == "Once upon a time"
    again = chat.regenerate()
    assert again is not None and [m["role"] for m in chat.messages] == ["user", "assistant"] and chat.answer == ""
    _stream(chat, again, ["Hi"])
    assert chat.edit_last() == "Tell a story" and chat.messages == []
    assert chat.store is not None and chat.conv_id and chat.store.get(chat.conv_id).messages == []


def test_errors_keep_partial_answers_and_give_back_unanswered_questions(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.db")
    chat = ChatSession(store)
    gen = chat.send("Long story please")
    chat.on_event(p.Token(gen.request_id, "Part of it"))
    assert chat.on_event(p.Error(request_id=gen.request_id, kind="worker_died", message="killed")) == "error"
    assert not chat.streaming and chat.messages[-1]["interrupted"] and chat.can_continue
    assert "The engine stopped unexpectedly" in chat.notices[-1] and "worker_died" not in chat.notices[-1]
    assert store.get(chat.conv_id).messages[-1].content == "Part of it" and not store.get(chat.conv_id).messages[-1].complete
    chat.on_event(p.Loaded(name="m"))
    assert not any("stopped unexpectedly" in n for n in chat.notices)  # the error is over
    reopened = ChatSession(store)
    assert reopened.open(chat.conv_id) and reopened.can_continue and reopened.messages[-1]["interrupted"]

    chat.new()
    gen = chat.send("Unanswered")
    chat.on_event(p.Error(request_id=gen.request_id, kind="worker_died", message="killed"))
    assert chat.restored_question == "Unanswered" and chat.messages == []


def test_each_answer_records_the_engine_that_wrote_it(tmp_path: Path) -> None:
    """Local answers name the model and the mode that ran (auto may switch it after the load);
    remote ones the endpoint and model; a reopened conversation still says which was which."""
    store = ConversationStore(tmp_path / "c.db")
    chat = ChatSession(store, p.Sampling.greedy(8))
    chat.on_event(p.Loaded(name="SmolLM2", mode="vanilla"))
    assert chat.engine == "local:SmolLM2 (vanilla)"
    gen = chat.send("Hi")
    chat.on_event(p.Token(gen.request_id, "Hello"))
    chat.on_event(p.Stats(request_id=gen.request_id, mode="eagle", n_generated=1))  # auto decided meanwhile
    chat.on_event(p.Done(request_id=gen.request_id, finish_reason="stop"))
    chat.on_event(p.Loaded(name="lab/qwen", mode="remote"))  # the user switched to a remote engine
    assert chat.engine == "remote:lab/qwen"
    gen = chat.send("And you?")
    chat.on_event(p.Token(gen.request_id, "Partly"))
    chat.on_event(p.Error(gen.request_id, "timeout", "http://lab:8080/v1/chat/completions sent nothing for 120 s"))
    assert chat.notices[-1].startswith("**The server did not answer in time:**") and chat.messages[-1]["interrupted"]
    reopened = ChatSession(store)
    assert reopened.open(chat.conv_id)
    assert [(m["content"], m["engine"]) for m in reopened.messages if m["role"] == "assistant"] == [
        ("Hello", "local:SmolLM2 (eagle)"),
        ("Partly", "remote:lab/qwen"),
    ]
