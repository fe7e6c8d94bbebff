"""A small PDF with real text, built with pypdf in the test itself (no downloaded fixture)."""

from __future__ import annotations

from pathlib import Path

from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject


def write_pdf(path: Path, pages: list[str], password: str = "") -> Path:
    """One page per string, each line of it drawn in Helvetica (a standard font: nothing embedded)."""
    writer = PdfWriter()
    font = DictionaryObject({
        NameObject("/Type"): NameObject("/Font"),
        NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica"),
    })  # fmt: skip
    for text in pages:
        page = writer.add_blank_page(width=612, height=792)
        lines = [ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for ln in text.splitlines()]
        ops = "BT /F1 12 Tf 14 TL 72 720 Td " + " ".join(f"({ln}) Tj T*" for ln in lines) + " ET"
        stream = DecodedStreamObject()
        stream.set_data(ops.encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(stream)
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
    if password:
        writer.encrypt(password, algorithm="AES-128")
    with path.open("wb") as f:
        writer.write(f)
    return path
