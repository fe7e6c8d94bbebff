"""Chat messages for display (Qt-free): split into Markdown prose (line breaks kept) and fenced code
blocks highlighted with pygments, for the window's message cards, and the lines under an answer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound

FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)


def _close_open_fence(text: str) -> str:
    """An unterminated code block (streaming, or cut off at max tokens) ends with its message."""
    fences = re.findall(r"^(```|~~~)", text, re.M)
    return text + ("\n```" if len(fences) % 2 else "")


def _keep_line_breaks(text: str) -> str:
    """A chat keeps the lines its author wrote (a haiku, a Shift+Enter message): outside code
    blocks every single newline becomes a Markdown hard break, which would otherwise join lines."""
    out, last = [], 0
    for m in FENCE.finditer(text):
        out.append(re.sub(r"(?<=[^\n])[ \t]*\n(?=[^\n])", "  \n", text[last : m.start()]))
        out.append(text[m.start() : m.end()])
        last = m.end()
    out.append(re.sub(r"(?<=[^\n])[ \t]*\n(?=[^\n])", "  \n", text[last:]))
    return "".join(out)


def remote_engine(engine: str) -> str:
    """The endpoint and model ("gpu-box / qwen2.5-coder") of a stored engine label
    "remote:gpu-box/qwen2.5-coder" (ChatSession.engine; an endpoint's name holds no '/', a model
    id may); "" for a local engine's label."""
    if not engine.startswith("remote:"):
        return ""
    endpoint, _, model = engine.removeprefix("remote:").partition("/")
    return f"{endpoint} / {model}" if model else endpoint


def local_engine(engine: str) -> tuple[str, str]:
    """The model and mode ("SmolLM2", "eagle") of a stored engine label "local:SmolLM2 (eagle)"
    (ChatSession.engine); ("", "") for a remote engine's label or none."""
    if not engine.startswith("local:"):
        return "", ""
    label = engine.removeprefix("local:")
    name, sep, mode = label.rpartition(" (")
    return (name, mode.removesuffix(")")) if sep and mode.endswith(")") else (label, "")


def message_footer(m: dict[str, Any], live: bool = False) -> list[str]:
    """The lines under a question: its files. Under an answer: its speed, which engine wrote it (the local model and its mode, or
    the remote endpoint and model), and whether it was stopped, cut at the length limit or
    interrupted (each of which Continue can go on from). live: the answer is being written now (its
    stored copy is incomplete until it ends, which is not an interruption)."""
    if m["role"] == "user":  # the files sent with a question, as chips
        return ["Attached: " + ", ".join(a.label for a in m["attachments"])] if m.get("attachments") else []
    if m["role"] != "assistant":
        return []
    stats = m.get("stats") or {}
    engine = m.get("engine") or ""
    model, mode = local_engine(engine)
    mode = stats.get("mode") or mode
    remote = remote_engine(engine)
    how = f"via {remote}" if remote else " · ".join(x for x in (model, mode) if x)
    lines = []
    if stats.get("decode_tok_s"):
        speed = f"{stats['decode_tok_s']:.1f} tok/s · {stats.get('n_generated', 0)} tokens"
        lines.append(f"{speed} · {how}" if how else speed)
    elif how:
        lines.append(how)
    if m.get("reading"):  # a long prompt being read, before the answer's first token
        done, total = m["reading"]
        lines.append(f"Reading the prompt: {done:,} of {total:,} tokens")
    elif live:
        lines.append("[writing…]")
    elif m.get("interrupted"):
        lines.append("[interrupted: Continue or Regenerate]")
    elif m.get("finish") == "cancelled":
        lines.append("[stopped: Continue writes more]")
    elif m.get("finish") == "length":
        lines.append("[cut at the length limit: Continue writes more]")
    elif m.get("finish") == "context_full":
        lines.append("[stopped: the context is full: Continue writes more]")
    return lines


# -- the window's message cards ----------------------------------------------------------------------
# A message is shown as a run of segments: Markdown prose and fenced code blocks, so the window can
# give each code block its own highlighted frame and Copy button (copying exactly the block's code).


@dataclass(frozen=True)
class Segment:
    kind: str  # "text" (Markdown, line breaks kept) or "code"
    text: str  # the Markdown, or the code exactly as written (what Copy puts on the clipboard)
    language: str = ""  # the fence's info string, for highlighting


def message_segments(content: str) -> list[Segment]:
    """A message split into prose and code blocks; an unterminated block (streaming, or cut at the
    length limit) ends with the message."""
    text = _close_open_fence(content)
    out: list[Segment] = []
    last = 0
    for m in FENCE.finditer(text):
        prose = text[last : m.start()].strip("\n")
        if prose.strip():
            out.append(Segment("text", _keep_line_breaks(prose)))
        info = text[m.start() : text.index("\n", m.start())].lstrip("`~").strip()
        out.append(Segment("code", m.group(2), info.split()[0] if info else ""))
        last = m.end()
    prose = text[last:].strip("\n")
    if prose.strip():
        out.append(Segment("text", _keep_line_breaks(prose)))
    return out


def highlight_code(code: str, language: str, dark: bool) -> str:
    """The code as HTML with inline colours (Qt's rich text has no stylesheet classes), in a
    <pre> so every space and line break stays."""
    lexer = _lexer(code, language)
    style = "github-dark" if dark else "friendly"
    formatter = HtmlFormatter(style=style, noclasses=True, nowrap=True)
    body = highlight(code.rstrip("\n"), lexer, formatter)
    return f'<pre style="margin:0">{body}</pre>'


def _lexer(code: str, language: str) -> Lexer:
    try:
        # no guessing for an unlabelled block: guess_lexer tries every lexer (slow while streaming)
        # and often guesses wrong on a few lines
        lexer: Lexer = get_lexer_by_name(language) if language else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    return lexer
