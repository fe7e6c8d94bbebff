"""native/REBASE.md is what the next llama.cpp upgrade reads: every patch in native/patches has its
section there (what, why, touches, when it breaks), and no section is left of a patch that is gone
(patch 0019 had none: issue 47)."""

from __future__ import annotations

import re
from pathlib import Path

NATIVE = Path(__file__).resolve().parent.parent / "native"


def test_every_patch_has_its_rebase_section_and_every_section_its_patch() -> None:
    patches = {f.stem for f in (NATIVE / "patches").glob("*.patch")}
    text = (NATIVE / "REBASE.md").read_text()
    sections = set(re.findall(r"^### (\d{4}-[\w-]+)$", text, flags=re.MULTILINE))
    assert patches, "no patches found"
    assert patches - sections == set(), "patches without a REBASE.md section"
    assert sections - patches == set(), "REBASE.md sections of patches that are gone"
    for name in patches:
        body = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
        for part in ("**What**", "**Why**", "**Touches**", "**When it breaks**"):
            assert part in body, f"{name}: its section says nothing under {part}"
