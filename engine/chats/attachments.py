"""Files attached to a question, Qt-free: text, Markdown, source code and PDF (its text, via pypdf).
read_attachment() turns a path into an Attachment or an AttachmentError whose message says what is
wrong in words (unreadable, binary, too big, a PDF with no text or a password); quote() is how an
attachment reaches the model: quoted context under its file name, before the question."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

MAX_FILE_BYTES = 2_000_000  # a text file: ~500,000 words, far past any local model's context
MAX_PDF_BYTES = 50_000_000  # a PDF carries fonts and images; its text is checked against MAX_TEXT_CHARS
MAX_TEXT_CHARS = 2_000_000

MARKDOWN = {".md", ".markdown", ".mdx", ".rst"}
CODE = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript",
    ".tsx": "tsx", ".jsx": "jsx", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp",
    ".cxx": "cpp", ".cs": "csharp", ".java": "java", ".kt": "kotlin", ".go": "go", ".rs": "rust",
    ".rb": "ruby", ".php": "php", ".swift": "swift", ".m": "objectivec", ".scala": "scala", ".sh": "bash",
    ".bash": "bash", ".zsh": "bash", ".ps1": "powershell", ".sql": "sql", ".html": "html", ".css": "css",
    ".scss": "scss", ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".ini": "ini",
    ".xml": "xml", ".lua": "lua", ".r": "r", ".jl": "julia", ".hs": "haskell", ".ml": "ocaml",
    ".ex": "elixir", ".erl": "erlang", ".dart": "dart", ".vue": "vue", ".cmake": "cmake", ".mk": "make",
}  # fmt: skip
CODE_NAMES = {"makefile": "make", "dockerfile": "docker", "cmakelists.txt": "cmake"}
# what the file dialog offers (any other file may still be tried: its content decides)
FILE_FILTER = "Text, Markdown, code and PDF (*.txt *.log *.csv *.pdf " + " ".join(f"*{e}" for e in [*MARKDOWN, *CODE]) + ")"


class AttachmentError(Exception):
    """A file that cannot be attached; the message says which and why, for people."""


@dataclass
class Attachment:
    name: str  # the file's name (no folder): what the chip shows and the model reads
    kind: str  # text, markdown, code, pdf
    size: int  # the file's bytes
    text: str  # what the model gets
    language: str = ""  # code: its language (the fence's tag)
    pages: int = 0  # pdf: its pages

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Attachment:
        return cls(
            str(d["name"]), str(d.get("kind", "text")), int(d.get("size", 0)), str(d.get("text", "")),
            str(d.get("language", "")), int(d.get("pages", 0)),
        )  # fmt: skip

    @property
    def label(self) -> str:
        """The chip's text: name and size (pages for a PDF)."""
        extra = f"{self.pages} page{'s' * (self.pages != 1)}" if self.kind == "pdf" else human_size(self.size)
        return f"{self.name} · {extra}"


def human_size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    if n < 1_000_000:
        return f"{n / 1000:.0f} KB" if n >= 10_000 else f"{n / 1000:.1f} KB"
    return f"{n / 1_000_000:.1f} MB"


def read_attachment(path: str | Path) -> Attachment:
    """The file's text, ready to quote; AttachmentError (in words) for anything that cannot be."""
    path = Path(path)
    name = path.name
    try:
        if path.is_dir():
            raise AttachmentError(f"{name} is a folder; attach the files in it one by one.")
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if head.startswith(b"%PDF-") or path.suffix.lower() == ".pdf":
                if size > MAX_PDF_BYTES:
                    raise AttachmentError(_too_big(name, size, MAX_PDF_BYTES))
                f.seek(0)
                return _pdf(name, size, f)
            if size > MAX_FILE_BYTES:
                raise AttachmentError(_too_big(name, size, MAX_FILE_BYTES))
            data = head + f.read()
    except FileNotFoundError:
        raise AttachmentError(f"{name} is not there any more (moved or deleted?).") from None
    except PermissionError:
        raise AttachmentError(f"{name} cannot be read: permission denied.") from None
    except OSError as exc:
        raise AttachmentError(f"{name} cannot be read: {exc.strerror or exc}.") from None
    text = _decode(name, data)
    if not text.strip():
        raise AttachmentError(f"{name} is empty: there is nothing in it to give the model.")
    suffix = path.suffix.lower()
    language = CODE.get(suffix) or CODE_NAMES.get(name.lower(), "")
    kind = "markdown" if suffix in MARKDOWN else "code" if language else "text"
    return Attachment(name, kind, size, text, language)


def _too_big(name: str, size: int, limit: int) -> str:
    return (
        f"{name} is {human_size(size)}; files up to {human_size(limit)} can be attached. "
        "Attach the part you want to ask about instead."
    )


def _decode(name: str, data: bytes) -> str:
    if b"\x00" in data[:8192] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise AttachmentError(f"{name} is a binary file, not text; attach text, Markdown, source code or a PDF.")
    for encoding in ("utf-8-sig", "utf-16") if data.startswith((b"\xff\xfe", b"\xfe\xff")) else ("utf-8-sig",):
        try:
            text = data.decode(encoding)
            break
        except UnicodeDecodeError:
            continue
    else:
        text = data.decode("cp1252", errors="replace")  # older editors' Western text
        controls = sum(1 for ch in text[:8192] if ord(ch) < 32 and ch not in "\t\n\r\f")
        if controls > len(text[:8192]) // 100 or text.count("\ufffd") > len(text) // 100:
            raise AttachmentError(f"{name} is a binary file, not text; attach text, Markdown, source code or a PDF.")
    return text.replace("\r\n", "\n")


def _pdf(name: str, size: int, f: BinaryIO) -> Attachment:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(f)
        if reader.is_encrypted and not reader.decrypt(""):
            raise AttachmentError(f"{name} is protected by a password; open it, save a copy without one and attach that.")
        pages = [page.extract_text() or "" for page in reader.pages]
    except AttachmentError:
        raise
    except FileNotDecryptedError:
        raise AttachmentError(f"{name} is protected by a password; open it, save a copy without one and attach that.") from None
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AttachmentError(f"{name} cannot be read as a PDF ({exc}); it may be damaged.") from None
    text = "\n\n".join(f"[page {i}]\n{t.strip()}" for i, t in enumerate(pages, 1) if t.strip())
    if not text:
        raise AttachmentError(
            f"{name} has no text to read ({len(pages)} page{'s' * (len(pages) != 1)} of images, e.g. a scan); "
            "run text recognition (OCR) on it first."
        )
    if len(text) > MAX_TEXT_CHARS:
        raise AttachmentError(f"{name} holds {len(text):,} characters of text; attach fewer pages of it.")
    return Attachment(name, "pdf", size, text, pages=len(pages))


def quote(a: Attachment) -> str:
    """How the model reads an attachment: its name, then its text in a fence no line of it closes."""
    longest = max((len(m) for m in re.findall(r"`{3,}", a.text)), default=2)
    fence = "`" * (longest + 1)
    return f'File "{a.name}":\n{fence}{a.language}\n{a.text.rstrip()}\n{fence}'


def with_attachments(question: str, attachments: list[Attachment]) -> str:
    """The user message the model sees: each attached file quoted with its name, then the question."""
    if not attachments:
        return question
    return "\n\n".join([*(quote(a) for a in attachments), question])
