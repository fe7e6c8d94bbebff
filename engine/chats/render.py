"""A conversation as Markdown for the chat view (Qt-free): role headings, the text itself, and a
"Copy code" link after each fenced code block (the view maps copy:N links to code_blocks()[N])."""

from __future__ import annotations

import re

FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)


def code_blocks(text: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(text)]


def _with_copy_links(text: str, first_index: int) -> tuple[str, int]:
    out, last, n = [], 0, first_index
    for m in FENCE.finditer(text):
        out.append(text[last : m.end()])
        out.append(f"\n\n[Copy code](copy:{n})\n")
        last, n = m.end(), n + 1
    out.append(text[last:])
    return "".join(out), n


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


def conversation_markdown(messages: list[dict]) -> tuple[str, list[str]]:
    """(markdown, code blocks in link order) for [{'role', 'content', 'stats'?}, ...]."""
    parts: list[str] = []
    blocks: list[str] = []
    n = 0
    for m in messages:
        role = {"user": "You", "assistant": "Assistant", "system": "System"}.get(m["role"], m["role"])
        text = m["content"]
        text = _close_open_fence(text)  # an answer cut off (or still streaming) inside a code block
        text = _keep_line_breaks(text)
        body, n2 = _with_copy_links(text, n)
        blocks += code_blocks(text)
        n = n2
        stats = m.get("stats") or {}
        footer = ""
        if m["role"] == "assistant" and stats.get("decode_tok_s"):
            footer = f"\n\n*{stats['decode_tok_s']:.1f} tok/s · {stats.get('n_generated', 0)} tokens · {stats.get('mode', '')}*"
        if m["role"] == "assistant" and m.get("interrupted"):
            footer += "\n\n*[interrupted: Continue or Regenerate]*"
        parts.append(f"**{role}**\n\n{body if body.strip() else '…'}{footer}")
    return "\n\n---\n\n".join(parts), blocks
