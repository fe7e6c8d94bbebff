"""Draft models for the `draft` mode: a smaller registered model whose tokenizer is byte-identical
to the target's (vocabulary, merges, tokenizer model), found automatically, so its token ids mean
the same to the target. The largest that is at most half the target's size drafts best."""

from __future__ import annotations

from pathlib import Path

from engine.models.gguf_file import ModelFileError, inspect_gguf
from engine.models.registry import ModelRegistry

MAX_DRAFT_SHARE = 0.5  # a bigger draft costs about what it saves


def same_tokenizer(a: Path, b: Path) -> bool:
    ta, tb = inspect_gguf(a).tokenizer_sha256, inspect_gguf(b).tokenizer_sha256
    return bool(ta) and ta == tb


def find_draft_model(target: Path, registry: ModelRegistry | None = None) -> Path | None:
    target = Path(target)
    info = inspect_gguf(target)
    if not info.tokenizer_sha256:
        return None
    best: tuple[int, Path] | None = None
    for record in (registry or ModelRegistry()).all():
        path = Path(record.path)
        if not record.exists or path.resolve() == target.resolve() or record.size > info.file_size * MAX_DRAFT_SHARE:
            continue
        try:
            if inspect_gguf(path).tokenizer_sha256 != info.tokenizer_sha256:
                continue
        except ModelFileError:
            continue
        if best is None or record.size > best[0]:
            best = (record.size, path)
    return best[1] if best else None
