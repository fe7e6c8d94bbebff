"""OpenAI's Responses API (`POST /v1/responses`) for text, streamed and not: what the OpenAI Agents
SDK and newer clients send by default. A request becomes the same Generate a chat completion does;
the answer comes back as one `message` output item with one `output_text` part.

Nothing is stored (`store` is accepted and ignored), so `previous_response_id` and a response's
later retrieval are refused; tools and non-text input are refused as in chat completions.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from engine import protocol as p
from engine.serve.errors import ApiError
from engine.serve.schema import ROLES, ParsedRequest, _common, _shown, _text, content_text
from engine.serve.structured import grammar_for

# parameters of the Responses API this server cannot honour: refused, never silently dropped
UNSUPPORTED = ("previous_response_id", "conversation", "tools", "tool_choice", "background", "prompt")
# content part types that carry plain text (the first names the kind in errors)
INPUT_TEXT = ("input_text", "output_text", "text")
STATUS = {"stop": "completed", "length": "incomplete", "context_full": "incomplete", "cancelled": "incomplete"}


def parse_responses(body: Any, served_model: str, n_ctx: int) -> ParsedRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    for name in UNSUPPORTED:
        if body.get(name) not in (None, False, [], ""):
            why = "this server stores no responses" if name in ("previous_response_id", "conversation", "background") else ""
            raise ApiError(
                400, f"{name} is not supported by this server{': ' + why if why else ''}", name, "unsupported_parameter"
            )
    # the Responses API names the answer's budget max_output_tokens
    chat_like = {k: v for k, v in body.items() if k not in ("max_output_tokens", "max_tokens", "input", "text")}
    if body.get("max_output_tokens") is not None:
        chat_like["max_completion_tokens"] = body["max_output_tokens"]
    try:
        req = _common(chat_like, served_model, n_ctx)
    except ApiError as exc:
        if exc.param in ("max_completion_tokens", "max_tokens"):
            exc.param = "max_output_tokens"
            exc.message = re.sub(r"max_(completion_)?tokens", "max_output_tokens", exc.message)
        raise
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise ApiError(400, "instructions must be a string", param="instructions")
        if instructions:
            req.messages.append({"role": "system", "content": _text(instructions, "instructions")})
    raw = body.get("input")
    if isinstance(raw, str):
        if not raw:
            raise ApiError(400, "input must not be empty", param="input")
        req.messages.append({"role": "user", "content": _text(raw, "input")})
    elif isinstance(raw, list) and raw:
        for i, item in enumerate(raw):
            if not isinstance(item, dict) or item.get("type", "message") != "message":
                kind = item.get("type") if isinstance(item, dict) else _shown(item)
                raise ApiError(400, f"input[{i}]: only message items are supported here, got {kind!r}", param=f"input[{i}]")
            role = item.get("role")
            if not isinstance(role, str) or role not in ROLES:
                raise ApiError(400, f"input[{i}].role must be one of {', '.join(ROLES)}", param=f"input[{i}].role")
            req.messages.append({"role": ROLES[role], "content": content_text(item.get("content"), f"input[{i}]", INPUT_TEXT)})
    else:
        raise ApiError(400, "input must be a non-empty string or a list of messages", param="input")
    turns = [m["role"] for m in req.messages if m["role"] != "system"]
    if not turns or turns[-1] != "user":
        raise ApiError(400, "the last input message must be the user's", param="input")
    text = body.get("text")
    if text is not None:
        if not isinstance(text, dict):
            raise ApiError(400, "text must be an object", param="text")
        fmt = text.get("format")
        if fmt is not None:
            if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
                raise ApiError(400, "text.format must be an object with a type", param="text.format")
            if fmt["type"] == "json_schema":  # flat here; chat completions nest it under json_schema
                fmt = {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
            try:
                req.grammar, req.grammar_for = grammar_for(fmt)
            except ApiError as exc:
                exc.param = "text.format"
                exc.message = exc.message.replace("response_format", "text.format")
                raise
    return req


class ResponseShapes:
    """The JSON of one response and, streamed, its events (sequence-numbered, as OpenAI sends them)."""

    def __init__(self, request_id: str, model: str, req: ParsedRequest) -> None:
        self.id, self.msg_id = f"resp_{request_id}", f"msg_{request_id}"
        self.model, self.req = model, req
        self.created = int(time.time())
        self.seq = 0
        self.text = ""

    def response(self, status: str, done: p.Done | None = None, cached: int = 0) -> dict[str, Any]:
        output = []
        if done is not None:
            output.append(self._item(done.text, "completed"))
        s = self.req.sampling
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": next((m["content"] for m in self.req.messages if m["role"] == "system"), None),
            "model": self.model,
            "output": output,
            "parallel_tool_calls": False,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_output_tokens": s.max_tokens or None,
            "tool_choice": "none",
            "tools": [],
            "truncation": "auto" if self.req.on_overflow == p.Overflow.TRIM else "disabled",
            "text": {"format": {"type": "json_schema" if self.req.grammar_for.startswith("json_schema") else "text"}},
            "store": False,
            "usage": None if done is None else self.usage(done, cached),
        }

    def _item(self, text: str, status: str) -> dict[str, Any]:
        content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
        return {"type": "message", "id": self.msg_id, "status": status, "role": "assistant", "content": content}

    @staticmethod
    def usage(done: p.Done, cached: int) -> dict[str, Any]:
        return {
            "input_tokens": done.n_prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": done.n_generated,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": done.n_prompt + done.n_generated,
        }

    def complete(self, done: p.Done, cached: int = 0) -> dict[str, Any]:
        return self.response(STATUS.get(done.finish_reason, "completed"), done, cached)

    def event(self, kind: str, **fields: Any) -> bytes:
        body = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()

    def opening(self) -> list[bytes]:
        at = {"output_index": 0, "item_id": self.msg_id}
        return [
            self.event("response.created", response=self.response("in_progress")),
            self.event("response.in_progress", response=self.response("in_progress")),
            self.event("response.output_item.added", output_index=0, item=self._item("", "in_progress")),
            self.event("response.content_part.added", **at, content_index=0,
                       part={"type": "output_text", "text": "", "annotations": []}),
        ]  # fmt: skip

    def delta(self, text: str) -> bytes:
        self.text += text
        return self.event("response.output_text.delta", output_index=0, item_id=self.msg_id, content_index=0, delta=text,
                          logprobs=[])  # fmt: skip

    def closing(self, done: p.Done, cached: int = 0) -> list[bytes]:
        at = {"output_index": 0, "item_id": self.msg_id}
        final = self.complete(done, cached)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        return [
            self.event("response.output_text.done", **at, content_index=0, text=done.text, logprobs=[]),
            self.event("response.content_part.done", **at, content_index=0,
                       part={"type": "output_text", "text": done.text, "annotations": []}),
            self.event("response.output_item.done", output_index=0, item=self._item(done.text, "completed")),
            self.event(kind, response=final),
        ]  # fmt: skip
