"""Prompt files for benchmarks and training: JSONL, each line with `prompt` or `turns` (first used)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engine.paths import RESOURCES_DIR

DEV_PROMPTS = RESOURCES_DIR / "prompts" / "dev.jsonl"


@dataclass
class BenchPrompt:
    id: str
    category: str
    text: str


class PromptFileError(ValueError):
    pass


def load_prompts(path: str | Path = DEV_PROMPTS) -> list[BenchPrompt]:
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PromptFileError(f"cannot read prompt file {path}: {exc.strerror or exc}") from exc
    prompts = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{path}:{n}: not JSON ({exc.msg})") from None
        text = row.get("prompt") if isinstance(row, dict) else None
        if text is None and isinstance(row, dict) and isinstance(row.get("turns"), list) and row["turns"]:
            text = row["turns"][0]
        if not isinstance(text, str) or not text.strip():
            raise PromptFileError(f"{path}:{n}: needs a non-empty `prompt` or `turns`")
        prompts.append(BenchPrompt(str(row.get("id", n)), str(row.get("category", "")), text))
    if not prompts:
        raise PromptFileError(f"{path} holds no prompts")
    return prompts
