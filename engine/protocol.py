"""The one protocol between the app (client) and the engine worker process.

Transport: one JSON object per line; commands go to the worker's stdin, events come back on a
private pipe. Every message carries a "type" tag; `encode` / `decode` are the only (de)serialisers,
so both sides agree by construction.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

PROTOCOL_VERSION = 1


class ProtocolError(ValueError):
    """A line that is not a valid message."""


class SettingsError(ValueError):
    """Settings outside what the engine accepts; the message says which and why."""


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
    max_tokens: int = 512
    stop: list[str] = field(default_factory=list)

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
            isinstance(self.max_tokens, int) and 1 <= self.max_tokens <= 1_000_000,
            f"max_tokens must be 1..1000000, got {self.max_tokens}",
        )
        check(all(isinstance(s, str) and s for s in self.stop), "stop strings must be non-empty strings")
        check(len(self.stop) <= 16, "at most 16 stop strings")


# auto: measured per machine; eagle, specee: trained weights for the model; ngram, draft: training-free
MODES = ("auto", "vanilla", "eagle", "specee", "ngram", "draft")
LAYOUTS = ("auto", "last", "first")


@dataclass
class Placement:
    n_ctx: int = 4096
    n_threads: int = 0  # 0 = physical cores
    n_gpu_layers: int = 0
    # "auto": the worker's planner decides (n_gpu_layers and output_on_gpu are ignored); "last":
    # upstream, n_gpu_layers offloads the last layers; "first": the SpecEE layout, the first
    # n_gpu_layers on the GPU (exits then skip CPU layers). output_on_gpu: with "first".
    layout: str = "auto"
    output_on_gpu: bool = False

    def last_layer_on_gpu(self, n_layer: int) -> bool:
        """Where the final layer (and so the hidden states an EAGLE head reads) lives."""
        if self.layout == "auto" or self.n_gpu_layers == 0:
            return False
        return self.layout == "last" or self.n_gpu_layers < 0 or self.n_gpu_layers >= n_layer

    def validate(self) -> None:
        if not (isinstance(self.n_ctx, int) and 256 <= self.n_ctx <= 1 << 20):
            raise SettingsError(f"context length must be 256..1048576 tokens, got {self.n_ctx}")
        if not (isinstance(self.n_threads, int) and 0 <= self.n_threads <= 512):
            raise SettingsError(f"threads must be 0 (auto) to 512, got {self.n_threads}")
        if not (isinstance(self.n_gpu_layers, int) and -1 <= self.n_gpu_layers <= 10_000):
            raise SettingsError(f"GPU layers must be -1 (all) to 10000, got {self.n_gpu_layers}")
        if self.layout not in LAYOUTS:
            raise SettingsError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------

_REGISTRY: dict[str, type[Message]] = {}


@dataclass
class Message:
    TYPE: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.TYPE:
            _REGISTRY[cls.TYPE] = cls


# Commands: client -> worker


@dataclass
class Load(Message):
    TYPE: ClassVar[str] = "load"
    model_path: str = ""
    placement: Placement = field(default_factory=Placement)
    mode: str = "vanilla"
    n_draft: int = 0  # eagle chain length; 0 = the head's trained default
    # specee: also run full depth on every Nth step to measure exit precision (bench; 0 = off)
    exit_check_every: int = 0
    exit_fill: bool = True  # specee: write skipped layers' K/V at an exit (False only to measure its worth)
    exits: bool = True  # specee: False runs every step at full depth through the exit graph (measures its overhead)
    drafter: str = ""  # ngram: llama.cpp's drafter type ("" = ngram-simple, prompt lookup)
    draft_model: str = ""  # draft: the draft model's path ("" = the registered model with the same tokenizer)


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
    # raw completion (the HTTP server's /v1/completions): this text is the whole prompt, tokenized as
    # is without the chat template, and `messages` is ignored; "" = a chat request
    prompt: str = ""


@dataclass
class Cancel(Message):
    TYPE: ClassVar[str] = "cancel"
    request_id: str = ""


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
    mode: str = "vanilla"
    mode_reason: str = ""  # why `auto` chose this mode, measured on this machine
    load_ms: float = 0.0
    measured_tok_s: dict[str, float] = field(default_factory=dict)  # auto's calibration, per mode
    placement: Placement = field(default_factory=Placement)  # what was loaded (never "auto")
    plan: str = ""  # why: the planner's explanation, or the explicit override
    predicted_tok_s: dict[str, float] = field(default_factory=dict)  # the planner's decode speed here, per mode
    trainable: bool = False  # no EAGLE head is installed for this model, and our trainers support its architecture
    chat_format_note: str = ""  # set when the file has no chat template (and when it looks like a base model)


@dataclass
class AutoDecided(Message):
    """`auto` finished measuring in the background (the load answered in vanilla meanwhile) and now
    runs `mode`; later answers use it."""

    TYPE: ClassVar[str] = "auto_decided"
    mode: str = "vanilla"
    mode_reason: str = ""
    measured_tok_s: dict[str, float] = field(default_factory=dict)


@dataclass
class Notice(Message):
    """Something the user should see that is not an error (e.g. old turns dropped)."""

    TYPE: ClassVar[str] = "notice"
    request_id: str = ""
    kind: str = ""
    message: str = ""


@dataclass
class Token(Message):
    TYPE: ClassVar[str] = "token"
    request_id: str = ""
    text: str = ""
    index: int = 0  # generated-token index of the last token in this piece
    t_ms: float = 0.0  # since the generate command arrived


@dataclass
class Stats(Message):
    TYPE: ClassVar[str] = "stats"
    request_id: str = ""
    mode: str = "vanilla"
    n_prompt: int = 0
    n_prompt_cached: int = 0  # reused from the previous turn's KV cache
    n_generated: int = 0
    ttft_ms: float = 0.0
    prefill_tok_s: float = 0.0
    decode_tok_s: float = 0.0
    n_ctx_used: int = 0
    n_threads: int = 0  # decode threads in use: fewer than the cores while another process is busy
    # Mode-specific: eagle -> acceptance_length (tokens per target pass), accept_rate, drafted,
    # accepted, draft/verify/feed ms per step.
    accel: dict[str, float] = field(default_factory=dict)


@dataclass
class Done(Message):
    TYPE: ClassVar[str] = "done"
    request_id: str = ""
    finish_reason: str = ""  # stop | length | context_full | cancelled
    text: str = ""
    n_prompt: int = 0
    n_generated: int = 0
    tokens: list[int] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)  # see Generate.report_margins


@dataclass
class Error(Message):
    TYPE: ClassVar[str] = "error"
    request_id: str = ""
    kind: str = ""  # model_file | load_failed | no_model | bad_settings | bad_request | busy | worker_died | internal
    message: str = ""


@dataclass
class Unloaded(Message):
    TYPE: ClassVar[str] = "unloaded"


_NESTED = {"placement": Placement, "sampling": Sampling}


def encode(msg: Message) -> str:
    data = asdict(msg)
    data["type"] = msg.TYPE
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def decode(line: str | bytes) -> Message:
    try:
        data = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("type") not in _REGISTRY:
        raise ProtocolError(f"unknown message: {str(line)[:200]}")
    cls = _REGISTRY[data.pop("type")]
    known = {f.name for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            continue  # newer peer: ignore fields we do not know
        nested = _NESTED.get(key)
        if nested is not None:
            if not isinstance(value, dict):
                raise ProtocolError(f"{key} must be an object")
            nested_known = {f.name for f in fields(nested)}
            value = nested(**{k: v for k, v in value.items() if k in nested_known})
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ProtocolError(str(exc)) from exc
