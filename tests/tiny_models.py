"""Tiny randomly-initialised GGUF models of llama-family architectures, written by the tests themselves.

The real engine runs them like any downloaded model: the tokenizer (vocabulary, merges, special ids,
chat template, pre-tokenizer) is copied from a real GGUF, so prompts tokenize and chat-format as
they would for a real model; only the weights are random. Tensor names, shapes and hparams keys are
the ones llama.cpp's loaders ask for (src/models/{llama,qwen2,qwen3}.cpp, src/llama-arch.cpp).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import gguf
import numpy as np

ARCHITECTURES = ("llama", "qwen2", "qwen3")
WEIGHT_STD = 0.02  # like a fresh init: activations stay O(1), logits stay small and finite
ROPE_FREQ_BASE = 10000.0
RMS_EPS = 1e-6
CONTEXT_LENGTH = 2048


@cache
def _tokenizer_fields(source: Path) -> tuple[tuple[str, Any, gguf.GGUFValueType, gguf.GGUFValueType | None], ...]:
    """Every tokenizer.* field of `source` as (key, value, type, array item type). Cached because
    GGUFReader materialises the 49k-entry arrays (seconds); writing them again is fast."""
    reader = gguf.GGUFReader(str(source))
    out = []
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if len(field.types) != 2:
                raise ValueError(f"{key}: nested arrays are not supported")
            if sub == gguf.GGUFValueType.STRING:
                value: Any = [bytes(field.parts[i]) for i in field.data]  # bytes: tokens need not be valid UTF-8
            else:
                value = [field.parts[i][0].item() for i in field.data]
            out.append((key, value, vtype, sub))
        elif vtype == gguf.GGUFValueType.STRING:
            out.append((key, bytes(field.parts[field.data[0]]), vtype, None))
        else:
            out.append((key, field.parts[field.data[0]][0].item(), vtype, None))
    if not any(key == "tokenizer.ggml.tokens" for key, *_ in out):
        raise ValueError(f"{source} has no tokenizer.ggml.tokens")
    return tuple(out)


def write_tiny_gguf(
    path: Path,
    arch: str,
    n_layer: int = 3,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    seed: int = 0,
    tied: bool = True,
    *,
    tokenizer_from: Path,
) -> Path:
    """Write a random `arch` model with `tokenizer_from`'s tokenizer to `path` and return `path`.

    The vocabulary-sized matrices are F16 (an F32 49152 x 64 embedding alone would be 12.6 MB, a
    second untied one doubles it); everything else is F32. qwen2 adds q/k/v biases, qwen3 per-head
    RMS norms on q and k; tied=False adds a separate output.weight (lm_head)."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must divide by n_head, and n_head by n_head_kv")
    tok_fields = _tokenizer_fields(Path(tokenizer_from))
    n_vocab = len(next(value for key, value, *_ in tok_fields if key == "tokenizer.ggml.tokens"))
    head_dim = n_embd // n_head
    n_embd_kv = head_dim * n_head_kv
    rng = np.random.default_rng(seed)

    def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * WEIGHT_STD).astype(dtype)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(CONTEXT_LENGTH)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_freq_base(ROPE_FREQ_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_dimension_count(head_dim)  # llama.cpp asserts n_rot == head_dim for all three
    if arch == "qwen3":
        # Real Qwen3 GGUFs state the head size (it need not be n_embd / n_head there).
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    for key, value, vtype, sub in tok_fields:
        w.add_key_value(key, value, vtype, sub)

    # numpy shapes are ggml's ne reversed: a {n_in, n_out} llama.cpp weight is (n_out, n_in) here.
    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd, dtype=np.float16))
    w.add_tensor("output_norm.weight", ones(n_embd))
    if not tied:
        w.add_tensor("output.weight", rand(n_vocab, n_embd, dtype=np.float16))
    for i in range(n_layer):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(n_embd))
        w.add_tensor(f"{b}.attn_q.weight", rand(n_embd, n_embd))
        w.add_tensor(f"{b}.attn_k.weight", rand(n_embd_kv, n_embd))
        w.add_tensor(f"{b}.attn_v.weight", rand(n_embd_kv, n_embd))
        if arch == "qwen2":
            w.add_tensor(f"{b}.attn_q.bias", rand(n_embd))
            w.add_tensor(f"{b}.attn_k.bias", rand(n_embd_kv))
            w.add_tensor(f"{b}.attn_v.bias", rand(n_embd_kv))
        if arch == "qwen3":
            w.add_tensor(f"{b}.attn_q_norm.weight", ones(head_dim))
            w.add_tensor(f"{b}.attn_k_norm.weight", ones(head_dim))
        w.add_tensor(f"{b}.attn_output.weight", rand(n_embd, n_embd))
        w.add_tensor(f"{b}.ffn_norm.weight", ones(n_embd))
        w.add_tensor(f"{b}.ffn_gate.weight", rand(n_ff, n_embd))
        w.add_tensor(f"{b}.ffn_up.weight", rand(n_ff, n_embd))
        w.add_tensor(f"{b}.ffn_down.weight", rand(n_embd, n_ff))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
