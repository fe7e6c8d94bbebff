"""The target model and its context, through llama.h (the ctypes bindings of include/llama.h that
llama-cpp-python ships as llama_cpp.llama_cpp), as draft models already load
(engine/llm/decoders/native_loop.py). Nothing else in the engine touches llama-cpp-python's
high-level `Llama` or its `_internals`: an upgrade of llama-cpp-python that changes them changes
nothing here, and one that changes llama.h's bindings shows up in this file and the C calls beside it.

The parameters are those llama-cpp-python 0.3's `Llama(...)` passed for the same arguments (the
answers stay token-identical to it), set here directly: the weights' runtime repacking
(use_extra_bufts), the sequences a context holds (n_seq_max, kv_unified) and flash attention, which
`Llama` has no argument for and whose defaults were patched while it loaded.

Beyond llama.h the engine uses two of llama-cpp-python's own Python pieces: its Jinja renderer of
GGUF chat templates (re-exported below, for engine/llm/chat_prompt.py) and its JSON-schema to GBNF
converter (engine/llm/grammars.py)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llama_cpp import llama_cpp as C
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

__all__ = ["Jinja2ChatFormatter", "Target", "context_params", "init_backend", "model_params"]

# what Llama's last_n_tokens_size defaulted to: the repetition penalties' window (make_sampler)
PENALTY_LAST_N = 64
# Llama's ubatch cap: a prefill batch is computed in micro-batches of at most this many rows
N_UBATCH = 512

# llama.cpp's log, as llama-cpp-python printed it with verbose=False: errors only, to stderr
_GGML_LOG_LEVEL_NONE, _GGML_LOG_LEVEL_ERROR = 0, 3


def _print_errors(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    if level in (_GGML_LOG_LEVEL_NONE, _GGML_LOG_LEVEL_ERROR):
        print(text.decode("utf-8", errors="replace"), end="", flush=True, file=sys.stderr)


# its C callback, kept referenced here for as long as llama.cpp may call it (wrapped by a call, not a
# decorator: llama_cpp is read untyped, and an untyped decorator would untype the function)
_log_errors = C.llama_log_callback(_print_errors)


_backend_ready = False


def init_backend() -> None:
    """llama.cpp's one-time setup, and its log reduced to errors (before any model loads)."""
    global _backend_ready
    if _backend_ready:
        return
    C.llama_log_set(_log_errors, ctypes.c_void_p(0))
    with _silenced():
        C.llama_backend_init()
    _backend_ready = True


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """stdout and stderr (the file descriptors: native code prints there directly) to /dev/null, as
    llama-cpp-python did around a model's load with verbose=False."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def model_params(n_gpu_layers: int = 0, *, vocab_only: bool = False, repack: bool | None = None) -> Any:
    """llama_model_params for a target: n_gpu_layers -1 puts every layer on the GPU. repack: the CPU
    backend's runtime repacking of the weights (use_extra_bufts; None: llama.cpp's default). Off, the
    weights stay in their file layout and every batch size runs through the same vec_dot kernels; on
    only where the repacked kernels are batch-invariant too (engine/placement/weights_layout.py
    repack_is_exact). Before, a verify batch drifted from vanilla (Qwen2.5-Coder-1.5B Q4_K_M: 7/20
    ngram answers identical)."""
    params = C.llama_model_default_params()
    params.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers == -1 else n_gpu_layers
    params.split_mode = C.LLAMA_SPLIT_MODE_LAYER
    params.main_gpu = 0
    params.vocab_only = vocab_only
    params.load_mode = C.LLAMA_LOAD_MODE_MMAP
    if repack is not None:
        params.use_extra_bufts = repack
    return params


def context_params(
    n_ctx: int, n_batch: int, n_threads: int, n_threads_batch: int, *,
    n_ubatch: int = N_UBATCH, flash_attn: bool = False, n_seq_max: int = 1,
) -> Any:  # fmt: skip
    """llama_context_params as Llama(...) set them for these arguments. n_seq_max > 1: that many
    sequences, each in a KV cache of its own (n_ctx / n_seq_max cells; engine/llm/batched.py decodes
    them together). Not one unified cache: there a sequence's positions could land in cells out of
    order (a freed hole taken by a later token), flash attention then sums over them in another
    order, and an answer decoded beside others was no longer the one it gets alone."""
    params = C.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = n_batch
    params.n_ubatch = min(n_batch, n_ubatch)
    params.n_threads = n_threads
    params.n_threads_batch = n_threads_batch
    params.rope_scaling_type = C.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED
    params.pooling_type = C.LLAMA_POOLING_TYPE_UNSPECIFIED
    params.attention_type = C.LLAMA_ATTENTION_TYPE_UNSPECIFIED
    params.rope_freq_base = 0.0
    params.rope_freq_scale = 0.0
    params.yarn_ext_factor = -1.0
    params.yarn_attn_factor = 1.0
    params.yarn_beta_fast = 32.0
    params.yarn_beta_slow = 1.0
    params.yarn_orig_ctx = 0
    params.embeddings = False
    params.offload_kqv = True
    params.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else C.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.no_perf = False
    if n_seq_max > 1:
        params.n_seq_max = n_seq_max
        params.kv_unified = False
    return params


class Target:
    """A loaded model (llama_model), its vocabulary and, unless loaded vocab_only, its context
    (llama_context). `model`, `vocab` and `ctx` are llama.h's pointers, for the C calls that take
    them (ours in engine.native included). close() frees the context, then the model."""

    def __init__(self, model: Any, ctx: Any, n_batch: int, n_threads: int, n_threads_batch: int) -> None:
        self.model = model
        self.vocab = C.llama_model_get_vocab(model)
        self.ctx = ctx
        self.n_batch = n_batch
        self.n_threads = n_threads
        self.n_threads_batch = n_threads_batch
        self.n_gpu_layers = 0  # the layers placed on a GPU (load's argument)
        self.seed: int = C.LLAMA_DEFAULT_SEED  # the sampler chain's dist sampler's (make_sampler)
        self.last_n_tokens_size = PENALTY_LAST_N

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_ubatch: int = N_UBATCH,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        n_gpu_layers: int = 0,
        flash_attn: bool = False,
        repack: bool | None = None,
        n_seq_max: int = 1,
    ) -> Target:
        """The model at `path` with a context of n_ctx cells (0: its training context). ValueError
        where the file is missing or llama.cpp cannot load it or make the context."""
        init_backend()
        model = _load_model(path, model_params(n_gpu_layers, repack=repack))
        try:
            n_ctx = n_ctx or C.llama_model_n_ctx_train(model)
            n_batch = min(n_ctx, n_batch)
            threads = n_threads or max((os.cpu_count() or 1) // 2, 1)
            threads_batch = n_threads_batch or os.cpu_count() or 1
            params = context_params(
                n_ctx, n_batch, threads, threads_batch, n_ubatch=n_ubatch, flash_attn=flash_attn, n_seq_max=n_seq_max
            )
            ctx = C.llama_init_from_model(model, params)
            if not ctx:
                raise ValueError("Failed to create llama_context")
        except BaseException:
            C.llama_model_free(model)
            raise
        target = cls(model, ctx, n_batch, threads, threads_batch)
        target.n_gpu_layers = n_gpu_layers
        return target

    @classmethod
    def vocab_only(cls, path: str | Path) -> Target:
        """The model's vocabulary alone (no weights, no context): tokenizing and chat formatting."""
        init_backend()
        return cls(_load_model(path, model_params(vocab_only=True)), None, 0, 0, 0)

    # -- sizes ---------------------------------------------------------------------------------------

    def n_ctx(self) -> int:
        """The context's cells (all its sequences')."""
        return int(C.llama_n_ctx(self.ctx))

    def n_vocab(self) -> int:
        return int(C.llama_vocab_n_tokens(self.vocab))

    def n_ctx_train(self) -> int:
        return int(C.llama_model_n_ctx_train(self.model))

    def n_embd(self) -> int:
        return int(C.llama_model_n_embd(self.model))

    def n_layer(self) -> int:
        return int(C.llama_model_n_layer(self.model))

    def meta(self, key: str) -> str:
        """A GGUF metadata value as text ("" where the file has none)."""
        buf = ctypes.create_string_buffer(128)
        n = C.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            n = C.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n > 0 else ""

    # -- the vocabulary ------------------------------------------------------------------------------

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        """llama_tokenize: special, control tokens' texts become those tokens."""
        size = len(text) + 2
        for _ in range(2):
            tokens = (C.llama_token * size)()
            n = C.llama_tokenize(self.vocab, text, len(text), tokens, size, add_bos, special)
            if n >= 0:
                return list(tokens[:n])
            size = -n
        raise RuntimeError(f'Failed to tokenize: text="{text!r}" n_tokens={n}')

    def piece(self, token: int, special: bool = False) -> bytes:
        """A token's bytes (special: control tokens' texts too, else nothing for them)."""
        buf = ctypes.create_string_buffer(64)
        n = C.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = C.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[: max(n, 0)]

    def detokenize(self, tokens: list[int], special: bool = False) -> bytes:
        """The tokens' bytes, without the space a leading BOS would otherwise add (as Llama's)."""
        out = b"".join(self.piece(t, special) for t in tokens)
        if tokens and tokens[0] == self.token_bos() and out[:1] == b" ":
            return out[1:]
        return out

    def token_bos(self) -> int:
        return int(C.llama_vocab_bos(self.vocab))

    def token_eos(self) -> int:
        return int(C.llama_vocab_eos(self.vocab))

    def token_text(self, token: int) -> str:
        return bytes(C.llama_vocab_get_text(self.vocab, token)).decode("utf-8")

    def add_bos_token(self) -> bool:
        return bool(C.llama_vocab_get_add_bos(self.vocab))

    def is_eog(self, token: int) -> bool:
        """Whether the token ends a turn (end of text, end of turn, ...)."""
        return bool(C.llama_vocab_is_eog(self.vocab, token))

    # -- the context ---------------------------------------------------------------------------------

    def memory(self) -> Any:
        """The context's llama_memory (its KV cache), for llama_memory_* calls."""
        return C.llama_get_memory(self.ctx)

    def clear(self) -> None:
        """Every sequence's KV cache emptied."""
        C.llama_memory_clear(self.memory(), True)

    def set_threads(self, n: int, n_batch: int | None = None) -> None:
        C.llama_set_n_threads(self.ctx, n, n if n_batch is None else n_batch)

    def set_seed(self, seed: int) -> None:
        """The seed of the next sampler chain's dist sampler (make_sampler)."""
        self.seed = seed

    def close(self) -> None:
        """Free the context, then the model (idempotent)."""
        if getattr(self, "ctx", None):
            C.llama_free(self.ctx)
        self.ctx = None
        if getattr(self, "model", None):
            C.llama_model_free(self.model)
        self.model = None

    def __del__(self) -> None:
        self.close()


def _load_model(path: str | Path, params: Any) -> Any:
    if not os.path.exists(path):
        raise ValueError(f"Model path does not exist: {path}")
    with _silenced():
        model = C.llama_model_load_from_file(str(path).encode("utf-8"), params)
    if not model:
        raise ValueError(f"Failed to load model from file: {path}")
    return model
