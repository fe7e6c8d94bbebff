"""The one protocol between the app (client) and the engine worker process.

Transport: one JSON object per line; commands go to the worker's stdin, events come back on a
private pipe. Every message carries a "type" tag; `encode` / `decode` are the only (de)serialisers,
so both sides agree by construction. Closed sets of values (modes, layouts, finish reasons, error
kinds) are StrEnums: on the wire they are the same plain strings, in code they compare equal to
them (`msg.mode == "vanilla"`), and `decode` refuses a value outside the set. This module is also
the one home of the acceleration modes and of the limits the engine accepts: the worker enforces
them, the settings file, the CLI and the dialogs import them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from functools import cache
from typing import Any, ClassVar

# 2: enums checked on decode, Load carries the version and Loaded.acceleration (1: unversioned Load);
# 3: CountTokens; 4: Generate.on_overflow (an older worker would trim what the server must refuse),
# Sampling's penalties and logit_bias, ErrorKind.CONTEXT_LENGTH_EXCEEDED, Load.keep_kv, kv_disk_budget and
# measure_reference; 5: Generate.grammar, Generate.logprobs and top_logprobs, Token.logprobs (an older worker
# would ignore them); 6: Load.n_parallel and Loaded.n_parallel (an older worker would answer one request at a
# time while the server sends several), Generate.grammar_lazy, grammar_trigger_patterns/tokens, grammar_prefill
# and preserved_tokens (tool calls: an older worker would apply a lazy grammar from the first token)
# 7: PromptProgress (an older client would fail to read it), the prompt's reading interrupted by Cancel;
# Embed and Embeddings (the HTTP server's /v1/embeddings)
PROTOCOL_VERSION = 7
TOP_LOGPROBS_MAX = 20  # Generate.top_logprobs: the most alternatives reported per token (OpenAI's limit)
# conversations' saved KV caches on disk (engine.kept_caches): the default budget and the most accepted
KV_DISK_BUDGET_DEFAULT = 4 * 1024**3
KV_DISK_BUDGET_MAX = 1024**4


class ProtocolError(ValueError):
    """A line that is not a valid message."""


class VersionMismatch(ProtocolError):
    """The peer speaks another protocol version: the app and the engine come from different installs."""

    def __init__(self, theirs: object, what: str) -> None:
        super().__init__(
            f"{what} speaks protocol version {theirs}, this side speaks {PROTOCOL_VERSION}: the app and its "
            "engine come from different installs. Reinstall the app (or restart it after an update)."
        )
        self.theirs = theirs


class SettingsError(ValueError):
    """Settings outside what the engine accepts; the message says which and why."""


# ---------------------------------------------------------------------------------------------
# Closed sets of values
# ---------------------------------------------------------------------------------------------


class Mode(StrEnum):
    AUTO = "auto"  # measured per machine: the fastest of the modes this model can run here
    VANILLA = "vanilla"
    EAGLE = "eagle"  # trained weights for the model: an EAGLE-3 head
    SPECEE = "specee"  # ... the head and the exit predictors
    NGRAM = "ngram"  # training-free: llama.cpp's n-gram drafters
    DRAFT = "draft"  # training-free: a smaller model with the same tokenizer drafts
    REMOTE = "remote"  # an OpenAI-compatible server answers (Stats/Loaded of a remote engine); never loaded locally


# What a local Load may ask for (and the settings and the CLI offer), as plain strings
MODES: tuple[str, ...] = tuple(m.value for m in Mode if m is not Mode.REMOTE)
# The modes `auto` may pick: every local one but auto itself
MEASURABLE_MODES: tuple[str, ...] = tuple(m for m in MODES if m != Mode.AUTO)
# The modes whose requests a worker loaded with n_parallel > 1 decodes together (as vanilla rows:
# drafting and early exit follow one sequence); the others answer one request at a time
BATCHED_MODES: frozenset[str] = frozenset({Mode.VANILLA.value, Mode.NGRAM.value})


class Layout(StrEnum):
    AUTO = "auto"  # the worker's planner decides
    LAST = "last"  # upstream: n_gpu_layers offloads the last layers
    FIRST = "first"  # SpecEE's: the first n_gpu_layers on the GPU (exits then skip CPU layers)


LAYOUTS: tuple[str, ...] = tuple(m.value for m in Layout)


class FinishReason(StrEnum):
    STOP = "stop"  # the model ended its answer, or a stop string appeared
    LENGTH = "length"  # max_tokens reached: Generate.continue_answer can go on
    CONTEXT_FULL = "context_full"
    CANCELLED = "cancelled"


class Overflow(StrEnum):
    """What Generate does with a conversation longer than the context."""

    TRIM = "trim"  # the app: leave the oldest turns out (or cut the last message's middle), with a Notice
    REFUSE = "refuse"  # the HTTP server: an Error of kind context_length_exceeded; the client decides what to cut


class ErrorKind(StrEnum):
    MODEL_FILE = "model_file"  # the GGUF is missing, truncated, corrupt or not a model
    LOAD_FAILED = "load_failed"  # llama.cpp refused a file that passed our checks
    NO_MODEL = "no_model"
    BAD_SETTINGS = "bad_settings"
    BAD_REQUEST = "bad_request"
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # Generate.on_overflow refuse: the prompt does not fit
    BUSY = "busy"
    WORKER_DIED = "worker_died"
    INTERNAL = "internal"
    NATIVE = "native"  # the native build is missing or broken
    VERSION_MISMATCH = "version_mismatch"  # app and engine speak different protocol versions
    TIMEOUT = "timeout"  # no reply in time (the local client's wait, or a remote server)
    # a requested mode cannot run for this model (the message says how to get it)
    NO_ACCELERATION = "no_acceleration"
    NOT_MEASURED = "not_measured"
    UNSUPPORTED_ARCHITECTURE = "unsupported_architecture"
    NO_DRAFT_MODEL = "no_draft_model"
    # acceleration weights or a draft model that cannot be used
    BAD_HEAD = "bad_head"
    WRONG_HEAD = "wrong_head"
    BAD_PREDICTORS = "bad_predictors"
    WRONG_PREDICTORS = "wrong_predictors"
    BAD_DRAFT_MODEL = "bad_draft_model"
    BAD_DRAFT = "bad_draft"
    # remote engines (an OpenAI-compatible server)
    UNREACHABLE = "unreachable"
    UNAUTHORIZED = "unauthorized"
    BAD_RESPONSE = "bad_response"
    SERVER_STOPPED = "server_stopped"  # it stopped answering mid-reply: it died, restarted, or the connection dropped


# ---------------------------------------------------------------------------------------------
# Limits: the one set (the worker enforces them; settings, CLI and dialogs use them)
# ---------------------------------------------------------------------------------------------

N_CTX_MIN, N_CTX_MAX = 256, 1 << 20  # tokens
N_THREADS_MAX = 512  # 0 = the physical cores (and fewer while other processes are busy)
N_GPU_LAYERS_MAX = 10_000  # -1 = all
N_DRAFT_MAX = 16  # draft chain length; 0 = the mode's default
# requests decoded together (Load.n_parallel): each takes a sequence and a full context's KV cells
N_PARALLEL_MAX = 16
EXIT_CHECK_EVERY_MAX = 1_000_000
DRAFTER_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")  # a llama.cpp drafter type name; the engine checks it exists


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise SettingsError(what)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class _Typed:
    """Enum-typed fields given as plain strings become members (unknown strings stay as given, for
    validate() or the peer's decode to refuse with a clear message)."""

    def __post_init__(self) -> None:
        for name, enum in _enum_fields(type(self)).items():
            value = getattr(self, name)
            if isinstance(value, str) and not isinstance(value, enum) and value in enum._value2member_map_:
                setattr(self, name, enum(value))


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------


@dataclass
class Sampling:
    temperature: float = 0.7  # 0 = greedy
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    seed: int = -1  # -1 = random
    max_tokens: int = 512  # 0 = as long as the context has room (the answer then ends context_full)
    stop: list[str] = field(default_factory=list)
    # OpenAI's penalties (-2..2) over the last tokens, applied with repeat_penalty by llama.cpp's sampler
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # token id (a decimal string: JSON keys are strings) -> added to its logit before sampling (-100..100)
    logit_bias: dict[str, float] = field(default_factory=dict)

    @classmethod
    def greedy(cls, max_tokens: int = 512) -> Sampling:
        return cls(temperature=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, seed=0, max_tokens=max_tokens)

    def validate(self) -> None:
        def check(ok: bool, what: str) -> None:
            if not ok:
                raise SettingsError(what)

        for name in ("temperature", "top_p", "min_p", "repeat_penalty"):
            value = getattr(self, name)
            check(isinstance(value, (int, float)) and math.isfinite(value), f"{name} must be a finite number, got {value!r}")
        check(0.0 <= self.temperature <= 5.0, f"temperature must be between 0 and 5, got {self.temperature}")
        check(isinstance(self.top_k, int) and 0 <= self.top_k <= 100_000, f"top_k must be 0 (off) to 100000, got {self.top_k}")
        check(0.0 < self.top_p <= 1.0, f"top_p must be in (0, 1], got {self.top_p}")
        check(0.0 <= self.min_p < 1.0, f"min_p must be in [0, 1), got {self.min_p}")
        check(0.5 <= self.repeat_penalty <= 3.0, f"repeat_penalty must be between 0.5 and 3, got {self.repeat_penalty}")
        check(isinstance(self.seed, int) and -1 <= self.seed < 2**32, f"seed must be -1 (random) or 0..2^32-1, got {self.seed}")
        check(
            _is_int(self.max_tokens) and 0 <= self.max_tokens <= 1_000_000,
            f"max_tokens must be 0 (the context's room) to 1000000, got {self.max_tokens}",
        )
        check(all(isinstance(s, str) and s for s in self.stop), "stop strings must be non-empty strings")
        check(len(self.stop) <= 16, "at most 16 stop strings")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            check(_is_number(value) and -2.0 <= value <= 2.0, f"{name} must be between -2 and 2, got {value!r}")
        check(isinstance(self.logit_bias, dict), f"logit_bias must map token ids to biases, got {self.logit_bias!r}")
        for token, bias in self.logit_bias.items():
            is_id = isinstance(token, str) and token.isascii() and token.isdigit()
            check(is_id, f"logit_bias keys must be token ids, got {token!r}")
            check(_is_number(bias) and -100 <= bias <= 100, f"logit_bias values must be -100..100, got {bias!r} for {token}")


@dataclass
class Placement(_Typed):
    n_ctx: int = 4096
    n_threads: int = 0  # 0 = physical cores
    n_gpu_layers: int = 0
    # "auto": the worker's planner decides (n_gpu_layers and output_on_gpu are ignored); "last":
    # upstream, n_gpu_layers offloads the last layers; "first": the SpecEE layout, the first
    # n_gpu_layers on the GPU (exits then skip CPU layers). output_on_gpu: with "first".
    layout: Layout = Layout.AUTO
    output_on_gpu: bool = False

    def last_layer_on_gpu(self, n_layer: int) -> bool:
        """Where the final layer (and so the hidden states an EAGLE head reads) lives."""
        if self.layout == Layout.AUTO or self.n_gpu_layers == 0:
            return False
        return self.layout == Layout.LAST or self.n_gpu_layers < 0 or self.n_gpu_layers >= n_layer

    def validate(self) -> None:
        _check(
            _is_int(self.n_ctx) and N_CTX_MIN <= self.n_ctx <= N_CTX_MAX,
            f"context length must be {N_CTX_MIN}..{N_CTX_MAX} tokens, got {self.n_ctx}",
        )
        _check(
            _is_int(self.n_threads) and 0 <= self.n_threads <= N_THREADS_MAX,
            f"threads must be 0 (auto) to {N_THREADS_MAX}, got {self.n_threads}",
        )
        _check(
            _is_int(self.n_gpu_layers) and -1 <= self.n_gpu_layers <= N_GPU_LAYERS_MAX,
            f"GPU layers must be -1 (all) to {N_GPU_LAYERS_MAX}, got {self.n_gpu_layers}",
        )
        _check(self.layout in LAYOUTS, f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        _check(isinstance(self.output_on_gpu, bool), f"output_on_gpu must be true or false, got {self.output_on_gpu!r}")


@dataclass
class Acceleration(_Typed):
    """What the worker found for a loaded model, as flags: the window shows the model's acceleration
    state and offers "Train acceleration" from these alone, never from reason texts."""

    architecture_supported: bool = False  # our eagle/specee hooks exist for its architecture
    eagle_head: bool = False  # an EAGLE head for this exact model is installed
    eagle_measured: bool = False  # ... and the engine measured it (an imported head is not, until measured)
    exit_predictors: bool = False  # SpecEE's exit predictors are installed
    draft_model: str = ""  # the file name of the installed model paired to draft for it ("" = none found)
    modes: list[Mode] = field(default_factory=list)  # every mode this model can run here (vanilla first)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.modes = [Mode(m) if isinstance(m, str) and m in Mode._value2member_map_ else m for m in self.modes]


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------

_REGISTRY: dict[str, type[Message]] = {}


@dataclass
class Message(_Typed):
    TYPE: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.TYPE:
            _REGISTRY[cls.TYPE] = cls


# Commands: client -> worker


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


# Events: worker -> client


@dataclass
class Ready(Message):
    TYPE: ClassVar[str] = "ready"
    pid: int = 0
    protocol_version: int = PROTOCOL_VERSION
    native: dict[str, Any] = field(default_factory=dict)


@dataclass
class Loaded(Message):
    TYPE: ClassVar[str] = "loaded"
    model_path: str = ""
    name: str = ""
    architecture: str = ""
    n_layer: int = 0
    n_embd: int = 0
    n_vocab: int = 0
    n_ctx: int = 0
    n_ctx_train: int = 0
    n_threads: int = 0
    mode: Mode = Mode.VANILLA  # the one decision of the mode: explicit, or auto's measurement
    mode_reason: str = ""  # why this mode (for people; code reads the fields, never this text)
    load_ms: float = 0.0
    measured_tok_s: dict[str, float] = field(default_factory=dict)  # auto's calibration, per mode
    placement: Placement = field(default_factory=Placement)  # what was loaded (never "auto")
    plan: str = ""  # why: the planner's explanation, or the explicit override
    predicted_tok_s: dict[str, float] = field(default_factory=dict)  # the planner's decode speed here, per mode
    trainable: bool = False  # no EAGLE head is installed for this model, and our trainers support its architecture
    acceleration: Acceleration = field(default_factory=Acceleration)
    measuring: bool = False  # auto runs vanilla while it measures the other modes; an AutoDecided not measuring ends it
    chat_format_note: str = ""  # set when the file has no chat template (and when it looks like a base model)
    # the model that was running before a refused Load (the Error before this says why), loaded again:
    # a waiting load_intent() skips it
    kept: bool = False
    # requests decoded together while the mode is vanilla or ngram (Load.n_parallel; 1 where the
    # placement puts layers on a GPU, or the mode never batches); eagle, specee and draft take one at a time
    n_parallel: int = 1


@dataclass
class AutoDecided(Message):
    """`auto` finished measuring in the background (the load answered in vanilla meanwhile) and now
    runs `mode`; later answers use it (with `measuring` set: it has not finished, see there). Also
    sent, with the mode unchanged, when an explicitly chosen mode's vanilla reference was measured
    (the meter's "x vanilla")."""

    TYPE: ClassVar[str] = "auto_decided"
    mode: Mode = Mode.VANILLA
    mode_reason: str = ""
    measured_tok_s: dict[str, float] = field(default_factory=dict)
    # auto has no decision to stand by yet: its measurement waits for a quiet machine, or the answers
    # contradicted its decision and it measures again; `mode` runs meanwhile (mode_reason says why)
    measuring: bool = False


@dataclass
class Notice(Message):
    """Something the user should see that is not an error (e.g. old turns dropped)."""

    TYPE: ClassVar[str] = "notice"
    request_id: str = ""
    kind: str = ""
    message: str = ""


@dataclass
class PromptProgress(Message):
    """A Generate's prompt being read (prefilled), sent before its first token: once when reading
    starts and after every batch of it (n_batch tokens, a few seconds on a laptop for a long prompt).
    n_cached of n_prompt were reused from a kept cache and never read; n_done counts them too."""

    TYPE: ClassVar[str] = "prompt_progress"
    request_id: str = ""
    n_prompt: int = 0
    n_cached: int = 0
    n_done: int = 0
    t_ms: float = 0.0  # since the generate command arrived


@dataclass
class TopLogprob:
    """One token and its log-probability (natural log) under the model's distribution at that step."""

    token: int = 0
    piece: list[int] = field(default_factory=list)  # the token's bytes (a piece may be part of a UTF-8 character)
    logprob: float = 0.0


@dataclass
class TokenLogprob(TopLogprob):
    """A generated token's log-probability and the most likely tokens at its step (Generate.logprobs)."""

    top: list[TopLogprob] = field(default_factory=list)  # Generate.top_logprobs of them, most likely first


@dataclass
class Token(Message):
    TYPE: ClassVar[str] = "token"
    request_id: str = ""
    text: str = ""
    index: int = 0  # generated-token index of the last token in this piece
    t_ms: float = 0.0  # since the generate command arrived
    # Generate.logprobs: the generated tokens since the previous Token, in order (text held back for a
    # possible stop string waits with its tokens); a last Token may carry tokens and no text
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass
class Stats(Message):
    TYPE: ClassVar[str] = "stats"
    request_id: str = ""
    mode: Mode = Mode.VANILLA
    n_prompt: int = 0
    n_prompt_cached: int = 0  # reused from the previous turn's KV cache
    n_generated: int = 0
    ttft_ms: float = 0.0  # 0: no token came (stopped while the prompt was read)
    prefill_tok_s: float = 0.0
    decode_tok_s: float = 0.0  # this answer's decode speed: tokens after the first over the time since it
    recent_tok_s: float = 0.0  # ... over about the last second (the engine's clock; 0 = not known yet)
    # decode_tok_s over vanilla's speed measured here with the same threads, context length and
    # prompt-length band; 0 = no such measurement (or vanilla itself): nothing to compare with
    vs_vanilla: float = 0.0
    n_ctx_used: int = 0
    n_threads: int = 0  # decode threads in use: fewer than the cores while another process is busy
    # Mode-specific: eagle -> acceptance_length (tokens per target pass), accept_rate, drafted,
    # accepted, draft/verify/feed ms per step.
    accel: dict[str, float] = field(default_factory=dict)


@dataclass
class Done(Message):
    TYPE: ClassVar[str] = "done"
    request_id: str = ""
    finish_reason: FinishReason = FinishReason.STOP
    text: str = ""
    n_prompt: int = 0
    n_generated: int = 0
    tokens: list[int] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)  # see Generate.report_margins


@dataclass
class Error(Message):
    TYPE: ClassVar[str] = "error"
    request_id: str = ""
    kind: ErrorKind = ErrorKind.INTERNAL
    message: str = ""


@dataclass
class TokenCount(Message):
    """CountTokens' answer. n_prompt > n_budget: a Generate would leave the oldest messages out or,
    for a message longer than the room, cut its middle (saying so in a context_trimmed Notice)."""

    TYPE: ClassVar[str] = "token_count"
    request_id: str = ""
    n_text: int = 0  # the text's own tokens
    n_prompt: int = 0  # the whole prompt a Generate of messages + text would build, uncut
    n_budget: int = 0  # what a prompt may take: the context less the room kept for the answer
    n_ctx: int = 0


def prompt_budget(n_ctx: int, max_tokens: int) -> int:
    """The tokens a prompt may take: the context less the room kept for the answer, never more
    than half the context (a long history is worth more than a huge max_tokens rarely used).
    max_tokens 0 (the answer may take all the room left) keeps ANSWER_RESERVE free for it."""
    return n_ctx - min(max_tokens or ANSWER_RESERVE, n_ctx // 2)


ANSWER_RESERVE = 512  # tokens kept free for an answer with no length limit (max_tokens 0) when old turns are dropped


@dataclass
class Unloaded(Message):
    TYPE: ClassVar[str] = "unloaded"


@dataclass
class Embed(Message):
    """Command: embeddings of texts (or of token lists, given as is) from the loaded model, for the
    HTTP server's /v1/embeddings; the worker answers Embeddings with this request_id, or an Error
    (context_length_exceeded for an input longer than it embeds at once)."""

    TYPE: ClassVar[str] = "embed"
    request_id: str = ""
    texts: list[str] = field(default_factory=list)
    token_lists: list[list[int]] = field(default_factory=list)  # used when texts is empty


@dataclass
class Embeddings(Message):
    """Embed's answer: one unit-length vector per input (the mean of the model's last hidden states)."""

    TYPE: ClassVar[str] = "embeddings"
    request_id: str = ""
    vectors: list[list[float]] = field(default_factory=list)
    n_tokens: list[int] = field(default_factory=list)  # each input's tokens


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _enum_fields(cls: type) -> dict[str, type[StrEnum]]:
    hints = _hints(cls)
    return {f.name: hints[f.name] for f in fields(cls) if isinstance(hints[f.name], type) and issubclass(hints[f.name], StrEnum)}


def encode(msg: Message) -> str:
    data = asdict(msg)
    data["type"] = msg.TYPE
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _value(value: Any, hint: Any, where: str) -> Any:
    """A JSON value as the field's type: enum members (known values only) and nested dataclasses."""
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        if not isinstance(value, str) or value not in hint._value2member_map_:
            choices = ", ".join(m.value for m in hint)
            raise ProtocolError(f"{where}: {value!r} is not a known {hint.__name__} (one of {choices})")
        return hint(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ProtocolError(f"{where} must be an object")
        return _build(hint, value, where)
    if typing.get_origin(hint) is list and typing.get_args(hint):
        if not isinstance(value, list):
            raise ProtocolError(f"{where} must be a list")
        (item,) = typing.get_args(hint)
        return [_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    hints = _hints(cls)
    known = {f.name for f in fields(cls)}
    # newer peer: fields we do not know are ignored
    kwargs = {k: _value(v, hints[k], f"{where}.{k}") for k, v in data.items() if k in known}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ProtocolError(f"{where}: {exc}") from exc


def decode(line: str | bytes) -> Message:
    """The message on one line. ProtocolError for anything else: not JSON, an unknown type, a value
    outside its enum; VersionMismatch (checked first) for a Load or Ready of another version."""
    try:
        data = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("type") not in _REGISTRY:
        raise ProtocolError(f"unknown message: {str(line)[:200]}")
    cls = _REGISTRY[data.pop("type")]
    if "protocol_version" in {f.name for f in fields(cls)}:
        version = data.get("protocol_version", 1)  # version 1 sent no version in Load
        if version != PROTOCOL_VERSION:
            raise VersionMismatch(version, "the engine" if cls is Ready else "the app")
    return _build(cls, data, cls.TYPE)
