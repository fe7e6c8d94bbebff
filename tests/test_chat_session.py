"""The chat state machine without Qt and without a worker: events are fed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

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
    assert chat.edit_last() == "Tell a story" and [m["content"] for m in chat.messages] == ["Tell a story", "Hi"]
    assert chat.store is not None and chat.conv_id and len(chat.store.get(chat.conv_id).messages) == 2  # nothing deleted


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


def _texts(chat: ChatSession) -> list[str]:
    return [m["content"] for m in chat.messages]


def test_an_edit_deletes_nothing_until_it_is_sent_and_the_old_branch_stays(tmp_path: Path) -> None:
    """Edit last removed the last question and answer from the store at once: leaving the chat
    (Ctrl+N, another chat, quitting) lost them. Now any question can be edited; sending the edit
    branches the conversation there and the old branch stays a version away."""
    store = ConversationStore(tmp_path / "c.db")
    chat = ChatSession(store, p.Sampling.greedy(8))
    _stream(chat, chat.send("Q1"), ["A1"])
    _stream(chat, chat.send("Q2"), ["A2"])
    conv_id = chat.conv_id
    assert chat.begin_edit() == "Q2" and chat.editing == chat.messages[2]["id"]
    assert _texts(chat) == ["Q1", "A1", "Q2", "A2"] and len(store.get(conv_id).messages) == 4
    assert chat.new() and chat.editing is None  # Ctrl+N while editing: the edit is dropped, nothing lost
    assert chat.open(conv_id) and _texts(chat) == ["Q1", "A1", "Q2", "A2"] and chat.editing is None
    assert chat.begin_edit(1) is None  # an answer is not a question
    assert chat.begin_edit(0) == "Q1"
    gen = chat.send("Q1, better")
    assert gen is not None and gen.messages == [{"role": "user", "content": "Q1, better"}]  # the branch from there
    _stream(chat, gen, ["B1"])
    assert _texts(chat) == ["Q1, better", "B1"] and chat.version(0) == (2, 2) and chat.editing is None
    assert chat.show_version(0, -1) and _texts(chat) == ["Q1", "A1", "Q2", "A2"] and chat.version(0) == (1, 2)
    assert not chat.show_version(0, -1) and not chat.show_version(1, +1)  # no such version
    again = ChatSession(store)
    assert again.open(conv_id) and _texts(again) == ["Q1", "A1", "Q2", "A2"]  # the branch shown is kept
    assert again.show_version(0, +1) and _texts(again) == ["Q1, better", "B1"]
    assert again.begin_edit(0) == "Q1, better"
    gen = again.send("Q1, best")
    again.on_event(p.Error(request_id=gen.request_id, kind="worker_died", message="killed"))
    # no answer came: the question goes back to the box, still as an edit of the question shown
    assert again.restored_question == "Q1, best" and again.editing == again.messages[0]["id"]
    assert [len(again.messages[0]["versions"])] == [2]


def test_regenerations_are_versions_to_page_through(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.db")
    chat = ChatSession(store, p.Sampling.greedy(8))
    _stream(chat, chat.send("Hi"), ["one"])
    _stream(chat, chat.regenerate(), ["two"])
    assert _texts(chat) == ["Hi", "two"] and chat.version(1) == (2, 2)
    assert chat.show_version(1, -1) and _texts(chat) == ["Hi", "one"] and chat.version(1) == (1, 2)
    _stream(chat, chat.regenerate(), ["three"])
    assert _texts(chat) == ["Hi", "three"] and chat.version(1) == (3, 3)
    gen = chat.regenerate()
    assert gen is not None and chat.version(1) == (4, 4)
    chat.abandon(gen)  # it could not be sent: the answer shown before comes back
    assert _texts(chat) == ["Hi", "three"] and chat.version(1) == (3, 3) and not chat.streaming
    assert [m.content for m in store.get(chat.conv_id).messages] == ["Hi", "three"]


def test_a_cut_or_stopped_answer_can_be_continued_after_reopening(tmp_path: Path) -> None:
    """Continue was offered only until the chat was left, and never after Stop: the finish reason
    is stored with the answer."""
    store = ConversationStore(tmp_path / "c.db")
    chat = ChatSession(store, p.Sampling.greedy(2))
    _stream(chat, chat.send("Tell a story"), ["Once", " upon"], finish="length")
    reopened = ChatSession(store, p.Sampling.greedy(2))
    assert reopened.open(chat.conv_id) and reopened.can_continue
    assert reopened.messages[-1]["finish"] == "length"
    more = reopened.continue_answer()
    assert more is not None and more.continue_answer and not reopened.can_continue
    reopened.abandon(more)  # it could not be sent: still cut, still to be continued
    assert reopened.can_continue and _texts(reopened) == ["Tell a story", "Once upon"]
    more = reopened.continue_answer()
    assert more is not None
    _stream(reopened, more, [" a", " time"])
    assert not reopened.can_continue and store.get(chat.conv_id).messages[-1].finish == "stop"
    _stream(reopened, reopened.send("Another"), ["Two"], finish="cancelled")
    assert reopened.can_continue and reopened.notices == ["[stopped]"]
    again = ChatSession(store)
    assert again.open(chat.conv_id) and again.can_continue and again.messages[-1]["finish"] == "cancelled"


def test_generation_controls_are_the_chats_own_validated_and_kept(tmp_path: Path) -> None:
    """Issue 23, item 15: each chat samples with its own controls, kept in the store; a value outside
    the protocol's limits is refused in words and changes nothing; answers have no silent cap."""
    from engine.chats.generation import Generation

    store = ConversationStore(tmp_path / "c.db")
    chat = ChatSession(store)
    assert chat.sampling.max_tokens == 0 and chat.generation == Generation()  # no 512 cap: the context's room
    mine = Generation(temperature=0.2, top_p=0.8, top_k=20, min_p=0.1, repeat_penalty=1.3, max_tokens=300, n_ctx=2048)
    chat.set_generation(mine)  # before the chat exists: it is created with them
    gen = chat.send("Hi")
    assert gen is not None
    s = gen.sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.repeat_penalty, s.max_tokens) == (0.2, 0.8, 20, 0.1, 1.3, 300)
    _stream(chat, gen, ["Hello"])
    first = chat.conv_id
    for bad, words in (
        (Generation(temperature=9.0), "Temperature must be between 0 and 5, got 9.0"),
        (Generation(top_p=0.0), "Top-p must be in (0, 1]"),
        (Generation(top_k=-1), "Top-k must be 0 (off) to 100000"),
        (Generation(min_p=1.0), "Min-p must be in [0, 1)"),
        (Generation(repeat_penalty=7.0), "Repeat penalty must be between 0.5 and 3"),
        (Generation(max_tokens=-5), "Max answer length must be 0 (the context's room) to 1000000"),
        (Generation(n_ctx=100), "Context length must be 0 (the app's setting) or 256..1048576 tokens, got 100"),
        (Generation(top_k=2.5), "Top-k must be a whole number"),
    ):
        with pytest.raises(p.SettingsError) as err:
            chat.set_generation(bad)
        assert words in str(err.value)
    assert chat.generation == mine and Generation.from_dict(store.get(first).generation) == mine
    chat.new()
    assert chat.generation == Generation()  # a new chat starts from the defaults
    chat.set_generation(Generation().with_preset("Creative"))
    _stream(chat, chat.send("Another"), ["Ok"])
    chat.open(first)
    assert chat.generation == mine and chat.n_ctx == 2048
    again = ChatSession(ConversationStore(tmp_path / "c.db"))  # and after a restart
    again.open(first)
    assert again.generation == mine


def test_a_chat_from_before_generation_controls_keeps_its_preset(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.db")
    old = store.create("Old", settings={"preset": "Precise"})  # what version 3 kept of a chat's sampling
    chat = ChatSession(store)
    chat.open(old.id)
    assert (chat.sampling.temperature, chat.sampling.top_p, chat.generation.preset) == (0.2, 0.9, "Precise")


def test_an_answer_that_fills_the_context_can_be_continued(tmp_path: Path) -> None:
    chat = ChatSession(ConversationStore(tmp_path / "c.db"))
    gen = chat.send("Write a long story")
    _stream(chat, gen, ["Once"], finish="context_full")
    assert chat.can_continue and "filled the context" in chat.notices[-1]


def test_attached_files_go_quoted_with_the_question_and_are_kept_with_it(tmp_path: Path) -> None:
    """Issue 23, item 17: the files go with the next question, quoted under their names; the store
    keeps them with it (a chip on the message); an edit's new version takes them along."""
    from engine.chats.attachments import Attachment

    store = ConversationStore(tmp_path / "c.db")
    chat = ChatSession(store, system_prompt="Be brief.")
    notes = Attachment("notes.md", "markdown", 10, "# Bread\nflour, water")
    chat.attach(notes)
    gen = chat.send("  ")  # a file alone is a question too
    assert gen is not None and chat.attachments == []
    assert gen.messages[-1]["content"] == 'File "notes.md":\n```\n# Bread\nflour, water\n```\n\nHere is the file.'
    assert chat.messages[0]["attachments"] == [notes] and store.get(chat.conv_id).title == "notes.md"
    _stream(chat, gen, ["Bread."])
    assert chat.history[1]["content"].startswith('File "notes.md"')  # later turns still see it
    text = chat.begin_edit(0)
    assert text == "Here is the file." and chat.attachments == [notes]
    chat.cancel_edit()
    assert chat.attachments == []
    chat.begin_edit(0)
    gen = chat.send("What is in it?")
    assert gen is not None and gen.messages[-1]["content"].endswith("\n\nWhat is in it?")
    assert chat.messages[0]["attachments"] == [notes] and chat.version(0) == (2, 2)


def test_files_that_do_not_fit_say_so_before_sending_and_nothing_is_lost(tmp_path: Path) -> None:
    from engine.chats.attachments import Attachment

    chat = ChatSession(ConversationStore(tmp_path / "c.db"), system_prompt="Sys")
    chat.on_event(p.Loaded(name="m", n_ctx=1024))
    assert chat.count_request("hi") is None  # no files: nothing to count
    big = Attachment("big.txt", "text", 90_000, "word " * 18_000)
    chat.attach(big)
    ask = chat.count_request("Summarise")
    assert ask is not None and ask.max_tokens == 0
    assert ask.messages == [{"role": "system", "content": "Sys"}]  # older turns make room; the file must fit alone
    assert 'File "big.txt"' in ask.text and ask.text.endswith("Summarise")
    assert chat.on_event(p.TokenCount("someone-else", 5, 5, 512, 1024)) == ""
    assert chat.on_event(p.TokenCount(ask.request_id, 18_010, 18_020, 512, 1024)) == "count"
    problem = chat.attachment_problem
    assert "big.txt does not fit" in problem and "18,020 tokens" in problem and "1,024-token context leaves 512" in problem
    assert chat.send("Summarise") is None and chat.attachments == [big]  # refused before sending; the file stays
    chat.detach(0)
    assert chat.attachments == [] and chat.attachment_problem == ""
    small = Attachment("small.txt", "text", 10, "tiny")
    chat.attach(small)
    ask = chat.count_request("")
    assert ask is not None
    chat.on_event(p.TokenCount(ask.request_id, 12, 30, 512, 1024))
    assert chat.attachment_problem == ""
    gen = chat.send("Read it")
    assert gen is not None
    chat.on_event(p.Error(gen.request_id, p.ErrorKind.WORKER_DIED, "gone"))  # no answer yet: question and file come back
    assert chat.restored_question == "Read it" and chat.attachments == [small]
    chat.on_event(p.Loaded(name="remote-model", mode="remote"))
    assert chat.count_request("x") is None  # a remote engine cannot count
