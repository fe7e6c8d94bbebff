"""A model's chat templates with tool calls: llama.cpp's own common/chat (its Jinja templates, the
grammars that make an answer a valid call, the parsers that read calls back), through our C API
(native/src/chat-api.h, engine.native.chat_lib). No parsing of our own: the prompt, the grammar and
the parser all come from llama.cpp for the model's template.

The HTTP server uses it in its own process (the model read vocabulary-only: no weights), renders the
prompt and sends it to the worker as a raw prompt with the grammar, then parses the answer.
"""

from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import native


class ToolTemplateError(ValueError):
    """llama.cpp refused the request for this template (the message is llama.cpp's)."""


@dataclass
class ToolPrompt:
    """What llama.cpp's chat template makes of a request: the prompt, the grammar and how it applies
    (Generate.grammar_*), extra stop strings, and what parse() needs to read the answer."""

    prompt: str
    format: str
    grammar: str = ""
    grammar_lazy: bool = False
    trigger_patterns: list[str] = field(default_factory=list)
    trigger_tokens: list[int] = field(default_factory=list)
    grammar_prefill: list[int] = field(default_factory=list)
    preserved_tokens: list[int] = field(default_factory=list)
    additional_stops: list[str] = field(default_factory=list)
    parser: bytes = b""  # the parser's spec for specee_chat_parse (JSON)


class ChatTemplates:
    """The templates of one model file. One thread at a time (the server's event loop)."""

    def __init__(self, model_path: Path) -> None:
        self._lib = native.chat_lib()
        self._handle = self._lib.specee_chat_init(str(model_path).encode())
        if not self._handle:
            raise ToolTemplateError(self._error())
        self.caps: dict[str, bool] = json.loads(self._lib.specee_chat_caps(self._handle))

    def _error(self) -> str:
        return (self._lib.specee_chat_last_error() or b"").decode(errors="replace") or "llama.cpp gave no reason"

    @property
    def supports_tools(self) -> bool:
        return bool(self.caps.get("supports_tools")) and bool(self.caps.get("supports_tool_calls"))

    def apply(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        tool_choice: str = "auto",
        parallel_tool_calls: bool = True,
        continue_answer: bool = False,
    ) -> ToolPrompt:
        """The prompt of OpenAI `messages` (tool calls and results included) offering `tools`;
        tool_choice: "auto", "required" or "none"."""
        request = {
            "messages": messages, "tools": tools, "tool_choice": tool_choice, "parallel_tool_calls": parallel_tool_calls,
            "continue_final_message": continue_answer,
        }  # fmt: skip
        out = self._lib.specee_chat_apply(self._handle, json.dumps(request).encode())
        if not out:
            raise ToolTemplateError(self._error())
        r = json.loads(out)
        spec = {
            "format_id": r["format_id"], "generation_prompt": r["generation_prompt"], "parser": r["parser"],
            "parse_tool_calls": tool_choice != "none" and bool(tools), "continue_final_message": continue_answer,
        }  # fmt: skip
        return ToolPrompt(
            prompt=r["prompt"],
            format=r["format"],
            grammar=r["grammar"],
            grammar_lazy=r["grammar_lazy"],
            trigger_patterns=r["trigger_patterns"],
            trigger_tokens=r["trigger_tokens"],
            grammar_prefill=r["grammar_prefill"],
            preserved_tokens=r["preserved_tokens"],
            additional_stops=r["additional_stops"],
            parser=json.dumps(spec).encode(),
        )

    def parse(self, text: str, prompt: ToolPrompt, partial: bool = False) -> dict[str, Any]:
        """The answer `text` as an OpenAI assistant message: {"role", "content", "tool_calls"?: [{"type",
        "function": {"name", "arguments"}}]}; partial: the text so far of an answer still growing."""
        out = self._lib.specee_chat_parse(self._handle, text.encode("utf-8", errors="replace"), partial, prompt.parser)
        if not out:
            raise ToolTemplateError(self._error())
        message: dict[str, Any] = json.loads(out)  # the native parser's output: one JSON object
        return message

    def close(self) -> None:
        if self._handle:
            self._lib.specee_chat_free(ctypes.c_void_p(self._handle))
            self._handle = None

    def __del__(self) -> None:
        self.close()
