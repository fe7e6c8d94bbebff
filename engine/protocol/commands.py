"""Commands: client -> worker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from engine.protocol.enums import MODES, Mode, Overflow
from engine.protocol.errors import SettingsError
from engine.protocol.limits import (
    DRAFTER_RE,
    EXIT_CHECK_EVERY_MAX,
    KV_DISK_BUDGET_DEFAULT,
    KV_DISK_BUDGET_MAX,
    N_DRAFT_MAX,
    N_PARALLEL_MAX,
    TOP_LOGPROBS_MAX,
    _check,
    _is_int,
)
from engine.protocol.message import Message
from engine.protocol.settings import Placement, Sampling
from engine.protocol.version import PROTOCOL_VERSION


@dataclass
class Load(Message):
    """Intent: which model, which mode (or auto), context, threads, placement (auto or overrides).
    The worker decides the rest (plan, mode) and says what and why in Loaded."""

    TYPE: ClassVar[str] = "load"
    model_path: str = ""
    placement: Placement = field(default_factory=Placement)
    mode: Mode = Mode.VANILLA
    n_draft: int = 0  # eagle chain length, all verified every step; 0 = the head's trained length, gated
    # specee: also run full depth on every Nth step to measure exit precision (bench; 0 = off)
    exit_check_every: int = 0
    exit_fill: bool = True  # specee: write skipped layers' K/V at an exit (False only to measure its worth)
    exits: bool = True  # specee: False runs every step at full depth through the exit graph (measures its overhead)
    drafter: str = ""  # ngram: "" = copy (ours, drafts only where it pays), or a llama.cpp drafter (ngram-simple, ...)
    draft_model: str = ""  # draft: the draft model's path ("" = the registered model with the same tokenizer)
    # other conversations' KV caches kept (in memory, then on disk up to kv_disk_budget bytes; 0 =
    # memory only) so going back prefills only what is new; the bench turns it off (a cold prefill
    # per prompt, as the peer's)
    keep_kv: bool = True
    kv_disk_budget: int = KV_DISK_BUDGET_DEFAULT
    # an explicit mode measures vanilla's speed here while idle, once, for the meter's ratio; the bench
    # turns it off: its workers run side by side, and one's measurement slowed another's timed answers
    measure_reference: bool = True
    # requests the worker decodes together, each its own sequence in one llama.cpp batch per step
    # (vanilla and ngram on CPU placements: see Loaded.n_parallel); 1 = one at a time (the app)
    n_parallel: int = 1
    protocol_version: int = PROTOCOL_VERSION  # the worker refuses a Load of another version

    def validate(self) -> None:
        """SettingsError naming the first setting outside what the engine accepts."""
        _check(isinstance(self.model_path, str) and bool(self.model_path.strip()), "no model file given")
        if self.mode == Mode.REMOTE:
            raise SettingsError(f"mode remote is for remote engines; a local model runs one of {', '.join(MODES)}")
        _check(self.mode in MODES, f"unknown acceleration mode {self.mode!r}; choose one of {', '.join(MODES)}")
        _check(
            _is_int(self.n_draft) and 0 <= self.n_draft <= N_DRAFT_MAX,
            f"draft chain length must be 0 (the mode's default) to {N_DRAFT_MAX}, got {self.n_draft}",
        )
        _check(
            _is_int(self.exit_check_every) and 0 <= self.exit_check_every <= EXIT_CHECK_EVERY_MAX,
            f"exit_check_every must be 0 (off) or a step count up to {EXIT_CHECK_EVERY_MAX}, got {self.exit_check_every}",
        )
        _check(
            _is_int(self.kv_disk_budget) and 0 <= self.kv_disk_budget <= KV_DISK_BUDGET_MAX,
            f"kv_disk_budget must be 0 (memory only) to {KV_DISK_BUDGET_MAX} bytes, got {self.kv_disk_budget!r}",
        )
        _check(
            _is_int(self.n_parallel) and 1 <= self.n_parallel <= N_PARALLEL_MAX,
            f"parallel requests must be 1 to {N_PARALLEL_MAX}, got {self.n_parallel!r}",
        )
        for name in ("exit_fill", "exits", "keep_kv", "measure_reference"):
            _check(isinstance(getattr(self, name), bool), f"{name} must be true or false, got {getattr(self, name)!r}")
        _check(
            isinstance(self.drafter, str) and (not self.drafter or DRAFTER_RE.fullmatch(self.drafter) is not None),
            f"drafter must be copy or a llama.cpp drafter name such as ngram-simple, got {self.drafter!r}",
        )
        _check(isinstance(self.draft_model, str), f"draft_model must be a file path, got {self.draft_model!r}")
        self.placement.validate()


@dataclass
class Generate(Message):
    TYPE: ClassVar[str] = "generate"
    request_id: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)  # [{"role": ..., "content": ...}]
    sampling: Sampling = field(default_factory=Sampling)
    # bench: Done.margins gets, per decoded token (an ending token too), the gap between the top two
    # logits it was chosen from (vanilla only; where a mode diverges from vanilla it tells a
    # numerical tie from a real difference)
    report_margins: bool = False
    # the last message is the assistant's unfinished answer (it stopped at max_tokens): generate
    # its continuation; only the new text streams back
    continue_answer: bool = False
    # False: the client wants the whole answer at once (the HTTP server's non-streaming requests, the
    # bench): no Token or Stats while it is decoded, then its text as one Token, Stats and Done. On a
    # 2-core machine the writes and the reader's wake-ups per token run beside the decode threads.
    # Requests with logprobs stream regardless (each Token carries its tokens' logprobs).
    stream: bool = True
    # raw completion (the HTTP server's /v1/completions): this text is the whole prompt, tokenized as
    # is without the chat template, and `messages` is ignored; "" = a chat request
    prompt: str = ""
    # a conversation longer than the context: trimmed with a context_trimmed Notice (the app), or
    # refused (the HTTP server, unless its client asks for truncation). A raw prompt is always refused.
    on_overflow: Overflow = Overflow.TRIM
    # a GBNF grammar (root rule "root") the answer must match, enforced in llama.cpp's sampler chain;
    # the end-of-generation token comes only once the grammar is complete. "" = none. The accelerated
    # modes verify drafts without it: a request with a grammar runs in the vanilla decoder.
    grammar: str = ""
    # Token.logprobs for every generated token: its log-probability under the model's own distribution
    # (the full-vocabulary logits it was sampled from, before penalties and temperature) and the
    # top_logprobs (0..TOP_LOGPROBS_MAX) most likely tokens. Also runs in the vanilla decoder.
    logprobs: bool = False
    top_logprobs: int = 0
    # tool calls (the HTTP server's tools, from llama.cpp's chat templates): a lazy grammar applies only
    # from the first match of a trigger pattern (regex over the answer's text) or trigger token on
    # (tool_choice auto: the template's tool-call opening); a whole-answer grammar that starts at the
    # template's generation prompt reads grammar_prefill's tokens first. preserved_tokens: special
    # tokens whose text the answer shows (a template's tool-call markers), as other tokens'.
    grammar_lazy: bool = False
    grammar_trigger_patterns: list[str] = field(default_factory=list)
    grammar_trigger_tokens: list[int] = field(default_factory=list)
    grammar_prefill: list[int] = field(default_factory=list)
    preserved_tokens: list[int] = field(default_factory=list)

    def validate(self) -> None:
        """SettingsError for a request field outside what the engine accepts (Sampling has its own)."""
        _check(isinstance(self.grammar, str), f"grammar must be a GBNF text, got {type(self.grammar).__name__}")
        _check(isinstance(self.grammar_lazy, bool), f"grammar_lazy must be true or false, got {self.grammar_lazy!r}")
        _check(not self.grammar_lazy or bool(self.grammar), "grammar_lazy needs a grammar")
        _check(
            not self.grammar_lazy or bool(self.grammar_trigger_patterns or self.grammar_trigger_tokens),
            "a lazy grammar needs a trigger pattern or token",
        )
        _check(all(isinstance(x, str) for x in self.grammar_trigger_patterns), "grammar_trigger_patterns must be texts")
        for name in ("grammar_trigger_tokens", "grammar_prefill", "preserved_tokens"):
            _check(all(_is_int(t) and t >= 0 for t in getattr(self, name)), f"{name} must be token ids")
        _check(isinstance(self.logprobs, bool), f"logprobs must be true or false, got {self.logprobs!r}")
        _check(isinstance(self.stream, bool), f"stream must be true or false, got {self.stream!r}")
        _check(
            _is_int(self.top_logprobs) and 0 <= self.top_logprobs <= TOP_LOGPROBS_MAX,
            f"top_logprobs must be 0..{TOP_LOGPROBS_MAX}, got {self.top_logprobs!r}",
        )

    @property
    def needs_vanilla(self) -> bool:
        """Whether this request runs in the vanilla decoder whatever the loaded mode (see grammar, logprobs)."""
        return bool(self.grammar) or self.logprobs

    @property
    def live(self) -> bool:
        """Whether Token and Stats events go out while the answer is decoded (see stream)."""
        return self.stream or self.logprobs


@dataclass
class Cancel(Message):
    TYPE: ClassVar[str] = "cancel"
    request_id: str = ""


@dataclass
class CountTokens(Message):
    """How many tokens `text` would take as the next user message after `messages`: the message
    box's live count, by the model's own template and tokenizer (the app never loads llama.cpp).
    The worker answers TokenCount with this request_id."""

    TYPE: ClassVar[str] = "count_tokens"
    request_id: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)  # the conversation so far (system prompt first)
    text: str = ""  # the message being written
    max_tokens: int = 512  # the answer's length limit (Sampling.max_tokens): Generate keeps room for it


@dataclass
class Unload(Message):
    TYPE: ClassVar[str] = "unload"


@dataclass
class Shutdown(Message):
    TYPE: ClassVar[str] = "shutdown"


@dataclass
class Embed(Message):
    """Command: embeddings of texts (or of token lists, given as is) from the loaded model, for the
    HTTP server's /v1/embeddings; the worker answers Embeddings with this request_id, or an Error
    (context_length_exceeded for an input longer than it embeds at once)."""

    TYPE: ClassVar[str] = "embed"
    request_id: str = ""
    texts: list[str] = field(default_factory=list)
    token_lists: list[list[int]] = field(default_factory=list)  # used when texts is empty
