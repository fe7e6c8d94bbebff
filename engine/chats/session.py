"""One chat's state machine, Qt-free: send, stream, stop, regenerate, edit last, continue a cut or
interrupted answer, errors and the worker's restart, with the conversation store. The window and
`specee chat` both drive it. It never talks to the worker: an action returns the message to send
(or None when it does not apply now), and on_event() takes the worker's events."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from engine import protocol as p
from engine.chats.store import ConversationStore

# What users read for the worker's error kinds (engine/protocol.py Error.kind), never the raw kind.
ERROR_TITLES: dict[str, str] = {
    p.ErrorKind.MODEL_FILE: "The model file cannot be used",
    p.ErrorKind.LOAD_FAILED: "The model could not be loaded",
    p.ErrorKind.NO_MODEL: "No model is loaded",
    p.ErrorKind.BAD_SETTINGS: "These settings cannot be used",
    p.ErrorKind.BAD_REQUEST: "The request could not be answered",
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


@dataclass
class ChatSession:
    store: ConversationStore | None = None  # None: in memory only
    sampling: p.Sampling = field(default_factory=p.Sampling)
    system_prompt: str = ""
    settings: dict = field(default_factory=dict)  # stored with the conversation (e.g. the preset)
    conv_id: str | None = None
    messages: list[dict] = field(default_factory=list)  # role, content, stats, id, interrupted
    notices: list[str] = field(default_factory=list)  # shown after the conversation
    request_id: str = ""
    answer: str = ""
    answer_msg_id: int = 0
    can_continue: bool = False  # the last answer stopped at the length limit or was interrupted
    restored_question: str = ""  # a question taken back after a failure before any answer
    engine_name: str = ""  # what answers, from Loaded: the model's name, or "<endpoint>/<model id>" when remote
    engine_mode: str = ""  # its mode (vanilla, eagle, ...; "remote"), kept current by each answer's Stats

    @property
    def streaming(self) -> bool:
        return bool(self.request_id)

    @property
    def history(self) -> list[dict[str, str]]:
        """What the model sees: the system prompt, then the conversation."""
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return head + [{"role": m["role"], "content": m["content"]} for m in self.messages]

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
        self.conv_id, self.messages, self.notices, self.can_continue = None, [], [], False
        self.system_prompt = ""
        return True

    def open(self, conv_id: str) -> bool:
        if self.streaming or self.store is None:
            return False
        conv = self.store.get(conv_id)
        self.conv_id, self.system_prompt, self.settings = conv.id, conv.system_prompt, conv.settings
        self.messages = [
            {
                "role": m.role,
                "content": m.content,
                "stats": m.stats,
                "id": m.id,
                "interrupted": not m.complete,
                "engine": m.engine,
            }
            for m in conv.messages
        ]
        self.notices = []
        self.can_continue = bool(self.messages) and bool(self.messages[-1].get("interrupted"))
        return True

    def set_system_prompt(self, text: str) -> None:
        self.system_prompt = text.strip()
        if self.conv_id and self.store:
            self.store.set_system_prompt(self.conv_id, self.system_prompt)

    def set_settings(self, settings: dict) -> None:
        self.settings = settings
        if self.conv_id and self.store:
            self.store.set_settings(self.conv_id, settings)

    # -- actions: each returns what to send to the worker --------------------------------------------

    def send(self, text: str) -> p.Generate | None:
        text = text.strip()
        if not text or self.streaming:
            return None
        if self.conv_id is None and self.store is not None:
            title = " ".join(text.split())[:48] or "New chat"
            self.conv_id = self.store.create(title, self.system_prompt, self.settings).id
        msg_id = self.store.append(self.conv_id, "user", text) if self.store and self.conv_id else 0
        self.messages.append({"role": "user", "content": text, "stats": {}, "id": msg_id})
        return self._start(continue_answer=False)

    def regenerate(self) -> p.Generate | None:
        if not self.can_regenerate:
            return None
        last = self.messages.pop()
        if self.store and self.conv_id:
            self.store.truncate_from(self.conv_id, last["id"])
        return self._start(continue_answer=False)

    def continue_answer(self) -> p.Generate | None:
        """More of the last answer (it stopped at the length limit or was interrupted), in place."""
        if not self.can_regenerate:
            return None
        last = self.messages[-1]
        last["interrupted"] = False
        gen = self._start(continue_answer=True)
        self.answer, self.answer_msg_id = last["content"], last["id"]
        return gen

    def edit_last(self) -> str | None:
        """Take the last question back (it and what followed leave the conversation); its text."""
        if not self.can_edit:
            return None
        i = max(i for i, m in enumerate(self.messages) if m["role"] == "user")
        text = self.messages[i]["content"]
        if self.store and self.conv_id:
            self.store.truncate_from(self.conv_id, self.messages[i]["id"])
        del self.messages[i:]
        self.can_continue = False
        return text

    def cancel(self) -> p.Cancel | None:
        return p.Cancel(self.request_id) if self.streaming else None

    def abandon(self, sent: p.Generate) -> None:
        """The request could not be sent: undo what _start did."""
        if self.request_id == sent.request_id:
            self.request_id = ""
            if not sent.continue_answer and self.messages and self.messages[-1]["role"] == "assistant":
                if self.store and self.conv_id:
                    self.store.truncate_from(self.conv_id, self.messages[-1]["id"])
                self.messages.pop()

    def _start(self, continue_answer: bool) -> p.Generate:
        self.request_id = uuid.uuid4().hex[:12]
        self.notices, self.can_continue, self.restored_question = [], False, ""
        gen = p.Generate(self.request_id, self.history, replace(self.sampling), continue_answer=continue_answer)
        if not continue_answer:
            self.answer = ""
            self.answer_msg_id = self.store.append(self.conv_id, "assistant", "", False, engine=self.engine) if self.store else 0
            self.messages.append(
                {"role": "assistant", "content": "", "stats": {}, "id": self.answer_msg_id, "engine": self.engine}
            )
        return gen

    # -- the worker's events ------------------------------------------------------------------------

    def on_event(self, msg: p.Message) -> str:
        """Apply one event; returns what changed: token, stats, done, error, notice, loaded or ''."""
        mine = getattr(msg, "request_id", "") == self.request_id and self.streaming
        if isinstance(msg, p.Token) and mine:
            self.answer += msg.text
            self.messages[-1]["content"] = self.answer
            if self.store:
                self.store.update_message(self.answer_msg_id, self.answer, complete=False)
            return "token"
        if isinstance(msg, p.Stats) and mine:
            self.engine_mode = msg.mode  # auto may have changed it since the load
            self.messages[-1]["engine"] = self.engine
            self.messages[-1]["stats"] = {
                "decode_tok_s": msg.decode_tok_s, "ttft_ms": msg.ttft_ms, "n_generated": msg.n_generated, "mode": msg.mode,
                "accel": {k: v for k, v in msg.accel.items() if k != "exit_hist"},
            }  # fmt: skip
            return "stats"
        if isinstance(msg, p.Done) and mine:
            if self.store:
                stats, engine = self.messages[-1]["stats"], self.messages[-1].get("engine", self.engine)
                self.store.update_message(self.answer_msg_id, self.answer, complete=True, stats=stats, engine=engine)
            if msg.finish_reason == "cancelled":
                self.notices.append("[stopped]")
            if msg.finish_reason == "length":
                limit = self.sampling.max_tokens
                self.notices.append(f"The answer stopped at the {limit}-token limit. Continue writes more of it.")
                self.can_continue = True
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
            if last is not None and last["role"] == "assistant" and last["content"]:
                last["interrupted"] = True
                if self.store:
                    self.store.update_message(last["id"], last["content"], complete=False)
                self.can_continue = True
            else:
                users = [i for i, m in enumerate(self.messages) if m["role"] == "user"]
                if users:
                    i = users[-1]
                    self.restored_question = self.messages[i]["content"]
                    if self.store and self.conv_id:
                        self.store.truncate_from(self.conv_id, self.messages[i]["id"])
                    del self.messages[i:]
        self.notices.append(f"**{ERROR_TITLES.get(kind, 'Something went wrong')}:** {message}")
