"""Write a trained EAGLE-3 head as a GGUF that llama.cpp's `eagle3` architecture loads.

Conventions (llama.cpp src/models/eagle3.cpp): torch Linear weights are written as-is; RoPE was
trained on adjacent pairs, so q/k need no permutation; `d2t` holds absolute target ids as I64; no
token embedding is written (the head borrows the target's through ctx_other); every tensor in the
file must be one the loader consumes. The target's tokenizer is copied, and `specee.target_sha256`
ties the head to its target so a head for another model is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, quants

from engine.models.gguf_fields import finish_atomically, read_header, rewrite
from engine.train.eagle_head import EagleHead, HeadConfig

ARCH = "eagle3"
TARGET_SHA_KEY = "specee.target_sha256"
TRAINING_KEY = "specee.training"


# Matrix storage: the head runs on every eagle and SpecEE step, so what it reads is paid per token.
# Q4_0 against Q8_0 (same head, re-quantized; 24 dev prompts, 3 a category, 64 tokens, one bench each): SmolLM2-135M specee
# draft 1.68 -> 1.35 ms a step and eagle draft + feed 3.4 -> 2.5 ms, with candidate hit 74.4 vs 74.0%
# and acceptance 1.48 vs 1.47; Qwen2.5-Coder-1.5B specee draft 4.88 -> 3.73 ms, candidate hit 66.2%
# both, exits 28.0% both.
MATRIX_TYPE = GGMLQuantizationType.Q4_0


def _matrix(array: np.ndarray, qtype: GGMLQuantizationType) -> tuple[np.ndarray, GGMLQuantizationType | None]:
    if qtype == GGMLQuantizationType.F16:
        return array.astype(np.float16), None
    return quants.quantize(array.astype(np.float32), qtype), qtype


def requantize_head(src: Path, out: Path, matrix_type: GGMLQuantizationType = MATRIX_TYPE) -> Path:
    """An exported head with its quantized matrices stored in matrix_type: a shipped head made
    smaller without its training checkpoint. Everything else (metadata, norms, d2t) is copied as it is."""
    header = read_header(src)
    arch = header.fields["general.architecture"].value.decode()
    return rewrite(src, out, arch, list(header.fields.values()), requantize=matrix_type)


def _tensors(head: EagleHead) -> list[tuple[str, torch.Tensor, bool]]:
    """(GGUF name, weight, is a matrix): matrices are stored in the export's matrix type, norms in F32."""
    return [
        ("fc.weight", head.fc.weight, True),
        ("blk.0.attn_norm.weight", head.attn_norm.weight, False),
        ("blk.0.attn_norm_2.weight", head.attn_norm_2.weight, False),
        ("blk.0.attn_q.weight", head.wq.weight, True),
        ("blk.0.attn_k.weight", head.wk.weight, True),
        ("blk.0.attn_v.weight", head.wv.weight, True),
        ("blk.0.attn_output.weight", head.wo.weight, True),
        ("blk.0.ffn_norm.weight", head.ffn_norm.weight, False),
        ("blk.0.ffn_gate.weight", head.gate.weight, True),
        ("blk.0.ffn_up.weight", head.up.weight, True),
        ("blk.0.ffn_down.weight", head.down.weight, True),
        ("output_norm.weight", head.output_norm.weight, False),
        ("output.weight", head.lm_head.weight, True),
    ]


def import_head(path: Path, target_embed: torch.Tensor) -> EagleHead:
    """An exported head back as the trainer's module, with the weights it runs with in the engine
    (quantized matrices dequantized): what lets two heads be evaluated on the same teacher data
    when one was trained in another run, or only its GGUF is left."""
    reader = GGUFReader(str(path))

    def get(key: str) -> Any:
        return reader.fields[f"{ARCH}.{key}"].contents()

    tensors = {t.name: t for t in reader.tensors}
    n_embd, n_head = int(get("embedding_length")), int(get("attention.head_count"))
    cfg = HeadConfig(
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(get("attention.head_count_kv")),
        n_ff=int(get("feed_forward_length")),
        target_hidden=int(get("target_hidden_size")),
        draft_vocab=int(tensors["d2t"].n_elements),
        rms_eps=float(get("attention.layer_norm_rms_epsilon")),
        rope_base=float(get("rope.freq_base")),
        layers=tuple(int(x) for x in get("target_layers")),  # type: ignore[arg-type]
    )
    head = EagleHead(cfg, target_embed)
    with torch.no_grad():
        for name, weight, _ in _tensors(head):
            t = tensors[name]
            array = quants.dequantize(t.data, t.tensor_type).reshape(weight.shape)
            weight.copy_(torch.from_numpy(np.array(array, dtype=np.float32)))  # a copy: the file is mapped read-only
        head.d2t.copy_(torch.from_numpy(np.array(tensors["d2t"].data, dtype=np.int64)))
    return head


def export_head(
    head: EagleHead,
    target_path: str,
    target_sha256: str,
    out: Path,
    training_json: str = "",
    matrix_type: GGMLQuantizationType = MATRIX_TYPE,
) -> Path:
    cfg = head.cfg
    target = GGUFReader(target_path)
    tmp = out.with_name(f".{out.name}.part")
    w = GGUFWriter(str(tmp), arch=ARCH)
    target_arch = str(target.fields["general.architecture"].contents())
    w.add_uint32(f"{ARCH}.context_length", int(target.fields[f"{target_arch}.context_length"].contents()))
    w.add_uint32(f"{ARCH}.embedding_length", cfg.n_embd)
    w.add_uint32(f"{ARCH}.block_count", 1)
    w.add_uint32(f"{ARCH}.feed_forward_length", cfg.n_ff)
    w.add_uint32(f"{ARCH}.attention.head_count", cfg.n_head)
    w.add_uint32(f"{ARCH}.attention.head_count_kv", cfg.n_head_kv)
    w.add_uint32(f"{ARCH}.rope.dimension_count", cfg.n_embd // cfg.n_head)
    w.add_float32(f"{ARCH}.rope.freq_base", cfg.rope_base)
    w.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", cfg.rms_eps)
    w.add_array(f"{ARCH}.target_layers", [int(x) for x in cfg.layers])
    w.add_uint32(f"{ARCH}.target_hidden_size", cfg.target_hidden)
    w.add_bool(f"{ARCH}.norm_before_residual", False)
    w.add_bool(f"{ARCH}.norm_before_fc", False)
    w.add_string(TARGET_SHA_KEY, target_sha256)
    if training_json:
        w.add_string(TRAINING_KEY, training_json)
    for key, field in target.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), vtype, sub_type=field.types[1])
        else:
            w.add_key_value(key, field.contents(), vtype)

    for name, weight, is_matrix in _tensors(head):
        array = weight.detach().cpu().float().numpy()
        if is_matrix:
            data, raw = _matrix(array, matrix_type)
            w.add_tensor(name, data, raw_dtype=raw)
        else:
            w.add_tensor(name, array)
    w.add_tensor("d2t", head.d2t.cpu().numpy().astype(np.int64), raw_dtype=GGMLQuantizationType.I64)
    return finish_atomically(w, tmp, out)
