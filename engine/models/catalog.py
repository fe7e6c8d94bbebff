"""The recommended-models catalog shipped in resources/catalog.json, and the published EAGLE-3 heads it
knows for models (`specee models import-head` takes one when no repository is given)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from engine.paths import RESOURCES_DIR

CATALOG = RESOURCES_DIR / "catalog.json"


@dataclass
class CatalogEntry:
    name: str
    repo_id: str  # "embedded" for the default model that ships with the app
    file: str
    approx_size: int
    sha256: str | None
    licence: str
    ram_gb: float
    acceleration: list[str] = field(default_factory=list)
    note: str = ""
    gated: bool = False


def load_catalog() -> list[CatalogEntry]:
    raw = json.loads(CATALOG.read_text())
    fields = set(CatalogEntry.__dataclass_fields__)
    return [CatalogEntry(**{k: v for k, v in m.items() if k in fields}) for m in raw["models"]]


@dataclass
class HeadPair:
    model: str  # the Hugging Face checkpoint the head was trained on
    match: str  # occurs in a GGUF's general.name or file name, both reduced to lowercase letters and digits
    head: str  # the head's Hugging Face repository


def _letters_digits(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def load_head_pairs() -> list[HeadPair]:
    raw = json.loads(CATALOG.read_text())
    fields = set(HeadPair.__dataclass_fields__)
    return [HeadPair(**{k: v for k, v in h.items() if k in fields}) for h in raw.get("eagle_heads", [])]


def heads_for(model_name: str, file_name: str) -> list[HeadPair]:
    """Known heads for a model named `model_name` (GGUF general.name) stored as `file_name`."""
    names = (_letters_digits(model_name), _letters_digits(file_name))
    return [h for h in load_head_pairs() if any(h.match in n for n in names)]
