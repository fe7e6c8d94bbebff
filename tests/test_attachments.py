"""Files attached to a question (issue 23, item 17), without Qt or a worker: what is read from
text, Markdown, code and PDF files, the clear refusals, and how the model is given them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.chats.attachments import MAX_FILE_BYTES, Attachment, AttachmentError, quote, read_attachment, with_attachments
from tests.pdf_fixture import write_pdf


def test_text_markdown_and_code_files_are_read_with_their_kind(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("line one\r\nline two\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("# Title\n\nSome *text*.\n", encoding="utf-8")
    (tmp_path / "main.rs").write_text('fn main() { println!("hi"); }\n', encoding="utf-8")
    (tmp_path / "Makefile").write_text("all:\n\techo hi\n", encoding="utf-8")
    (tmp_path / "old.txt").write_bytes("café crème\n".encode("cp1252"))
    (tmp_path / "bom.txt").write_bytes("\ufeffwith a BOM".encode())
    found = {n: read_attachment(tmp_path / n) for n in ("notes.txt", "README.md", "main.rs", "Makefile", "old.txt", "bom.txt")}
    assert found["notes.txt"] == Attachment("notes.txt", "text", 19, "line one\nline two\n")
    assert (found["README.md"].kind, found["main.rs"].kind, found["main.rs"].language) == ("markdown", "code", "rust")
    assert (found["Makefile"].kind, found["Makefile"].language) == ("code", "make")
    assert found["old.txt"].text == "café crème\n" and found["bom.txt"].text == "with a BOM"
    assert found["notes.txt"].label == "notes.txt · 19 B"


def test_a_pdf_gives_its_text_page_by_page(tmp_path: Path) -> None:
    pdf = write_pdf(tmp_path / "paper.pdf", ["Sourdough needs a starter.\nFeed it daily.", "Bake at 250 C."])
    a = read_attachment(pdf)
    assert (a.kind, a.pages, a.label) == ("pdf", 2, "paper.pdf · 2 pages")
    assert a.text == "[page 1]\nSourdough needs a starter.\nFeed it daily.\n\n[page 2]\nBake at 250 C."
    renamed = tmp_path / "paper.bin"  # what it is, not what it is called
    renamed.write_bytes(pdf.read_bytes())
    assert read_attachment(renamed).kind == "pdf"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda d: (d / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200)), "binary file"),
        (lambda d: (d / "blob.dat").write_bytes(bytes(range(256)) * 40), "binary file"),
        (lambda d: (d / "empty.txt").write_text("  \n"), "is empty"),
        (lambda d: (d / "huge.log").write_bytes(b"x" * (MAX_FILE_BYTES + 1)), "files up to 2.0 MB"),
        (lambda d: (d / "folder").mkdir(), "is a folder"),
        (lambda d: None, "not there any more"),
        (lambda d: (d / "broken.pdf").write_bytes(b"%PDF-1.7\n garbage"), "cannot be read as a PDF"),
        (lambda d: write_pdf(d / "scan.pdf", [""]), "no text to read"),
        (lambda d: write_pdf(d / "locked.pdf", ["secret"], password="pw"), "protected by a password"),
    ],
)
def test_files_that_cannot_be_attached_say_why(tmp_path: Path, make, words: str) -> None:
    before = set(tmp_path.iterdir())
    make(tmp_path)
    made = sorted(set(tmp_path.iterdir()) - before)
    path = made[0] if made else tmp_path / "gone.txt"
    with pytest.raises(AttachmentError) as err:
        read_attachment(path)
    assert words in str(err.value) and path.name in str(err.value)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_says_permission_denied(tmp_path: Path) -> None:
    f = tmp_path / "private.txt"
    f.write_text("secret")
    f.chmod(0)
    with pytest.raises(AttachmentError, match="permission denied"):
        read_attachment(f)


def test_the_model_gets_each_file_quoted_under_its_name_before_the_question() -> None:
    code = Attachment("a.md", "markdown", 30, "Use\n```py\nx = 1\n```\n")
    assert quote(code) == 'File "a.md":\n````\nUse\n```py\nx = 1\n```\n````'  # a fence no line of the file closes
    py = Attachment("b.py", "code", 5, "x = 1", "python")
    assert with_attachments("What does it do?", [py]) == 'File "b.py":\n```python\nx = 1\n```\n\nWhat does it do?'
    assert with_attachments("Hi", []) == "Hi"
