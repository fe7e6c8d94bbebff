"""One chat's state machine, Qt-free: send, stream, stop, regenerate, edit any question, page through
versions, continue a cut, stopped or interrupted answer, errors and the worker's restart, with the
conversation store. The window and `specee chat` both drive it. It never talks to the worker: an
action returns the message to send (or None when it does not apply now), and on_event() takes the
worker's events.

Nothing is deleted to edit or regenerate: an edited question is sent as a new version of it (the
conversation branches there, the old branch kept), a regenerated answer is a new version beside the
old one; the store keeps the tree and the branch shown, this session shows that branch."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine import protocol as p
from engine.chats.attachments import Attachment, with_attachments
from engine.chats.generation import SAMPLING_PRESETS, Generation
from engine.chats.store import ConversationStore

# What users read for the worker's error kinds (engine/protocol/enums.py ErrorKind), never the raw kind.
ERROR_TITLES: dict[str, str] = {
    p.ErrorKind.MODEL_FILE: "The model file cannot be used",
    p.ErrorKind.LOAD_FAILED: "The model could not be loaded",
    p.ErrorKind.NO_MODEL: "No model is loaded",
    p.ErrorKind.BAD_SETTINGS: "These settings cannot be used",
    p.ErrorKind.BAD_REQUEST: "The request could not be answered",
    p.ErrorKind.CONTEXT_LENGTH_EXCEEDED: "The conversation is longer than the model's context",
    p.ErrorKind.BUSY: "The engine is busy",
    p.ErrorKind.WORKER_DIED: "The engine stopped unexpectedly",
    p.ErrorKind.INTERNAL: "The engine hit an internal error",
    p.ErrorKind.NATIVE: "The engine's native build is missing or broken",
    p.ErrorKind.VERSION_MISMATCH: "The engine does not match this app",
    p.ErrorKind.TIMEOUT: "The server did not answer in time",
    p.ErrorKind.NO_ACCELERATION: "This acceleration is not installed for the model",
    p.ErrorKind.NOT_MEASURED: "This acceleration has not been measured yet",
    p.ErrorKind.UNSUPPORTED_ARCHITECTURE: "This acceleration does not support the model",
    p.ErrorKind.NO_DRAFT_MODEL: "No draft model is installed for this model",
    p.ErrorKind.BAD_HEAD: "The EAGLE head cannot be used",
    p.ErrorKind.WRONG_HEAD: "The EAGLE head belongs to another model",
    p.ErrorKind.BAD_PREDICTORS: "The exit predictors cannot be used",
    p.ErrorKind.WRONG_PREDICTORS: "The exit predictors belong to another model",
    p.ErrorKind.BAD_DRAFT_MODEL: "The draft model cannot be used",
    p.ErrorKind.BAD_DRAFT: "The drafting mode could not start",
    p.ErrorKind.UNREACHABLE: "The server cannot be reached",
    p.ErrorKind.UNAUTHORIZED: "The server refused the API key",
    p.ErrorKind.BAD_RESPONSE: "The server sent a reply that could not be read",
    p.ErrorKind.SERVER_STOPPED: "The server stopped answering",
}


def message_version(m: dict[str, Any]) -> tuple[int, int]:
    """Which version a message is among those at its place, and how many there are: (2, 3) reads "2/3"."""
    versions = m.get("versions") or []
    return (versions.index(m.get("id")) + 1, len(versions)) if m.get("id") in versions else (1, 1)


@dataclass
class ChatSession:
    store: ConversationStore | None = None  # None: in memory only (a store of its own in memory)
    # what requests sample with: the chat's generation controls (set_generation), else the default
    # (None: Generation()'s, whose answers run as long as the context has room)
    sampling: p.Sampling = None  # type: ignore[assignment]  # None becomes the default in __post_init__
    system_prompt: str = ""
    settings: dict[str, Any] = field(default_factory=dict)  # stored with the conversation (e.g. the preset)
    conv_id: str | None = None
    # the branch shown: role, content, stats, id, interrupted, engine, finish, versions (ids of its siblings)
    messages: list[dict[str, Any]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)  # shown after the conversation
    request_id: str = ""
    answer: str = ""
    answer_msg_id: int = 0
    tokens_before: int = 0  # the tokens the answer had before a Continue: its stats count the whole answer
    restored_question: str = ""  # a question taken back after a failure before any answer
    editing: int | None = None  # the question being edited (begin_edit): the next send() is its new version
    engine_name: str = ""  # what answers, from Loaded: the model's name, or "<endpoint>/<model id>" when remote
    engine_mode: str = ""  # its mode (vanilla, eagle, ...; "remote"), kept current by each answer's Stats
    n_ctx: int = 0  # the context length this chat asks for (its generation controls); 0: the app's
    attachments: list[Attachment] = field(default_factory=list)  # files to go with the next question
    count: p.TokenCount | None = None  # the worker's count of the next question with its files
    count_id: str = ""  # the CountTokens that count answers

    def __post_init__(self) -> None:
        if self.store is None:
            self.store = ConversationStore(Path(":memory:"))
        if self.sampling is None:
            self.sampling = Generation().sampling()
        self.default_sampling = replace(self.sampling)  # a chat with no controls of its own samples so
        self._stashed: list[Attachment] = []  # the files attached before an edit took their place

    @property
    def streaming(self) -> bool:
        return bool(self.request_id)

    @property
    def can_continue(self) -> bool:
        """The last answer can go on: it was cut at the length limit, stopped, or interrupted (a
        crash, a lost server), as stored with it, so this holds after reopening the chat too."""
        last = self.messages[-1] if self.messages else None
        if self.streaming or last is None or last["role"] != "assistant" or not last["content"]:
            return False
        cut = (p.FinishReason.LENGTH, p.FinishReason.CANCELLED, p.FinishReason.CONTEXT_FULL)
        return bool(last.get("interrupted")) or last.get("finish") in cut

    @property
    def history(self) -> list[dict[str, str]]:
        """What the model sees: the system prompt, then the conversation (a question's files quoted
        with their names before it)."""
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return head + [
            {"role": m["role"], "content": with_attachments(m["content"], m.get("attachments") or [])} for m in self.messages
        ]

    @property
    def generation(self) -> Generation:
        """This chat's generation controls, as its requests use them."""
        s = self.sampling
        return Generation(s.temperature, s.top_p, s.top_k, s.min_p, s.repeat_penalty, s.max_tokens, self.n_ctx)

    @property
    def engine(self) -> str:
        """Which engine answers, as the store records it with each answer: "local:<model> (<mode>)"
        or "remote:<endpoint>/<model id>"."""
        if not self.engine_name:
            return ""
        if self.engine_mode == "remote":
            return f"remote:{self.engine_name}"
        return f"local:{self.engine_name} ({self.engine_mode})"

    @property
    def can_regenerate(self) -> bool:
        return not self.streaming and bool(self.messages) and self.messages[-1]["role"] == "assistant"

    @property
    def can_edit(self) -> bool:
        return not self.streaming and any(m["role"] == "user" for m in self.messages)

    # -- conversations ----------------------------------------------------------------------------

    def new(self) -> bool:
        if self.streaming:
            return False
        self.conv_id, self.messages, self.notices, self.editing = None, [], [], None
        self.system_prompt = ""
        self.sampling, self.n_ctx = replace(self.default_sampling), 0
        return True

    def open(self, conv_id: str, match: str = "") -> bool:
        """Show a conversation (match: the search that found it; the branch holding a hit shows)."""
        if self.streaming or self.store is None:
            return False
        if match:
            self.store.select_match(conv_id, match)
        conv = self.store.get(conv_id)
        self.conv_id, self.system_prompt, self.settings = conv.id, conv.system_prompt, conv.settings
        self.notices, self.editing = [], None
        self.sampling, self.n_ctx = replace(self.default_sampling), 0
        if conv.generation:
            self._use(Generation.from_dict(conv.generation))
        elif conv.settings.get("preset") in SAMPLING_PRESETS:  # before version 4 a chat kept only its preset
            self._use(self.generation.with_preset(conv.settings["preset"]))
        self._show_branch()
        return True

    def _show_branch(self) -> None:
        """The store's branch shown, as this session's messages."""
        assert self.store is not None
        self.messages = [
            {
                "role": m.role,
                "content": m.content,
                "stats": m.stats,
                "id": m.id,
                "interrupted": not m.complete,
                "engine": m.engine,
                "finish": m.finish,
                "versions": m.versions,
                "attachments": m.attachments,
            }
            for m in (self.store.get(self.conv_id).messages if self.conv_id else [])
        ]

    def version(self, index: int) -> tuple[int, int]:
        """Which version messages[index] is and how many there are: (2, 3) reads "2/3"."""
        return message_version(self.messages[index])

    def show_version(self, index: int, step: int) -> bool:
        """Page messages[index] to its previous (-1) or next (+1) version; the branch that follows
        it is the newest one under that version."""
        if self.streaming or not self.conv_id or self.store is None or not 0 <= index < len(self.messages):
            return False
        versions = self.messages[index].get("versions") or []
        at = versions.index(self.messages[index]["id"]) + step if self.messages[index]["id"] in versions else -1
        if not 0 <= at < len(versions):
            return False
        self.store.select(self.conv_id, versions[at])
        self.notices, self.editing = [], None
        self._show_branch()
        return True

    def set_system_prompt(self, text: str) -> None:
        self.system_prompt = text.strip()
        if self.conv_id and self.store:
            self.store.set_system_prompt(self.conv_id, self.system_prompt)

    def set_generation(self, gen: Generation) -> None:
        """This chat's generation controls from now on (kept with it); SettingsError, in words, for
        a value outside the engine's limits, and nothing changes then."""
        gen.validate()
        self._use(gen)
        if self.conv_id and self.store:
            self.store.set_generation(self.conv_id, gen.to_dict())

    def _use(self, gen: Generation) -> None:
        self.sampling, self.n_ctx = gen.sampling(self.sampling), gen.n_ctx

    def use_sampling(self, sampling: p.Sampling) -> None:
        """Sample with this from now on, in this chat and as the default of chats with no controls of their own."""
        self.default_sampling, self.sampling = replace(sampling), replace(sampling)

    # -- files attached to the next question -------------------------------------------------------

    def attach(self, attachment: Attachment) -> None:
        self.attachments.append(attachment)
        self.count, self.count_id = None, ""

    def detach(self, index: int) -> None:
        if 0 <= index < len(self.attachments):
            del self.attachments[index]
        self.count, self.count_id = None, ""

    def count_request(self, text: str = "") -> p.CountTokens | None:
        """Ask the engine how many tokens the next question takes with its files (None: no files,
        or an engine that cannot count); its TokenCount tells whether they fit (attachment_problem)."""
        self.count = None
        if not self.attachments or self.engine_mode == p.Mode.REMOTE:
            self.count_id = ""
            return None
        self.count_id = "count-" + uuid.uuid4().hex[:8]
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        # only the system prompt with it: the engine leaves older turns out to make room, never these
        question = with_attachments(text.strip() or "…", self.attachments)
        return p.CountTokens(self.count_id, head, question, self.sampling.max_tokens)

    @property
    def attachment_problem(self) -> str:
        """Why the attached files cannot be sent ("" when they fit, or before the count is in)."""
        c = self.count
        if not self.attachments or c is None or not c.n_ctx or c.n_prompt <= c.n_budget:
            return ""
        names = ", ".join(a.name for a in self.attachments)
        verb = "does" if len(self.attachments) == 1 else "do"
        return (
            f"{names} {verb} not fit: with your message it takes {c.n_prompt:,} tokens, and this chat's "
            f"{c.n_ctx:,}-token context leaves {c.n_budget:,} beside the answer. Remove it, attach a shorter "
            "part, or raise the context length (Generation…)."
        )

    def set_settings(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        if self.conv_id and self.store:
            self.store.set_settings(self.conv_id, settings)

    # -- actions: each returns what to send to the worker --------------------------------------------

    def send(self, text: str) -> p.Generate | None:
        """Ask text; while a question is being edited (begin_edit) it is that question's new
        version: the conversation branches there and the old branch stays as a version."""
        text = text.strip()
        if not text and self.attachments:
            text = "Here is the file." if len(self.attachments) == 1 else "Here are the files."
        if not text or self.streaming or self.attachment_problem:
            return None
        store = self._store
        if self.conv_id is None:
            title = " ".join(text.split())[:48] or "New chat"
            if self.attachments and text in ("Here is the file.", "Here are the files."):
                title = self.attachments[0].name
            self.conv_id = store.create(title, self.system_prompt, self.settings, self.generation.to_dict()).id
        ids = [m.get("id") for m in self.messages]  # a message shown but never stored has none
        files, self.attachments, self._stashed, self.count, self.count_id = self.attachments, [], [], None, ""
        if self.editing is not None and self.editing in ids:
            i = ids.index(self.editing)
            store.append(self.conv_id, "user", text, parent=ids[i - 1] if i else None, attachments=files)
        else:
            store.append(self.conv_id, "user", text, attachments=files)
        self.editing = None
        self._show_branch()
        return self._start(continue_answer=False)

    def regenerate(self) -> p.Generate | None:
        """A new version of the last answer; the old one stays, a page away."""
        if not self.can_regenerate:
            return None
        self.messages.pop()
        return self._start(continue_answer=False)

    def continue_answer(self) -> p.Generate | None:
        """More of the last answer (cut at the length limit, stopped or interrupted), in place."""
        if not self.can_continue:
            return None
        last = self.messages[-1]
        last["interrupted"], last["finish"] = False, ""
        gen = self._start(continue_answer=True)
        self.tokens_before = int((last.get("stats") or {}).get("n_generated", 0))
        self.answer, self.answer_msg_id = last["content"], last["id"]
        return gen

    def begin_edit(self, index: int | None = None) -> str | None:
        """Edit the question messages[index] (None: the last one): its text, for the message box.
        Nothing changes until send() sends the edited text as its new version; cancel_edit() or
        leaving the chat drops the edit with nothing lost."""
        if not self.can_edit:
            return None
        users = [i for i, m in enumerate(self.messages) if m["role"] == "user"]
        i = users[-1] if index is None else index
        if i not in users:
            return None
        if self.editing is None:
            self._stashed = self.attachments
        self.editing = self.messages[i]["id"]
        self.attachments = list(self.messages[i].get("attachments") or [])  # its files go with the new version
        self.count, self.count_id = None, ""
        return str(self.messages[i]["content"])

    def edit_last(self) -> str | None:
        return self.begin_edit()

    def cancel_edit(self) -> None:
        if self.editing is not None:
            self.attachments, self._stashed = self._stashed, []
            self.count, self.count_id = None, ""
        self.editing = None

    def cancel(self) -> p.Cancel | None:
        return p.Cancel(self.request_id) if self.streaming else None

    def abandon(self, sent: p.Generate) -> None:
        """The request could not be sent: undo what _start did (an older version shows again)."""
        if self.request_id == sent.request_id:
            self.request_id = ""
            if not sent.continue_answer and self.messages and self.messages[-1]["role"] == "assistant":
                self._store.truncate_from(self.conv_id or "", self.messages[-1]["id"])
            self._show_branch()  # a continued answer is as stored: cut, stopped or interrupted still

    @property
    def _store(self) -> ConversationStore:
        assert self.store is not None  # __post_init__ gives every session one
        return self.store

    def _start(self, continue_answer: bool) -> p.Generate:
        self.request_id = uuid.uuid4().hex[:12]
        self.notices, self.restored_question = [], ""
        gen = p.Generate(self.request_id, self.history, replace(self.sampling), continue_answer=continue_answer)
        if not continue_answer:
            self.answer, self.tokens_before = "", 0
            parent = self.messages[-1]["id"] if self.messages else None
            self.answer_msg_id = self._store.append(self.conv_id or "", "assistant", "", False, engine=self.engine, parent=parent)
            self._show_branch()
        return gen

    # -- the worker's events ------------------------------------------------------------------------

    def on_event(self, msg: p.Message) -> str:
        """Apply one event; returns what changed: token, progress, stats, done, error, notice, loaded, count or ''."""
        if isinstance(msg, p.TokenCount):
            if msg.request_id != self.count_id or not self.count_id:
                return ""
            self.count = msg
            return "count"
        mine = getattr(msg, "request_id", "") == self.request_id and self.streaming
        if isinstance(msg, p.PromptProgress) and mine and self.messages and self.messages[-1]["role"] == "assistant":
            self.messages[-1]["reading"] = (msg.n_done, msg.n_prompt)  # the answer's footer says how far
            return "progress"
        if isinstance(msg, p.Token) and mine:
            self.messages[-1].pop("reading", None)
            self.answer += msg.text
            self.messages[-1]["content"] = self.answer
            self._store.update_message(self.answer_msg_id, self.answer, complete=False)
            return "token"
        if isinstance(msg, p.Stats) and mine:
            self.engine_mode = msg.mode  # auto may have changed it since the load
            self.messages[-1]["engine"] = self.engine
            n_generated = self.tokens_before + msg.n_generated  # a continued answer's whole length
            self.messages[-1]["stats"] = {
                "decode_tok_s": msg.decode_tok_s, "ttft_ms": msg.ttft_ms, "n_generated": n_generated, "mode": msg.mode,
                "accel": {k: v for k, v in msg.accel.items() if k not in ("exit_hist", "copy_acceptance", "eagle_gate")},
            }  # fmt: skip
            return "stats"
        if isinstance(msg, p.Done) and mine:
            last = self.messages[-1]
            last.pop("reading", None)
            stats, engine, finish = last["stats"], last.get("engine", self.engine), str(msg.finish_reason)
            self._store.update_message(self.answer_msg_id, self.answer, complete=True, stats=stats, engine=engine, finish=finish)
            last["finish"], last["interrupted"] = finish, False  # a stopped or cut answer can be continued, now and later
            if msg.finish_reason == "cancelled":
                self.notices.append("[stopped]")
            if msg.finish_reason == "length":
                limit = self.sampling.max_tokens
                self.notices.append(f"The answer stopped at the {limit}-token limit. Continue writes more of it.")
            if msg.finish_reason == p.FinishReason.CONTEXT_FULL:
                self.notices.append("The answer filled the context. Continue writes more of it (the oldest messages make room).")
            self.request_id = ""
            return "done"
        if isinstance(msg, p.Notice):
            self.notices.append(msg.message)
            return "notice"
        if isinstance(msg, p.Loaded):
            self.engine_name, self.engine_mode = msg.name, msg.mode
            self.notices = [n for n in self.notices if not n.startswith("**")]  # earlier errors are over
            if msg.chat_format_note:
                self.notices.append(msg.chat_format_note)
            return "loaded"
        if isinstance(msg, p.Error):
            self.fail(msg.kind, msg.message)
            return "error"
        return ""

    def fail(self, kind: str, message: str) -> None:
        """An error, during a request or not. A partly streamed answer stays, marked interrupted
        (continue or regenerate it later); a question with no answer yet goes back to the sender
        (restored_question) and out of the conversation, so nothing typed is lost or sent twice."""
        if self.streaming:
            self.request_id = ""
            last = self.messages[-1] if self.messages else None
            if last is not None:
                last.pop("reading", None)
            if last is not None and last["role"] == "assistant" and last["content"]:
                last["interrupted"] = True
                self._store.update_message(last["id"], last["content"], complete=False)
            else:
                users = [i for i, m in enumerate(self.messages) if m["role"] == "user"]
                if users:
                    i = users[-1]
                    self.restored_question = self.messages[i]["content"]
                    self.attachments = list(self.messages[i].get("attachments") or [])  # its files wait to go again
                    self._store.truncate_from(self.conv_id or "", self.messages[i]["id"])
                    self._show_branch()
                    if i < len(self.messages) and self.messages[i]["role"] == "user":
                        self.editing = self.messages[i]["id"]  # it was an edit: sent again, it is one still
        self.notices.append(f"**{ERROR_TITLES.get(kind, 'Something went wrong')}:** {message}")
