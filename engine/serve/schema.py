"""OpenAI request bodies -> our protocol's Generate fields, and our events -> OpenAI response shapes.

Sampling: fields a request leaves out keep the engine's defaults (temperature 0.7, top_k 40, min_p
0.05, repeat_penalty 1.1: what the app's Balanced preset uses); temperature 0 is greedy, as in the
OpenAI API. top_k, min_p and repeat_penalty are accepted as extensions (as llama.cpp's server does).

Anything malformed is a 400 here, never a failure further on: every text that goes to the engine is
checked to be encodable (a lone UTF-16 surrogate is valid JSON but not UTF-8).
"""

from __future__ import annotations

import codecs
import math
import time
from dataclasses import dataclass, field
from typing import Any

from engine import protocol as p
from engine.serve.errors import ApiError
from engine.serve.structured import grammar_for
from engine.serve.tools import ToolRequest, parse_tool_request, uses_tools

MAX_BODY_BYTES = 1 << 20
MAX_MESSAGES = 1024
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# finish reasons OpenAI clients know; a full context ends the answer like a length limit
FINISH = {"stop": "stop", "length": "length", "context_full": "length", "cancelled": "stop"}
# parameters we cannot honour: refused rather than silently ignored
UNSUPPORTED = ("functions", "function_call", "echo", "suffix")  # functions: the deprecated form of tools
COMPLETION_LOGPROBS_MAX = 5  # /v1/completions' logprobs: the most alternatives per token, as OpenAI's legacy API
MODE_HEADER = "x-specee-mode"  # a request with a grammar or logprobs says it ran in the vanilla decoder
# OpenAI parameters that mean nothing for one local model: accepted and ignored (docs/server.md).
# Other fields a request carries are ignored as well, as OpenAI-compatible servers commonly do.
IGNORED = ("store", "service_tier", "metadata", "user", "prediction")
# `truncation`, as OpenAI's Responses API names it: "disabled" (the default) refuses a conversation
# longer than the context with context_length_exceeded; "auto" lets the engine leave old turns out
TRUNCATION = {"disabled": p.Overflow.REFUSE, "auto": p.Overflow.TRIM}
TRUNCATED_HEADER = "x-specee-truncated"  # a request with truncation "auto" was trimmed: what was left out
# `n`: answers per request, at most this many (each one a whole decode: more is a mistake, not a wish)
MAX_CHOICES = 16


@dataclass
class ParsedRequest:
    model: str
    sampling: p.Sampling
    stream: bool = False
    include_usage: bool = False
    messages: list[dict[str, str]] = field(default_factory=list)
    prompt: str = ""  # /v1/completions: the raw prompt
    continue_answer: bool = False  # chat ending with an assistant message: continue that answer
    on_overflow: p.Overflow = p.Overflow.REFUSE
    grammar: str = ""  # response_format's grammar (GBNF)
    grammar_for: str = ""  # ... what it enforces ("json_object", "json_schema NAME"), for the log
    logprobs: bool = False
    top_logprobs: int = 0
    tools: ToolRequest | None = None  # tools offered, or calls and results in the history (engine.serve.tools)
    n: int = 1  # answers (choices) wanted: decoded together where the worker batches, else one after another
    # llama-server's return_progress: a streamed request gets a chunk with prompt_progress (total, cache,
    # processed, time_ms) while a long prompt is read (the worker says so after each batch of it)
    return_progress: bool = False

    @property
    def vanilla_because(self) -> str:
        """Why the vanilla decoder answers (Generate.needs_vanilla), for the mode header; "" = it need not."""
        return ", ".join(why for why, on in (("grammar", self.grammar), ("logprobs", self.logprobs)) if on)


def _number(body: dict[str, Any], name: str, integer: bool = False) -> float | int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise ApiError(400, f"{name} must be {'an integer' if integer else 'a number'}, got {_shown(value)}", param=name)
    if not integer and not _finite(value):
        raise ApiError(400, f"{name} must be finite, got {_shown(value)}", param=name)
    return value


def _finite(value: float | int) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        return False


def _shown(value: Any) -> str:
    """A value for an error message: short, whatever the client sent."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _text(value: str, param: str) -> str:
    """A text that can go to the engine: UTF-8 encodable (no lone surrogates, e.g. "\\ud800")."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError(400, f"{param} is not valid Unicode text ({exc.reason} at character {exc.start})", param=param) from None
    return value


def _logit_bias(body: dict[str, Any]) -> dict[str, float]:
    """OpenAI's logit_bias: {"token id": bias -100..100}; the worker checks the ids against the vocabulary."""
    value = body.get("logit_bias")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ApiError(400, "logit_bias must be an object mapping token ids to biases", param="logit_bias")
    out = {}
    for token, bias in value.items():
        if not (token.isascii() and token.isdigit() and len(token) <= 9):
            raise ApiError(400, f"logit_bias keys must be token ids (integers), got {_shown(token)}", param="logit_bias")
        if isinstance(bias, bool) or not isinstance(bias, int | float) or not _finite(bias) or not -100 <= bias <= 100:
            raise ApiError(400, f"logit_bias values must be numbers from -100 to 100, got {_shown(bias)}", param="logit_bias")
        out[str(int(token))] = float(bias)
    return out


def sampling_from(body: dict[str, Any], n_ctx: int) -> p.Sampling:
    temperature = _number(body, "temperature")
    s = p.Sampling.greedy() if temperature == 0 else p.Sampling()
    s.seed = -1
    if temperature is not None:
        s.temperature = float(temperature)
    for name in ("top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"):
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
    if max_tokens is None:  # llama.cpp's server's name; -1 there means "until the context is full"
        n_predict = _number(body, "n_predict", integer=True)
        max_tokens = None if n_predict == -1 else n_predict
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
        s.stop = [_text(x, "stop") for x in stop if x]
    s.logit_bias = _logit_bias(body)
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
    if n is not None and not 1 <= n <= MAX_CHOICES:
        raise ApiError(400, f"n must be 1..{MAX_CHOICES} (answers to this request), got {n}", param="n")
    # one model is served: a request that names none gets it (as llama-server and vLLM do); one that
    # names another is told which model this is rather than answered by a model it did not ask for
    model = body.get("model")
    model = served_model if model is None or model == "" else model
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
    truncation = body.get("truncation", "disabled")
    if not isinstance(truncation, str) or truncation not in TRUNCATION:
        raise ApiError(400, "truncation must be 'disabled' (the default) or 'auto'", param="truncation")
    progress = body.get("return_progress", False)
    if not isinstance(progress, bool):
        raise ApiError(400, "return_progress must be true or false", param="return_progress")
    req = ParsedRequest(model, sampling_from(body, n_ctx), stream, bool(options.get("include_usage")))
    req.on_overflow = TRUNCATION[truncation]
    req.n = int(n or 1)
    req.return_progress = progress
    return req


def _chat_logprobs(body: dict[str, Any], req: ParsedRequest) -> None:
    """Chat's logprobs (true/false) and top_logprobs (0..20, with logprobs true), as OpenAI takes them."""
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise ApiError(400, f"logprobs must be true or false, got {_shown(logprobs)}", param="logprobs")
    top = _number(body, "top_logprobs", integer=True)
    if top is not None:
        if not 0 <= top <= p.TOP_LOGPROBS_MAX:
            raise ApiError(400, f"top_logprobs must be 0..{p.TOP_LOGPROBS_MAX}, got {top}", param="top_logprobs")
        if top and not logprobs:
            raise ApiError(400, "top_logprobs needs logprobs set to true", param="top_logprobs")
    req.logprobs, req.top_logprobs = bool(logprobs), int(top or 0)


def _completion_logprobs(body: dict[str, Any], req: ParsedRequest) -> None:
    """/v1/completions' logprobs: the number of alternatives per token (0..5); null or absent = none."""
    logprobs = body.get("logprobs")
    if logprobs is None:
        return
    if isinstance(logprobs, bool) or not isinstance(logprobs, int) or not 0 <= logprobs <= COMPLETION_LOGPROBS_MAX:
        raise ApiError(
            400, f"logprobs must be an integer 0..{COMPLETION_LOGPROBS_MAX} here, got {_shown(logprobs)}", param="logprobs"
        )
    req.logprobs, req.top_logprobs = True, logprobs


def content_text(content: Any, where: str, part_types: tuple[str, ...] = ("text",)) -> str:
    """A message's content as text: a string, or a list of text parts (of these types) joined; this
    engine reads no images, audio or files."""
    param = f"{where}.content"
    if isinstance(content, str):
        return _text(content, param)
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        if all(part.get("type") in part_types and isinstance(part.get("text"), str) for part in content):
            return _text("".join(part["text"] for part in content), param)
        raise ApiError(400, f"{where}: only text content parts are supported (no images, audio or files here)", param=param)
    raise ApiError(400, f"{param} must be a string or a list of {part_types[0]} parts", param=param)


def _content(message: dict[str, Any], i: int) -> str:
    return content_text(message.get("content"), f"messages[{i}]")


def _structured(body: dict[str, Any], req: ParsedRequest) -> None:
    """The answer's grammar: OpenAI's response_format, or llama.cpp's server's own `grammar` (GBNF,
    checked by the engine: a bad one is a 400) and top-level `json_schema`; one of them at most."""
    given = [k for k in ("response_format", "grammar", "json_schema") if body.get(k) is not None]
    if len(given) > 1:
        raise ApiError(400, f"{' and '.join(given)}: give one of them, not both", param=given[1])
    if "grammar" in given:
        if not isinstance(body["grammar"], str) or not body["grammar"].strip():
            raise ApiError(400, "grammar must be a non-empty GBNF string", param="grammar")
        req.grammar, req.grammar_for = _text(body["grammar"], "grammar"), "grammar"
    elif "json_schema" in given:
        req.grammar, req.grammar_for = grammar_for({"type": "json_schema", "json_schema": {"schema": body["json_schema"]}})
    elif given:
        req.grammar, req.grammar_for = grammar_for(body["response_format"])


def parse_chat(body: Any, served_model: str, n_ctx: int) -> ParsedRequest:
    req = _common(body, served_model, n_ctx)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    if len(raw) > MAX_MESSAGES:
        raise ApiError(400, f"at most {MAX_MESSAGES} messages per request, got {len(raw)}", param="messages")
    if uses_tools(body):
        return _tool_chat(body, req)
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in ROLES:
            raise ApiError(400, f"messages[{i}].role must be one of {', '.join(ROLES)}", param=f"messages[{i}].role")
        req.messages.append({"role": ROLES[m["role"]], "content": _content(m, i)})
    turns = [m["role"] for m in req.messages if m["role"] != "system"]
    # an assistant message last is a prefix of the answer to continue (after the user's question)
    req.continue_answer = turns[-2:] == ["user", "assistant"]
    if not turns or (turns[-1] != "user" and not req.continue_answer):
        raise ApiError(400, "the last message must be the user's (or the start of an answer after it)", param="messages")
    _chat_logprobs(body, req)
    _structured(body, req)
    if req.grammar and req.continue_answer:
        raise ApiError(
            400, "a grammar applies to a whole answer; it cannot continue one (the last message is the assistant's)",
            param=next(k for k in ("response_format", "grammar", "json_schema") if body.get(k) is not None),
        )  # fmt: skip
    return req


def _tool_chat(body: dict[str, Any], req: ParsedRequest) -> ParsedRequest:
    """A chat with tools: the messages go to llama.cpp's template as OpenAI sent them (checked)."""
    req.tools = parse_tool_request(body)
    if req.n > 1:
        raise ApiError(400, "n > 1 is not supported with tools or tool calls here; ask n times", param="n",
                       code="unsupported_parameter")  # fmt: skip
    req.continue_answer = req.tools.continue_answer
    _chat_logprobs(body, req)
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise ApiError(400, "response_format cannot be combined with tools or tool calls here", param="response_format")
    for name in ("grammar", "json_schema"):  # llama.cpp's own: the tool-call grammar is the answer's
        if body.get(name) is not None:
            raise ApiError(400, f"{name} cannot be combined with tools or tool calls here", param=name)
    if req.on_overflow == p.Overflow.TRIM:  # a conversation with calls and results is not cut
        raise ApiError(400, "truncation 'auto' is not supported with tools", param="truncation")
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
    if req.on_overflow == p.Overflow.TRIM:  # a raw prompt's important part is the client's to say
        raise ApiError(400, "truncation 'auto' is for chat completions; a prompt is never cut", param="truncation")
    _text(prompt, "prompt")
    best_of = _number(body, "best_of", integer=True)
    if best_of not in (None, 1):
        raise ApiError(400, "only best_of=1 is supported", param="best_of", code="unsupported_parameter")
    _structured(body, req)  # OpenAI's legacy completions take none of these; llama.cpp's server does
    _completion_logprobs(body, req)
    req.prompt = prompt
    return req


# -- responses -----------------------------------------------------------------------------------


def usage(done: p.Done | list[p.Done], cached: int = 0) -> dict[str, Any]:
    """OpenAI's usage of one answer or of n answers to one prompt: the prompt counted once, the answers'
    tokens together; cached: the prompt's tokens reused from a kept KV cache (the first answer's)."""
    dones = done if isinstance(done, list) else [done]
    n_prompt, n_generated = dones[0].n_prompt, sum(d.n_generated for d in dones)
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": n_generated,
        "total_tokens": n_prompt + n_generated,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _token_text(piece: list[int]) -> str:
    """A token's text; a piece that is part of a UTF-8 character shows its bytes as \\xNN (`bytes` has them)."""
    return bytes(piece).decode("utf-8", errors="backslashreplace")


class Shapes:
    """The JSON objects of one response (ids and timestamps shared by all its chunks)."""

    def __init__(self, request_id: str, model: str, chat: bool, logprobs: bool = False, index: int = 0) -> None:
        """index: the choice these shapes are of (a request with n > 1 has one Shapes per choice)."""
        self.chat, self.model, self.logprobs, self.index = chat, model, logprobs, index
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{request_id}"
        self.created = int(time.time())
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._offset = 0  # completions' text_offset: characters of the answer before the next token

    def _logprobs(self, entries: list[p.TokenLogprob]) -> dict[str, Any] | None:
        """OpenAI's logprobs object for these tokens (None when the request asked for none)."""
        if not self.logprobs:
            return None
        if self.chat:
            content = [
                {
                    "token": _token_text(e.piece),
                    "logprob": e.logprob,
                    "bytes": e.piece,
                    "top_logprobs": [{"token": _token_text(t.piece), "logprob": t.logprob, "bytes": t.piece} for t in e.top],
                }
                for e in entries
            ]
            return {"content": content, "refusal": None}
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for e in entries:
            out["tokens"].append(_token_text(e.piece))
            out["token_logprobs"].append(e.logprob)
            top = {_token_text(t.piece): t.logprob for t in e.top}
            if e.top:  # the sampled token is always given, so there may be logprobs + 1 (as OpenAI says)
                top.setdefault(_token_text(e.piece), e.logprob)
            out["top_logprobs"].append(top)
            out["text_offset"].append(self._offset)
            self._offset += len(self._utf8.decode(bytes(e.piece)))
        return out

    def _envelope(self, obj: str, *choices: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": list(choices)}

    def choice(
        self, done: p.Done, logprobs: list[p.TokenLogprob] | None = None, message: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """This choice of a whole response; `message`: the chat answer as parsed (tool calls), else its text."""
        reason = FINISH.get(done.finish_reason, "stop")
        lp = self._logprobs(logprobs or [])
        if self.chat:
            if message and message.get("tool_calls") and reason == "stop":
                reason = "tool_calls"
            return {
                "index": self.index,
                "message": message or {"role": "assistant", "content": done.text},
                "finish_reason": reason,
                "logprobs": lp,
            }
        return {"index": self.index, "text": done.text, "finish_reason": reason, "logprobs": lp}

    def complete(
        self,
        done: p.Done,
        logprobs: list[p.TokenLogprob] | None = None,
        message: dict[str, Any] | None = None,
        cached: int = 0,
    ) -> dict[str, Any]:
        """The whole response of one answer."""
        return self.response([self.choice(done, logprobs, message)], [done], cached)

    def response(self, choices: list[dict[str, Any]], dones: list[p.Done], cached: int = 0) -> dict[str, Any]:
        """The whole response with these choices (Shapes.choice of each), in index order."""
        out = self._envelope("chat.completion" if self.chat else "text_completion", *choices)
        out["usage"] = usage(dones, cached)
        return out

    def chunk(
        self,
        text: str | None = None,
        finish: str | None = None,
        first: bool = False,
        logprobs: list[p.TokenLogprob] | None = None,
    ) -> dict[str, Any]:
        reason = FINISH.get(finish, "stop") if finish else None
        lp = self._logprobs(logprobs) if logprobs is not None else None
        if self.chat:
            delta: dict[str, str] = {"role": "assistant", "content": ""} if first else {}
            if text is not None:
                delta["content"] = text
            choice = {"index": self.index, "delta": delta, "finish_reason": reason, "logprobs": lp}
            return self._envelope("chat.completion.chunk", choice)
        choice = {"index": self.index, "text": text or "", "finish_reason": reason, "logprobs": lp}
        return self._envelope("text_completion", choice)

    def delta_chunk(
        self, delta: dict[str, Any], finish: str | None = None, logprobs: list[p.TokenLogprob] | None = None
    ) -> dict[str, Any]:
        """A chat chunk with this delta (content, tool_calls) as it is; finish is OpenAI's reason."""
        lp = self._logprobs(logprobs) if logprobs is not None else None
        choice = {"index": self.index, "delta": delta, "finish_reason": finish, "logprobs": lp}
        return self._envelope("chat.completion.chunk", choice)

    def progress_chunk(self, msg: p.PromptProgress) -> dict[str, Any]:
        """return_progress: a chunk with no choices and how far the prompt is read, as llama-server
        words it (processed counts the cached tokens too)."""
        out = self._envelope("chat.completion.chunk" if self.chat else "text_completion")
        out["prompt_progress"] = {"total": msg.n_prompt, "cache": msg.n_cached, "processed": msg.n_done, "time_ms": msg.t_ms}
        return out

    def usage_chunk(self, done: p.Done | list[p.Done], cached: int = 0) -> dict[str, Any]:
        """stream_options.include_usage: a last chunk with no choices and the token counts."""
        out = self._envelope("chat.completion.chunk" if self.chat else "text_completion")
        out["usage"] = usage(done, cached)
        return out
