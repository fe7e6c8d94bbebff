"""A downloaded EAGLE-3 head checkpoint (Hugging Face layout): which of the layouts llama.cpp's converter
accepts it is, and whether it fits a target model, checked before the converter runs so that a wrong
repository gets a sentence, not a converter traceback.

Layouts (conversion/llama.py in the pinned llama.cpp): the EAGLE reference code and SpecForge
(`LlamaForCausalLMEagle3`, layer tensors `midlayer.*`; the reference heads ship pytorch_model.bin),
vLLM / AngelSlim (`Eagle3LlamaForCausalLM`), speculators (`Eagle3Speculator`: the layer's hparams
nested in `transformer_layer_config`, tensors `layers.0.*`) and `Eagle3DraftModel`. All are one
Llama decoder layer fed [embedding, fc(3 target layers)], with `fc`, `norm`, `lm_head` over a draft
vocabulary and `d2t` (draft id -> target id offsets).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARCHITECTURES = {
    "LlamaForCausalLMEagle3": "EAGLE reference / SpecForge",
    "Eagle3LlamaForCausalLM": "vLLM / AngelSlim",
    "Eagle3Speculator": "speculators",
    "Eagle3DraftModel": "Eagle3DraftModel",
}
WEIGHT_PATTERNS = ("model*.safetensors", "pytorch_model*.bin")
# Tensors llama.cpp's eagle3 graph has no place for: the converter would stop on them, or the loader would
# refuse the file ("wrong number of tensors").
UNSUPPORTED_TENSORS = ("fc.bias",)


class CheckpointError(Exception):
    """kind: not_a_head | unknown_architecture | wrong_model | damaged"""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class HeadCheckpoint:
    folder: Path
    architecture: str
    hparams: dict[str, Any]  # speculators' transformer_layer_config merged in, as the converter does
    weights: list[Path]
    tensor_names: list[str] = field(default_factory=list)  # from safetensors headers (empty for .bin)

    @property
    def layout(self) -> str:
        prefix = "layers.0" if any(n.startswith("layers.0.") for n in self.tensor_names) else "midlayer"
        kind = "safetensors" if self.weights[0].suffix == ".safetensors" else "pytorch .bin"
        if not self.tensor_names:
            prefix = "layers.0" if self.architecture == "Eagle3Speculator" else "midlayer"
        return f"{self.architecture} ({ARCHITECTURES[self.architecture]}; {prefix}.*, {kind})"

    @property
    def hidden_size(self) -> int:
        return int(self.hparams["hidden_size"])

    @property
    def target_hidden_size(self) -> int:
        return int(self.hparams.get("target_hidden_size") or self.hparams["hidden_size"])

    @property
    def draft_vocab_size(self) -> int:
        return int(self.hparams["draft_vocab_size"])

    def target_layers(self, n_layer: int) -> list[int]:
        """The target layers whose inputs feed the head: stated by the checkpoint, else the converter's
        default (low, middle, high)."""
        ids = self.hparams.get("eagle_aux_hidden_state_layer_ids")
        return [int(i) for i in ids] if ids else [2, n_layer // 2, n_layer - 3]


def read_checkpoint(folder: Path, source: str) -> HeadCheckpoint:
    """Identify the checkpoint in `folder` (named `source` in messages). Raises CheckpointError."""
    config_path = folder / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise CheckpointError("not_a_head", f"{source} has no config.json: it is not a Hugging Face model checkpoint.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError("damaged", f"{source}'s config.json is not valid JSON ({exc}).") from None
    archs = config.get("architectures") or []
    arch = archs[0] if archs else None
    if arch not in ARCHITECTURES:
        raise CheckpointError(
            "unknown_architecture",
            f"{source}'s config.json names architecture {arch!r}; llama.cpp's converter imports EAGLE-3 heads of "
            f"{', '.join(ARCHITECTURES)} only.",
        )
    hparams = {**config, **(config.get("transformer_layer_config") or {})}
    if "draft_vocab_size" not in hparams or hparams.get("num_hidden_layers") != 1 or "hidden_size" not in hparams:
        raise CheckpointError(
            "not_a_head",
            f"{source} is not an EAGLE-3 head: its config needs draft_vocab_size, hidden_size and num_hidden_layers = 1.",
        )
    weights = sorted(p for pattern in WEIGHT_PATTERNS for p in folder.glob(pattern))
    if not weights:
        raise CheckpointError("not_a_head", f"{source} holds no weights (model*.safetensors or pytorch_model*.bin).")
    names: list[str] = []
    for path in weights:
        if path.suffix == ".safetensors":
            names += safetensors_names(path)
    for name in UNSUPPORTED_TENSORS:
        if name in names:
            raise CheckpointError("not_a_head", f"{source} has a {name} tensor, which llama.cpp's EAGLE-3 graph does not use.")
    if names and "fc.weight" not in names:
        raise CheckpointError("not_a_head", f"{source} has no fc.weight: it is not an EAGLE-3 head.")
    return HeadCheckpoint(folder, arch, hparams, weights, names)


def check_fits(ckpt: HeadCheckpoint, source: str, model_name: str, n_embd: int, n_vocab: int, n_layer: int) -> None:
    """Refuse a head made for another model: its hidden size, vocabulary or feature layers differ."""
    if ckpt.target_hidden_size != n_embd:
        raise CheckpointError(
            "wrong_model",
            f"{source} reads hidden states of size {ckpt.target_hidden_size}, but {model_name} has hidden size {n_embd}: "
            "it is a head for another model.",
        )
    vocab = int(ckpt.hparams.get("vocab_size") or n_vocab)
    if vocab != n_vocab:
        raise CheckpointError(
            "wrong_model",
            f"{source} was made for a {vocab}-token vocabulary, but {model_name} has {n_vocab} tokens: "
            "it is a head for another model.",
        )
    layers = ckpt.target_layers(n_layer)
    if len(layers) != 3 or not all(0 <= i < n_layer for i in layers):
        raise CheckpointError(
            "wrong_model", f"{source} reads target layers {layers}, but {model_name} has {n_layer} layers (0..{n_layer - 1})."
        )


def safetensors_names(path: Path) -> list[str]:
    """Tensor names of a safetensors file, after checking that its header is whole and every tensor's
    data lies inside the file (a truncated download otherwise fails deep inside the converter)."""
    size = path.stat().st_size
    try:
        with path.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > size - 8:
                raise ValueError
            header = json.loads(fh.read(n))
    except (struct.error, ValueError, UnicodeDecodeError):
        raise CheckpointError("damaged", f"{path.name} is not a complete safetensors file: download it again.") from None
    end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        raise CheckpointError(
            "damaged", f"{path.name} is truncated: {size} bytes present of {8 + n + end} needed. Download it again."
        )
    return [k for k in header if k != "__metadata__"]
