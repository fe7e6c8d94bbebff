"""Events: worker -> client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from engine.protocol.enums import ErrorKind, FinishReason, Mode
from engine.protocol.message import Message
from engine.protocol.settings import Acceleration, Placement
from engine.protocol.version import PROTOCOL_VERSION


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
    # accepted, draft/verify/feed ms per step; specee also lists (exit_hist) and nested dicts.
    accel: dict[str, Any] = field(default_factory=dict)


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


@dataclass
class Unloaded(Message):
    TYPE: ClassVar[str] = "unloaded"


@dataclass
class Embeddings(Message):
    """Embed's answer: one unit-length vector per input (the mean of the model's last hidden states)."""

    TYPE: ClassVar[str] = "embeddings"
    request_id: str = ""
    vectors: list[list[float]] = field(default_factory=list)
    n_tokens: list[int] = field(default_factory=list)  # each input's tokens
