"""The recommended-models catalog shipped in resources/catalog.json."""

from __future__ import annotations

import json
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
