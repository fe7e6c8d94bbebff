"""The settings a Load and a Generate carry (sampling, placement) and what the worker found for a
model (acceleration), each with its own validation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.protocol.enums import LAYOUTS, Layout, Mode
from engine.protocol.errors import SettingsError
from engine.protocol.limits import (
    N_CTX_MAX,
    N_CTX_MIN,
    N_GPU_LAYERS_MAX,
    N_THREADS_MAX,
    _check,
    _is_int,
    _is_number,
)
from engine.protocol.typed import _Typed


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
