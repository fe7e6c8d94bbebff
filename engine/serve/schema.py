"""OpenAI request bodies -> our protocol's Generate fields, and our events -> OpenAI response shapes.

Sampling: fields a request leaves out keep the engine's defaults (temperature 0.7, top_k 40, min_p
0.05, repeat_penalty 1.1: what the app's Balanced preset uses); temperature 0 is greedy, as in the
OpenAI API. top_k, min_p and repeat_penalty are accepted as extensions (as llama.cpp's server does).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from engine import protocol as p
from engine.serve.errors import ApiError

MAX_BODY_BYTES = 1 << 20
MAX_MESSAGES = 1024
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# finish reasons OpenAI clients know; a full context ends the answer like a length limit
FINISH = {"stop": "stop", "length": "length", "context_full": "length", "cancelled": "stop"}
# parameters we cannot honour: refused rather than silently ignored
UNSUPPORTED = ("tools", "functions", "tool_choice", "function_call", "logprobs", "top_logprobs", "echo", "suffix")


@dataclass
class ParsedRequest:
    model: str
    sampling: p.Sampling
    stream: bool = False
    include_usage: bool = False
    messages: list[dict[str, str]] = field(default_factory=list)
    prompt: str = ""  # /v1/completions: the raw prompt
    continue_answer: bool = False  # chat ending with an assistant message: continue that answer


def _number(body: dict[str, Any], name: str, integer: bool = False) -> float | int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise ApiError(400, f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}", param=name)
    if not math.isfinite(value):
        raise ApiError(400, f"{name} must be finite, got {value!r}", param=name)
    return value


def sampling_from(body: dict[str, Any], n_ctx: int) -> p.Sampling:
    temperature = _number(body, "temperature")
    s = p.Sampling.greedy() if temperature == 0 else p.Sampling()
    s.seed = -1
    if temperature is not None:
        s.temperature = float(temperature)
    for name in ("top_p", "min_p", "repeat_penalty"):
        value = _number(body, name)
        if value is not None:
            setattr(s, name, float(value))
    for name in ("top_k", "seed"):
        value = _number(body, name, integer=True)
        if value is not None:
            setattr(s, name, int(value))
    # max_completion_tokens: the newer name for the same limit
    max_tokens = _number(body, "max_completion_tokens", integer=True)
    max_tokens = max_tokens if max_tokens is not None else _number(body, "max_tokens", integer=True)
    if max_tokens is not None:
        if not 1 <= max_tokens <= n_ctx:
            raise ApiError(400, f"max_tokens must be 1..{n_ctx} (the model's context here), got {max_tokens}", param="max_tokens")
        s.max_tokens = int(max_tokens)
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(x, str) for x in stop):
            raise ApiError(400, "stop must be a string or a list of strings", param="stop")
        s.stop = [x for x in stop if x]
    try:
        s.validate()
    except p.SettingsError as exc:
        raise ApiError(400, str(exc), param=str(exc).split(" ", 1)[0]) from None
    return s


def _common(body: Any, served_model: str, n_ctx: int) -> ParsedRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    for name in UNSUPPORTED:
        if body.get(name) not in (None, False, [], ""):
            raise ApiError(400, f"{name} is not supported by this server", param=name, code="unsupported_parameter")
    n = _number(body, "n", integer=True)
    if n not in (None, 1):
        raise ApiError(400, "only n=1 is supported (one answer per request)", param="n", code="unsupported_parameter")
    fmt = body.get("response_format")
    if fmt not in (None, {"type": "text"}):
        raise ApiError(400, "only response_format {'type': 'text'} is supported", param="response_format")
    # one model is served: a request that names none gets it (as llama-server and vLLM do); one that
    # names another is told which model this is rather than answered by a model it did not ask for
    model = body.get("model") or served_model
    if not isinstance(model, str):
        raise ApiError(400, f"model must be a string (this server serves {served_model!r})", param="model")
    if model != served_model:
        raise ApiError(
            404, f"model {model!r} is not served here; this server serves {served_model!r}", "model", "model_not_found"
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be true or false", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")
    return ParsedRequest(model, sampling_from(body, n_ctx), stream, bool(options.get("include_usage")))


def _content(message: dict[str, Any], i: int) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    # content parts: text only (this engine reads no images or audio)
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        if all(part.get("type") == "text" and isinstance(part.get("text"), str) for part in content):
            return "".join(part["text"] for part in content)
        raise ApiError(400, f"messages[{i}]: only text content parts are supported", param=f"messages[{i}].content")
    raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts", param=f"messages[{i}].content")


def parse_chat(body: Any, served_model: str, n_ctx: int) -> ParsedRequest:
    req = _common(body, served_model, n_ctx)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    if len(raw) > MAX_MESSAGES:
        raise ApiError(400, f"at most {MAX_MESSAGES} messages per request, got {len(raw)}", param="messages")
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ApiError(400, f"messages[{i}].role must be one of {', '.join(ROLES)}", param=f"messages[{i}].role")
        req.messages.append({"role": ROLES[m["role"]], "content": _content(m, i)})
    turns = [m["role"] for m in req.messages if m["role"] != "system"]
    # an assistant message last is a prefix of the answer to continue (after the user's question)
    req.continue_answer = turns[-2:] == ["user", "assistant"]
    if not turns or (turns[-1] != "user" and not req.continue_answer):
        raise ApiError(400, "the last message must be the user's (or the start of an answer after it)", param="messages")
    return req


def parse_completion(body: Any, served_model: str, n_ctx: int) -> ParsedRequest:
    req = _common(body, served_model, n_ctx)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(400, "prompt must be one string (token lists and batches are not supported)", param="prompt")
    if not prompt:
        raise ApiError(400, "prompt must not be empty", param="prompt")
    best_of = _number(body, "best_of", integer=True)
    if best_of not in (None, 1):
        raise ApiError(400, "only best_of=1 is supported", param="best_of", code="unsupported_parameter")
    req.prompt = prompt
    return req


# -- responses -----------------------------------------------------------------------------------


def usage(done: p.Done) -> dict[str, int]:
    return {
        "prompt_tokens": done.n_prompt,
        "completion_tokens": done.n_generated,
        "total_tokens": done.n_prompt + done.n_generated,
    }


class Shapes:
    """The JSON objects of one response (ids and timestamps shared by all its chunks)."""

    def __init__(self, request_id: str, model: str, chat: bool) -> None:
        self.chat, self.model = chat, model
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{request_id}"
        self.created = int(time.time())

    def _envelope(self, obj: str, choice: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [choice]}

    def complete(self, done: p.Done) -> dict[str, Any]:
        reason = FINISH.get(done.finish_reason, "stop")
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": done.text},
                "finish_reason": reason,
                "logprobs": None,
            }
            out = self._envelope("chat.completion", choice)
        else:
            out = self._envelope("text_completion", {"index": 0, "text": done.text, "finish_reason": reason, "logprobs": None})
        out["usage"] = usage(done)
        return out

    def chunk(self, text: str | None = None, finish: str | None = None, first: bool = False) -> dict[str, Any]:
        reason = FINISH.get(finish, "stop") if finish else None
        if self.chat:
            delta: dict[str, str] = {"role": "assistant", "content": ""} if first else {}
            if text is not None:
                delta["content"] = text
            return self._envelope(
                "chat.completion.chunk", {"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}
            )
        return self._envelope("text_completion", {"index": 0, "text": text or "", "finish_reason": reason, "logprobs": None})

    def usage_chunk(self, done: p.Done) -> dict[str, Any]:
        """stream_options.include_usage: a last chunk with no choices and the token counts."""
        out = self._envelope("chat.completion.chunk" if self.chat else "text_completion", {})
        out["choices"] = []
        out["usage"] = usage(done)
        return out
