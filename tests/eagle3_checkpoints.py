"""Small synthetic EAGLE-3 head checkpoints in the Hugging Face layouts llama.cpp's converter accepts
(conversion/llama.py), written by the tests for tiny targets (tests/tiny_models.py).

Each is one Llama decoder layer whose attention reads [embedding, fc(3 target layers)] (2 x hidden),
with fc, norm, lm_head over a draft vocabulary and d2t/t2d, named and configured as the published
heads of that layout are: the EAGLE reference code's pytorch_model.bin (`midlayer.*`), SpecForge's and
vLLM/AngelSlim's model.safetensors (`midlayer.*`), speculators' (`layers.0.*`, the layer's config
nested in transformer_layer_config, its own embed_tokens, norm_before_residual). Weights are small
random numbers, so drafts are mostly rejected: what the tests check is that the head converts,
loads and leaves greedy output exactly as vanilla's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LAYOUTS = ("eagle-reference", "specforge", "angelslim", "speculators")


@dataclass
class Shape:
    n_embd: int = 64  # the target's hidden size (the head's too)
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_vocab: int = 49152  # the target's vocabulary
    draft_vocab: int = 256


def _tensors(shape: Shape, rng: np.random.Generator, layer: str, with_embed: bool, warm: Path | None) -> dict[str, np.ndarray]:
    e, hd = shape.n_embd, shape.n_embd // shape.n_head

    def rand(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float16)

    d2t_target = np.sort(rng.choice(shape.n_vocab, size=shape.draft_vocab, replace=False))
    t = {
        f"{layer}.input_layernorm.weight": np.ones(e, np.float16),
        f"{layer}.hidden_norm.weight": np.ones(e, np.float16),
        f"{layer}.post_attention_layernorm.weight": np.ones(e, np.float16),
        f"{layer}.self_attn.q_proj.weight": rand(shape.n_head * hd, 2 * e),
        f"{layer}.self_attn.k_proj.weight": rand(shape.n_head_kv * hd, 2 * e),
        f"{layer}.self_attn.v_proj.weight": rand(shape.n_head_kv * hd, 2 * e),
        f"{layer}.self_attn.o_proj.weight": rand(e, shape.n_head * hd),
        f"{layer}.mlp.gate_proj.weight": rand(shape.n_ff, e),
        f"{layer}.mlp.up_proj.weight": rand(shape.n_ff, e),
        f"{layer}.mlp.down_proj.weight": rand(e, shape.n_ff),
        "fc.weight": rand(e, 3 * e),
        "norm.weight": np.ones(e, np.float16),
        "lm_head.weight": rand(shape.draft_vocab, e),
        # EAGLE-3 stores d2t as offsets: target id = draft id + d2t[draft id]
        "d2t": (d2t_target - np.arange(shape.draft_vocab)).astype(np.int64),
        "t2d": np.isin(np.arange(shape.n_vocab), d2t_target),
    }
    if with_embed:
        t["embed_tokens.weight"] = rand(shape.n_vocab, e)
    if warm is not None:
        _warm_start(t, layer, shape, warm, d2t_target)
    return t


def _warm_start(t: dict[str, np.ndarray], layer: str, shape: Shape, target: Path, d2t_target: np.ndarray) -> None:
    """The head becomes the target's early exit at its third feature layer: fc passes that layer's
    input through, the block adds nothing (o_proj and down_proj zero), and norm and lm_head are the
    target's. On a tiny random target the embedding dominates the residual stream, so that exit
    mostly agrees with the full model and drafts get accepted."""
    from engine.models.gguf_fields import read_header

    header = read_header(target, keep=lambda key: False)
    info = {ti.name: ti for ti in header.tensors}

    def weight(name: str) -> np.ndarray:
        ti = info[name]
        dtype = {0: np.float32, 1: np.float16}[ti.ttype]
        count = int(np.prod(ti.dims))
        return np.fromfile(target, dtype=dtype, count=count, offset=header.data_offset + ti.offset).reshape(
            list(reversed(ti.dims))
        )

    e = shape.n_embd
    out = weight("output.weight" if "output.weight" in info else "token_embd.weight")
    t["lm_head.weight"] = out[d2t_target].astype(np.float16)
    t["norm.weight"] = weight("output_norm.weight").astype(np.float16)
    fc = np.zeros((e, 3 * e), np.float16)
    fc[:, 2 * e :] = np.eye(e, dtype=np.float16)
    t["fc.weight"] = fc
    t[f"{layer}.self_attn.o_proj.weight"][:] = 0
    t[f"{layer}.mlp.down_proj.weight"][:] = 0


def _llama_config(shape: Shape) -> dict:
    return {
        "hidden_act": "silu",
        "hidden_size": shape.n_embd,
        "intermediate_size": shape.n_ff,
        "num_attention_heads": shape.n_head,
        "num_key_value_heads": shape.n_head_kv,
        "num_hidden_layers": 1,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": shape.n_vocab,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }


def write_checkpoint(
    folder: Path,
    layout: str,
    shape: Shape | None = None,
    seed: int = 0,
    warm_start: Path | None = None,
    **config_overrides: object,
) -> Path:
    """Write a checkpoint of `layout` (one of LAYOUTS) into `folder`; warm_start: the target GGUF whose
    early exit the head copies (_warm_start); config_overrides change config.json."""
    shape = shape or Shape()
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    llama = _llama_config(shape)
    if layout == "eagle-reference":  # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B
        config = {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            **llama,
            "draft_vocab_size": shape.draft_vocab,
        }
        _save_bin(folder / "pytorch_model.bin", _tensors(shape, rng, "midlayer", with_embed=False, warm=warm_start))
    elif layout == "specforge":  # SpecForge's export: the reference layout as safetensors
        config = {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            **llama,
            "draft_vocab_size": shape.draft_vocab,
        }
        _save_safetensors(folder / "model.safetensors", _tensors(shape, rng, "midlayer", with_embed=False, warm=warm_start))
    elif layout == "angelslim":  # vLLM's name; explicit feature layers
        config = {
            "architectures": ["Eagle3LlamaForCausalLM"], "model_type": "llama", **llama, "draft_vocab_size": shape.draft_vocab,
            "target_hidden_size": shape.n_embd, "eagle_aux_hidden_state_layer_ids": [0, 1, 2],
        }  # fmt: skip
        _save_safetensors(folder / "model.safetensors", _tensors(shape, rng, "midlayer", with_embed=False, warm=warm_start))
    elif layout == "speculators":  # speculators' Eagle3Speculator (Red Hat's *.speculator.eagle3 repos)
        config = {
            "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "draft_vocab_size": shape.draft_vocab,
            "norm_before_residual": True, "target_hidden_size": None,
            "transformer_layer_config": {"model_type": "llama", **llama},
            "speculators_config": {"algorithm": "eagle3", "verifier": {"architectures": ["LlamaForCausalLM"]}},
        }  # fmt: skip
        _save_safetensors(folder / "model.safetensors", _tensors(shape, rng, "layers.0", with_embed=True, warm=warm_start))
    else:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    config.update(config_overrides)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


_SAFETENSORS_DTYPES = {
    np.dtype(np.float16): "F16",
    np.dtype(np.float32): "F32",
    np.dtype(np.int64): "I64",
    np.dtype(np.bool_): "BOOL",
}


def _save_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors format by hand (8-byte header length, JSON header, data): no extra package."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"".join(blobs))


def _save_bin(path: Path, tensors: dict[str, np.ndarray]) -> None:
    import torch  # the training extra, as for the tiny EAGLE heads

    torch.save({name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in tensors.items()}, path)
