"""OpenAI tool calls: `tools`, `tool_choice` (auto, required, none, a named function),
`parallel_tool_calls`, assistant messages with `tool_calls` and `role: tool` results in the history.

Checked here (OpenAI-shaped 400s); rendered, constrained and parsed by llama.cpp's own chat code for
the model's template (engine.llm.tool_calls): the prompt goes to the engine as a raw prompt with the
template's tool-call grammar, lazy for `auto` (it applies from the template's tool-call opening on),
whole-answer for `required` and a named function (calls only, so even a model that would not call
gets a valid call). The answer is parsed into content and tool_calls; streamed answers are parsed as
they grow and sent as OpenAI's deltas.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from engine.serve.errors import ApiError

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
CHOICES = ("auto", "required", "none")
NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_TOOLS = 128  # OpenAI's limit
CHOICE_SHAPES = "'auto', 'required', 'none' or {'type': 'function', 'function': {'name': ...}}"


@dataclass
class ToolRequest:
    """A chat request's tool part, checked; messages in OpenAI's shape for llama.cpp's templates."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: str = "auto"  # auto | required | none (a named function: required, tools = that one)
    parallel_tool_calls: bool = True
    continue_answer: bool = False


def uses_tools(body: dict[str, Any]) -> bool:
    """Whether a chat request needs the tool path: tools offered, or calls and results in its history."""
    if body.get("tools") not in (None, []) or body.get("tool_choice") is not None:
        return True
    raw = body.get("messages")
    return isinstance(raw, list) and any(
        isinstance(m, dict) and (m.get("role") == "tool" or m.get("tool_calls") not in (None, [])) for m in raw
    )


def _bad(message: str, param: str, code: str | None = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _text(content: Any, param: str, allow_null: bool = False) -> str | None:
    """A message's content: a string, or text parts joined; None where allowed (an assistant's calls)."""
    if content is None and allow_null:
        return None
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        if not all(part.get("type") == "text" and isinstance(part.get("text"), str) for part in content):
            raise _bad(f"{param}: only text content parts are supported", param)
        content = "".join(part["text"] for part in content)
    if not isinstance(content, str):
        raise _bad(f"{param} must be a string or a list of text parts", param)
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _bad(f"{param} is not valid Unicode text ({exc.reason} at character {exc.start})", param) from None
    return content


def _calls(raw: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise _bad(f"{where} must be a list of tool calls", where)
    out = []
    for j, call in enumerate(raw):
        at = f"{where}[{j}]"
        if not isinstance(call, dict) or call.get("type", "function") != "function":
            raise _bad(f"{at} must be a function call: {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}", at)
        fn = call.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _bad(f"{at}.function.name must be the called function's name", f"{at}.function.name")
        args = fn.get("arguments", "{}")
        if not isinstance(args, str):
            raise _bad(f"{at}.function.arguments must be a string of JSON", f"{at}.function.arguments")
        try:
            json.loads(args or "{}")
        except ValueError:
            raise _bad(f"{at}.function.arguments is not valid JSON", f"{at}.function.arguments") from None
        call_id = call.get("id", "")
        if not isinstance(call_id, str):
            raise _bad(f"{at}.id must be a string", f"{at}.id")
        out.append({"id": call_id, "type": "function", "function": {"name": fn["name"], "arguments": args or "{}"}})
    return out


def _messages(raw: Any) -> tuple[list[dict[str, Any]], bool]:
    """OpenAI messages checked and normalised (developer -> system, text parts joined); whether the
    last one is an assistant's answer to continue."""
    if not isinstance(raw, list) or not raw:
        raise _bad("messages must be a non-empty list", "messages", None)
    out: list[dict[str, Any]] = []
    open_calls: set[str] = set()  # the ids of the last assistant message's calls, answered by tool messages
    for i, m in enumerate(raw):
        at = f"messages[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in ROLES:
            raise _bad(f"{at}.role must be one of {', '.join(ROLES)}", f"{at}.role", None)
        role = ROLES[m["role"]]
        msg: dict[str, Any] = {"role": role}
        if role == "assistant" and m.get("tool_calls") not in (None, []):
            msg["tool_calls"] = _calls(m["tool_calls"], f"{at}.tool_calls")
            msg["content"] = _text(m.get("content"), f"{at}.content", allow_null=True)
            open_calls = {c["id"] for c in msg["tool_calls"]}
        else:
            msg["content"] = _text(m.get("content"), f"{at}.content")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise _bad(f"{at}.tool_call_id must name the call this is the result of", f"{at}.tool_call_id")
            if call_id not in open_calls:
                raise _bad(
                    f"{at}: a message with role 'tool' must answer a call of the assistant message before it"
                    f" (no call has id {call_id!r})",
                    f"{at}.tool_call_id",
                )
            msg["tool_call_id"] = call_id
        elif role != "assistant":
            open_calls = set()
        if isinstance(m.get("name"), str) and role == "tool":
            msg["name"] = m["name"]
        out.append(msg)
    turns = [m["role"] for m in out if m["role"] != "system"]
    if not turns:
        raise _bad("the conversation has no user message", "messages", None)
    last = out[-1]
    continue_answer = last["role"] == "assistant" and "tool_calls" not in last and len(turns) > 1
    if last["role"] not in ("user", "tool") and not continue_answer:
        raise _bad("the last message must be the user's, a tool result, or the start of an answer", "messages", None)
    return out, continue_answer


def _tools(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _bad("tools must be a list of function tools", "tools")
    if len(raw) > MAX_TOOLS:
        raise _bad(f"at most {MAX_TOOLS} tools per request, got {len(raw)}", "tools")
    out, names = [], set()
    for i, tool in enumerate(raw):
        at = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise _bad(f"{at}.type must be 'function' (the only kind of tool this server runs)", f"{at}.type")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise _bad(f"{at}.function must be an object with a name and parameters", f"{at}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise _bad(
                f"{at}.function.name must be 1 to 64 letters, digits, underscores or dashes, got {json.dumps(name)[:80]}",
                f"{at}.function.name",
            )
        if name in names:
            raise _bad(f"{at}.function.name {name!r} is given twice", f"{at}.function.name")
        names.add(name)
        description = fn.get("description", "")
        if not isinstance(description, str):
            raise _bad(f"{at}.function.description must be a string", f"{at}.function.description")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise _bad(f"{at}.function.parameters must be a JSON Schema object", f"{at}.function.parameters")
        if not isinstance(fn.get("strict", False), bool | None):
            raise _bad(f"{at}.function.strict must be true or false", f"{at}.function.strict")
        out.append({"type": "function", "function": {"name": name, "description": description, "parameters": params}})
    return out


def parse_tool_request(body: dict[str, Any]) -> ToolRequest:
    """The tool part of a chat request (uses_tools), checked; ApiError 400 for anything malformed."""
    tools = _tools(body.get("tools"))
    messages, continue_answer = _messages(body.get("messages"))
    parallel = body.get("parallel_tool_calls", True)
    if parallel is None:
        parallel = True
    if not isinstance(parallel, bool):
        raise _bad("parallel_tool_calls must be true or false", "parallel_tool_calls")
    choice = body.get("tool_choice")
    if choice is not None and not tools:  # as OpenAI answers it
        raise _bad("tool_choice is only allowed when tools are given", "tool_choice")
    if choice is None:
        choice = "auto" if tools else "none"
    if isinstance(choice, dict):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if choice.get("type") != "function" or not isinstance(name, str):
            raise _bad(f"tool_choice must be {CHOICE_SHAPES}", "tool_choice")
        named = [t for t in tools if t["function"]["name"] == name]
        if not named:
            raise _bad(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
        tools, choice = named, "required"
    elif choice not in CHOICES:
        raise _bad(f"tool_choice must be {CHOICE_SHAPES}, got {json.dumps(choice)[:80]}", "tool_choice")
    if continue_answer and choice == "required":
        why = "cannot continue an answer (the last message is the assistant's)"
        raise _bad(f"tool_choice 'required' or a named function {why}", "tool_choice")
    return ToolRequest(messages, tools, choice, parallel, continue_answer)


def call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def message(parsed: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's parsed answer as OpenAI's response message (ids given to the calls)."""
    calls = [
        {"id": call_id(), "type": "function", "function": {"name": fn["name"], "arguments": fn["arguments"]}}
        for fn in (c["function"] for c in parsed.get("tool_calls", []))
    ]
    content = parsed.get("content") or ""
    out: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
    if calls:
        out["tool_calls"] = calls
    return out


class DeltaStream:
    """OpenAI's streamed deltas of an answer parsed as it grows: content as it comes, each call's id,
    type and name once (when its arguments start), then its arguments piece by piece."""

    def __init__(self) -> None:
        self.content = ""
        self.calls: list[dict[str, str]] = []  # id, name, arguments sent so far

    def update(self, parsed: dict[str, Any], final: bool = False) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = []
        content = parsed.get("content") or ""
        if len(content) > len(self.content) and content.startswith(self.content):
            deltas.append({"content": content[len(self.content) :]})
            self.content = content
        for i, call in enumerate(parsed.get("tool_calls", [])):
            name, args = call["function"]["name"], call["function"]["arguments"]
            if i == len(self.calls):
                if not name or not (args or final):  # its name may still grow
                    break
                self.calls.append({"id": call_id(), "name": name, "arguments": ""})
                head = {"index": i, "id": self.calls[i]["id"], "type": "function", "function": {"name": name, "arguments": ""}}
                deltas.append({"tool_calls": [head]})
            sent = self.calls[i]["arguments"]
            if len(args) > len(sent) and args.startswith(sent):
                deltas.append({"tool_calls": [{"index": i, "function": {"arguments": args[len(sent) :]}}]})
                self.calls[i]["arguments"] = args
        return deltas
