"""A request's answer as the HTTP response's body: collected whole or streamed as server-sent events
(chat and text completions, with tool calls, and the Responses API), and what its events say for
the request log's usage. The routes (engine/serve/app.py) start the answer; these read it to its end
and close it, also when the client left or the stream was cancelled.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

from starlette.requests import Request

from engine import protocol as p
from engine.serve.bridge import Generation
from engine.serve.choices import Choices
from engine.serve.errors import ApiError
from engine.serve.request_log import entry_of
from engine.serve.responses import ResponseShapes
from engine.serve.schema import FINISH, ParsedRequest, Shapes
from engine.serve.tools import DeltaStream, message

# a tool request's answer text read by the model's chat template (partial: the answer may go on)
Parse = Callable[[str, bool], dict[str, Any]]


def sse(obj: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


async def collect(
    choices: Choices, req: ParsedRequest, chat: bool, model_id: str, log: Usage, parse: Parse | None
) -> dict[str, Any]:
    """A completion's n answers whole (OpenAI's response object); parse: a tool request's reader."""
    shapes = [Shapes(choices.request_id, model_id, chat, req.logprobs, i) for i in range(choices.n)]
    logprobs: list[list[p.TokenLogprob]] = [[] for _ in range(choices.n)]
    dones: dict[int, p.Done] = {}
    try:
        async for i, msg in choices.events():
            log.add(i, msg)
            if isinstance(msg, p.Token):
                logprobs[i] += msg.logprobs
            elif isinstance(msg, p.Done):
                dones[i] = msg
    finally:
        log.close()
        choices.close()
    if len(dones) != choices.n:
        raise ApiError(500, "the engine ended the answer without a result")
    out = []
    for i, done in sorted(dones.items()):
        answer = parse(done.text, done.finish_reason != "stop") if parse else None
        out.append(shapes[i].choice(done, logprobs[i], message(answer) if answer is not None else None))
    return shapes[0].response(out, [dones[i] for i in sorted(dones)], log.cached)


async def stream(choices: Choices, req: ParsedRequest, chat: bool, model_id: str, log: Usage) -> AsyncGenerator[bytes, None]:
    """A completion's n answers as server-sent chunks, then `data: [DONE]`."""
    try:
        shapes = [Shapes(choices.request_id, model_id, chat, req.logprobs, i) for i in range(choices.n)]
        if chat:
            for each in shapes:
                yield sse(each.chunk(first=True))
        dones: list[p.Done] = []
        async for i, msg in choices.events():
            log.add(i, msg)
            if isinstance(msg, p.Token) and (msg.text or msg.logprobs):
                yield sse(shapes[i].chunk(msg.text, logprobs=msg.logprobs if req.logprobs else None))
            elif isinstance(msg, p.Done):
                dones.append(msg)
                yield sse(shapes[i].chunk(finish=msg.finish_reason))
            elif isinstance(msg, p.PromptProgress) and req.return_progress and i == 0:  # the choices share the prompt
                yield sse(shapes[0].progress_chunk(msg))
        if req.include_usage and dones:
            yield sse(shapes[0].usage_chunk(dones, log.cached))
        yield b"data: [DONE]\n\n"
    except ApiError as exc:
        # the status line is long gone: OpenAI clients raise on an error event
        log.failed()
        yield sse(exc.body())
    finally:
        log.close()
        choices.close()


async def stream_tools(
    choices: Choices, req: ParsedRequest, model_id: str, log: Usage, parse: Parse
) -> AsyncGenerator[bytes, None]:
    """A chat answer with tools (n is 1), streamed: parsed as it grows (llama.cpp's partial parse),
    sent as OpenAI's content and tool_calls deltas."""
    try:
        shapes = Shapes(choices.request_id, model_id, True, req.logprobs)
        deltas = DeltaStream()
        # content null, not "": what OpenAI's first chunk says when the answer may be calls only
        yield sse(shapes.delta_chunk({"role": "assistant", "content": None}))
        text = ""
        async for _i, msg in choices.events():
            log.add(0, msg)
            if isinstance(msg, p.Token) and (msg.text or msg.logprobs):
                text += msg.text
                out = deltas.update(parse(text, True)) if msg.text else []
                lp = msg.logprobs if req.logprobs else None
                if lp and not out:  # the text so far may be held back (a call's opening): its logprobs are not
                    out = [{}]
                for i, delta in enumerate(out):  # logprobs ride on the first delta
                    yield sse(shapes.delta_chunk(delta, logprobs=lp if i == 0 else None))
            elif isinstance(msg, p.Done):
                final = msg.finish_reason == "stop"
                for delta in deltas.update(parse(msg.text, not final), final=True):
                    yield sse(shapes.delta_chunk(delta))
                reason = FINISH.get(msg.finish_reason, "stop")
                yield sse(shapes.delta_chunk({}, "tool_calls" if deltas.calls and reason == "stop" else reason))
                if req.include_usage:
                    yield sse(shapes.usage_chunk(msg, log.cached))
        yield b"data: [DONE]\n\n"
    except ApiError as exc:
        log.failed()
        yield sse(exc.body())
    finally:
        log.close()
        choices.close()


async def collect_response(generation: Generation, shapes: ResponseShapes, log: Usage) -> dict[str, Any]:
    """A /v1/responses answer whole: its Done as the Responses API's object."""
    try:
        async for msg in generation.events():
            log.add(0, msg)
            if isinstance(msg, p.Done):
                return shapes.complete(msg, log.cached)
    finally:
        log.close()
        generation.close()
    raise ApiError(500, "the engine ended the answer without a result")


async def stream_response(generation: Generation, shapes: ResponseShapes, log: Usage) -> AsyncGenerator[bytes, None]:
    """A /v1/responses answer as the Responses API's events."""
    try:
        for event in shapes.opening():
            yield event
        async for msg in generation.events():
            log.add(0, msg)
            if isinstance(msg, p.Token) and msg.text:
                yield shapes.delta(msg.text)
            elif isinstance(msg, p.Done):
                for event in shapes.closing(msg, log.cached):
                    yield event
    except ApiError as exc:
        # the status line is long gone: the Responses API's own error event
        log.failed()
        yield shapes.event("error", code=exc.code, message=exc.message, param=exc.param)
    finally:
        log.close()
        generation.close()


async def finish(events: AsyncGenerator[bytes, None], answer: Generation | Choices) -> None:
    await events.aclose()
    answer.close()


class Usage:
    """What a request's answer events say for its usage (cached prompt tokens) and its log entry."""

    def __init__(self, request: Request) -> None:
        self._entry = entry_of(request.scope)
        self._stats: dict[int, p.Stats] = {}
        self._dones: dict[int, p.Done] = {}
        self._finish = ""

    @property
    def cached(self) -> int:
        """The prompt's tokens reused from a kept cache: the first choice's (the prompt is counted once)."""
        stats = self._stats.get(0)
        return stats.n_prompt_cached if stats else 0

    def add(self, i: int, msg: p.Message) -> None:
        if isinstance(msg, p.Stats):
            self._stats[i] = msg
        elif isinstance(msg, p.Done):
            self._dones[i] = msg

    def failed(self) -> None:
        self._finish = "error"

    def close(self) -> None:
        """The entry's tokens, speed and finish (the middleware writes it once the response ended)."""
        entry = self._entry
        if entry is None:
            return
        dones = [self._dones[i] for i in sorted(self._dones)]
        speeds = [s.decode_tok_s for s in self._stats.values() if s.decode_tok_s > 0]
        prompt = dones[0].n_prompt if dones else next((s.n_prompt for s in self._stats.values()), 0)
        entry.usage(prompt, sum(d.n_generated for d in dones), self.cached, sum(speeds) / len(speeds) if speeds else 0.0)
        if self._finish:
            entry.finish = self._finish
        elif dones:
            entry.finish = FINISH.get(dones[0].finish_reason, "stop") if dones[0].finish_reason != "cancelled" else "cancelled"
        else:
            entry.finish = "cancelled"
