"""A GGUF model's Hugging Face tokenizer files, rebuilt from its metadata.

llama.cpp's converter gives an EAGLE-3 head the vocabulary of its target, read from the target's HF
folder (`--target-model-dir`): tokenizer.json and tokenizer_config.json through transformers, and
config.json for the vocabulary size, layer count and hidden size. A GGUF of a byte-level BPE model
holds the whole tokenizer (tokens, their types, merges, special ids) except the pre-tokenizer, which
it only names (`tokenizer.ggml.pre`): the names below map to the pre-tokenizer that the published
tokenizer.json of those models states. The converter recognises the pre-tokenizer by hashing the
tokenization of a test text, so a rebuilt tokenizer that does not tokenize exactly as the original
is refused there, not silently accepted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.models.gguf_fields import GGUFField

CONTROL, USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values of added tokens

# Split regexes as the models' own tokenizer.json files state them (Meta-Llama-3, Qwen1.5/2).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def _byte_level(use_regex: bool) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def _split(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


@dataclass(frozen=True)
class PreTokenizer:
    normalizer: dict | None
    pre_tokenizer: dict
    ignore_merges: bool
    add_bos: bool  # llama.cpp's default when the GGUF does not say


PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "smollm": PreTokenizer(
        None,
        {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, _byte_level(True)]},
        False,
        False,
    ),
    "llama-bpe": PreTokenizer(
        None, {"type": "Sequence", "pretokenizers": [_split(_LLAMA3_SPLIT), _byte_level(False)]}, True, True
    ),
    "qwen2": PreTokenizer(
        {"type": "NFC"}, {"type": "Sequence", "pretokenizers": [_split(_QWEN2_SPLIT), _byte_level(False)]}, False, False
    ),
}


class TokenizerExportError(Exception):
    pass


def _text(field: GGUFField | None) -> str:
    return field.value.decode("utf-8") if field is not None else ""


def write_hf_tokenizer(fields: dict[str, GGUFField], hparams: dict[str, Any], out: Path) -> Path:
    """Write tokenizer.json, tokenizer_config.json and config.json for a byte-level BPE GGUF tokenizer into
    `out`. `fields`: the tokenizer.* fields of the GGUF (gguf_fields.read_header); `hparams` go into
    config.json as they are."""
    model = _text(fields.get("tokenizer.ggml.model"))
    pre = _text(fields.get("tokenizer.ggml.pre"))
    if model != "gpt2":
        raise TokenizerExportError(
            f"the model's tokenizer is {model or 'missing'!r}; importing a head needs a byte-level BPE tokenizer ('gpt2' in GGUF)"
        )
    if pre not in PRE_TOKENIZERS:
        raise TokenizerExportError(
            f"the model's pre-tokenizer {pre!r} is not one we can rebuild for the converter (known: {', '.join(PRE_TOKENIZERS)})"
        )
    spec = PRE_TOKENIZERS[pre]
    tokens = [t.decode("utf-8") for t in fields["tokenizer.ggml.tokens"].value]
    types = fields["tokenizer.ggml.token_type"].value
    merges = [m.decode("utf-8").split(" ", 1) for m in fields["tokenizer.ggml.merges"].value]
    ids = {
        k: int(fields[f"tokenizer.ggml.{k}_token_id"].value) for k in ("bos", "eos") if f"tokenizer.ggml.{k}_token_id" in fields
    }
    add_bos_field = fields.get("tokenizer.ggml.add_bos_token")
    add_bos = bool(add_bos_field.value) if add_bos_field is not None else spec.add_bos
    added = [
        {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": types[i] == CONTROL}
        for i, tok in enumerate(tokens) if types[i] in (CONTROL, USER_DEFINED)
    ]  # fmt: skip
    post: dict | None = None
    if add_bos and "bos" in ids:
        bos = tokens[ids["bos"]]
        special = {"SpecialToken": {"id": bos, "type_id": 0}}
        post = {
            "type": "TemplateProcessing",
            "single": [special, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [special, {"Sequence": {"id": "A", "type_id": 0}}, special, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [ids["bos"]], "tokens": [bos]}},
        }
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": spec.normalizer,
        "pre_tokenizer": spec.pre_tokenizer,
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": False, "byte_fallback": False, "ignore_merges": spec.ignore_merges,
            "vocab": {tok: i for i, tok in enumerate(tokens)}, "merges": merges,
        },
    }  # fmt: skip
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        **{f"{k}_token": tokens[i] for k, i in ids.items()},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1, ensure_ascii=False))
    (out / "config.json").write_text(
        json.dumps({**hparams, "vocab_size": len(tokens), **{f"{k}_token_id": i for k, i in ids.items()}}, indent=1)
    )
    return out
