"""Tiny randomly-initialised GGUF models of llama-family architectures, written by the tests themselves.

The real engine runs them like any downloaded model: the tokenizer (vocabulary, merges, special ids,
chat template, pre-tokenizer) is copied from a real GGUF, so prompts tokenize and chat-format as
they would for a real model; only the weights are random. Tensor names, shapes and hparams keys are
the ones llama.cpp's loaders ask for (src/models/{llama,qwen2,qwen3}.cpp, src/llama-arch.cpp).
EAGLE-3 heads for them come from the project's own trainer classes and exporter (needs torch).
"""

from __future__ import annotations

import struct
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
    chat_template: str | None = None,
) -> Path:
    """Write a random `arch` model with `tokenizer_from`'s tokenizer to `path` and return `path`.

    The vocabulary-sized matrices are F16 (an F32 49152 x 64 embedding alone would be 12.6 MB, a
    second untied one doubles it); everything else is F32. qwen2 adds q/k/v biases, qwen3 per-head
    RMS norms on q and k; tied=False adds a separate output.weight (lm_head). chat_template replaces
    the tokenizer's (e.g. a template with tools)."""
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
        if key == "tokenizer.chat_template" and chat_template is not None:
            value = chat_template.encode()
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


# struct formats of GGUF's fixed-size value types (gguf.GGUFValueType)
_GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _gguf_scalars(path: Path, keys: list[str]) -> dict[str, Any]:
    """The values of scalar or string metadata `keys` of a GGUF, in the order asked for. A header
    scan that stops once all are found: GGUFReader parses the whole 49k-entry tokenizer first
    (about 2 s a file), and the trainer code this module calls already reads the target twice."""
    want, found = set(keys), {}
    with Path(path).open("rb") as fh:

        def read(fmt: str) -> Any:
            return struct.unpack(fmt, fh.read(struct.calcsize(fmt)))[0]

        def skip(vtype: int) -> None:
            if vtype == gguf.GGUFValueType.STRING:
                fh.seek(read("<Q"), 1)
            elif vtype == gguf.GGUFValueType.ARRAY:
                sub, count = read("<I"), read("<Q")
                if sub in _GGUF_SCALAR:
                    fh.seek(count * struct.calcsize(_GGUF_SCALAR[sub]), 1)
                else:
                    for _ in range(count):
                        skip(sub)
            else:
                fh.seek(struct.calcsize(_GGUF_SCALAR[vtype]), 1)

        if fh.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        _version, _n_tensors, n_kv = read("<I"), read("<Q"), read("<Q")
        for _ in range(n_kv):
            key = fh.read(read("<Q")).decode()
            vtype = read("<I")
            if key not in want:
                skip(vtype)
            elif vtype == gguf.GGUFValueType.STRING:
                found[key] = fh.read(read("<Q")).decode()
            else:
                found[key] = read(_GGUF_SCALAR[vtype])
            if len(found) == len(want):
                return {k: found[k] for k in keys}
    raise KeyError(f"{path} lacks {', '.join(sorted(want - found.keys()))}")


def write_tiny_eagle_head(path: Path, target: Path, draft_vocab: int = 512, seed: int = 0, *, warm_start: bool = False) -> Path:
    """Write a random EAGLE-3 head for the tiny model `target` to `path` (F16 matrices) and return `path`.

    Built with the trainer's own classes and exporter, so it is what `specee train eagle` would
    write for this target, minus the training. The draft vocabulary is a seeded random sorted
    subset of the target's (all of it when draft_vocab >= n_vocab); every weight is torch's default
    init. warm_start=True starts it like the trainer (lm_head = the target's rows, fc = the highest
    feature layer) but with the block's output projections zeroed rather than scaled by 0.1: the
    tiny targets' residual stream is ~0.02 per element, which even 0.1 x a random block would
    swamp. The head is then exactly the target's early exit at that layer, so on a tied target
    (which echoes its last token) its drafts are accepted."""
    import torch  # the training extra: only this function needs it

    from engine.hashing import sha256_file
    from engine.train.eagle_export import export_head
    from engine.train.eagle_head import EagleHead, HeadConfig
    from engine.train.eagle_train import target_tensors

    arch = _gguf_scalars(target, ["general.architecture"])["general.architecture"]
    keys = [f"{arch}.block_count", f"{arch}.embedding_length"]
    n_layer, n_embd = (int(v) for v in _gguf_scalars(target, keys).values())
    weights = target_tensors(str(target))
    embed = torch.from_numpy(weights["token_embd.weight"].astype(np.float32))
    n_vocab = embed.shape[0]
    draft_vocab = min(draft_vocab, n_vocab)
    cfg = HeadConfig(
        n_embd=n_embd,
        n_head=4,
        n_head_kv=2,
        n_ff=2 * n_embd,
        target_hidden=n_embd,
        draft_vocab=draft_vocab,
        rms_eps=RMS_EPS,
        rope_base=ROPE_FREQ_BASE,
        layers=(0, n_layer // 2, n_layer - 1),  # low, middle and high, like the default head's (2, 15, 27) of 30
    )
    rng = np.random.default_rng(seed)
    d2t = np.sort(rng.choice(n_vocab, size=draft_vocab, replace=False))
    with torch.random.fork_rng(devices=[]):  # torch's default init draws from the global RNG: leave it as it was
        torch.manual_seed(seed)
        head = EagleHead(cfg, embed)
    head.d2t.copy_(torch.from_numpy(d2t))
    if warm_start:
        with torch.no_grad():
            out_w = weights.get("output.weight", weights["token_embd.weight"]).astype(np.float32)
            head.lm_head.weight.copy_(torch.from_numpy(out_w[d2t]))
            head.output_norm.weight.copy_(torch.from_numpy(weights["output_norm.weight"].astype(np.float32)))
            head.fc.weight.zero_()
            head.fc.weight[:, 2 * n_embd :].copy_(torch.eye(n_embd))
            head.wo.weight.zero_()
            head.down.weight.zero_()
    return export_head(head, str(target), sha256_file(target), path, matrix_type=gguf.GGMLQuantizationType.F16)
