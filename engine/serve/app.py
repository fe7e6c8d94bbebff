"""The Starlette app: /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, /v1/models[/{id}],
/health and /log/requests.

Every request waits for its turn and the worker's first event before its response starts, so a
refusal (a chat longer than the context, a full queue) has its own status, streamed or not; a client
that leaves meanwhile is noticed (`_while_connected`). Streaming answers are then server-sent events
(`data: {chunk}` ... `data: [DONE]`); Starlette's StreamingResponse watches for the client leaving
and cancels the stream, whose cleanup then cancels the answer on the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine import protocol as p
from engine.serve.bridge import EngineBridge, Generation
from engine.serve.choices import Choices
from engine.serve.embeddings import embeddings_response, parse_embeddings
from engine.serve.errors import ApiError
from engine.serve.request_log import RequestLog, RequestLogger, entry_of
from engine.serve.responses import ResponseShapes, parse_responses
from engine.serve.schema import (
    FINISH,
    MAX_BODY_BYTES,
    MODE_HEADER,
    TRUNCATED_HEADER,
    ParsedRequest,
    Shapes,
    parse_chat,
    parse_completion,
)
from engine.serve.security import Cors, Guard
from engine.serve.tools import DeltaStream, message

if TYPE_CHECKING:
    from engine.llm.tool_calls import ChatTemplates, ToolPrompt

T = TypeVar("T")


async def read_json(request: Request, limit: int = MAX_BODY_BYTES) -> Any:
    too_big = ApiError(413, f"the request body is larger than {limit // 1024} KiB", code="request_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    body, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        body.append(chunk)
    try:
        return json.loads(b"".join(body))
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply", code="invalid_json") from None
    except ValueError as exc:  # not JSON, not UTF-8, or an integer too long for Python to read
        raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None


async def _until_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _while_connected(request: Request, work: Awaitable[T]) -> T | None:
    """Run `work`; cancel it (None) when the client disconnects first, queued or mid-answer."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_until_disconnect(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        watch.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None


def _sse(obj: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


class Routes:
    def __init__(self, bridge: EngineBridge, model_id: str, guard: Guard, log: RequestLog | None = None) -> None:
        self.bridge, self.model_id, self.guard = bridge, model_id, guard
        self.log = log or RequestLog()
        self._templates: ChatTemplates | None = None  # the model's chat templates, read on the first tool request

    def _n_ctx(self) -> int:
        loaded = self.bridge.loaded
        return loaded.n_ctx if loaded else self.bridge.placement.n_ctx

    def _generate(self, req: ParsedRequest, tool_prompt: ToolPrompt | None = None) -> p.Generate:
        generate = p.Generate(
            messages=req.messages,
            sampling=req.sampling,
            continue_answer=req.continue_answer,
            prompt=req.prompt,
            on_overflow=req.on_overflow,
            grammar=req.grammar,
            logprobs=req.logprobs,
            top_logprobs=req.top_logprobs,
            stream=req.stream,
        )
        if tool_prompt is not None:  # rendered here by llama.cpp's template: a raw prompt for the engine
            t = tool_prompt
            generate.prompt, generate.messages, generate.continue_answer = t.prompt, [], False
            generate.grammar, generate.grammar_lazy, generate.grammar_prefill = t.grammar, t.grammar_lazy, t.grammar_prefill
            generate.grammar_trigger_patterns, generate.grammar_trigger_tokens = t.trigger_patterns, t.trigger_tokens
            generate.preserved_tokens = t.preserved_tokens
            generate.sampling.stop = [*generate.sampling.stop, *t.additional_stops]
        return generate

    def _tool_prompt(self, req: ParsedRequest) -> ToolPrompt:
        """The request's prompt and grammar from the model's own chat template (llama.cpp's common/chat)."""
        from engine.llm.tool_calls import ChatTemplates, ToolTemplateError

        assert req.tools is not None
        if self._templates is None:
            try:
                self._templates = ChatTemplates(self.bridge.model_path)
            except ToolTemplateError as exc:
                raise ApiError(400, f"tools cannot be used with {self.model_id}: {exc}", param="tools") from None
        if not self._templates.supports_tools:
            raise ApiError(
                400,
                f"{self.model_id} does not support tools: its chat template has no tool calls. Serve a model whose"
                " template has them (Qwen2.5 / Qwen2.5-Coder, Llama 3.1+, Hermes, Mistral) for tools and tool results.",
                param="tools" if req.tools.tools else "messages",
                code="unsupported_parameter",
            )
        t = req.tools
        try:
            return self._templates.apply(t.messages, t.tools, t.tool_choice, t.parallel_tool_calls, t.continue_answer)
        except ToolTemplateError as exc:  # e.g. the template itself raised on this conversation
            raise ApiError(400, f"the model's chat template cannot render this request: {exc}", param="messages") from None

    def _model_entry(self) -> dict[str, Any]:
        created = int(self.bridge.model_path.stat().st_mtime) if self.bridge.model_path.exists() else 0
        return {"id": self.model_id, "object": "model", "created": created, "owned_by": "specee"}

    async def health(self, request: Request) -> Response:
        self.guard.check(request, need_key=False)
        b = self.bridge
        body = {
            "status": b.state,
            "model": self.model_id,
            "mode": b.mode,
            "requested_mode": b.requested_mode,
            "busy": b.busy,
            "in_flight": b.in_flight,
            "parallel": b.capacity,
            "queued": b.queued,
            "cancelled": b.cancelled,
            "restarts": b.restarts,
            "worker_pid": b.worker_pid,
        }
        if b.error:
            body["error"] = b.error
        return JSONResponse(body, status_code=200 if b.state == "ok" else 503)

    async def requests(self, request: Request) -> Response:
        """GET /log/requests: the latest requests this server answered (engine.serve.request_log), oldest first."""
        self.guard.check(request)
        return JSONResponse({"object": "list", "data": self.log.recent()})

    async def models(self, request: Request) -> Response:
        self.guard.check(request)
        return JSONResponse({"object": "list", "data": [self._model_entry()]})

    async def model(self, request: Request) -> Response:
        self.guard.check(request)
        asked = request.path_params["model_id"]
        if asked != self.model_id:
            raise ApiError(
                404, f"model {asked!r} is not served here; this server serves {self.model_id!r}", "model", "model_not_found"
            )
        return JSONResponse(self._model_entry())

    async def chat(self, request: Request) -> Response:
        return await self._answer(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._answer(request, chat=False)

    async def _answer(self, request: Request, chat: bool) -> Response:
        self.guard.check(request)
        body = await read_json(request)
        req = (parse_chat if chat else parse_completion)(body, self.model_id, self._n_ctx())
        tool_prompt = self._tool_prompt(req) if req.tools else None
        if tool_prompt is not None and tool_prompt.grammar:
            req.grammar, req.grammar_for = tool_prompt.grammar, "tool calls"
        self.bridge.check_accepting()
        # the turn and the worker's first event are awaited while the client is watched (one that
        # leaves is dropped from the queue); a refusal then gets its own status, streamed or not
        overflow_param = "prompt" if req.prompt else "messages"
        generate = self._generate(req, tool_prompt)
        generation = await _while_connected(request, self._start(generate, overflow_param))
        if generation is None:
            return Response(status_code=499)
        headers = self._headers(generation, req)

        async def start(later: p.Generate) -> Generation:  # choices after the first (n > 1)
            return await self._start(later, overflow_param)

        choices = Choices(generation, generate, req.n, start)
        log = _Usage(request)
        if req.stream:
            events = self._stream_tools(choices, req, tool_prompt, log) if tool_prompt else self._stream(choices, req, chat, log)
            return StreamingResponse(
                events,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
                # runs also after a disconnect; a stream cancelled while sending (or never started) is
                # closed here, its answer cancelled, rather than whenever it is garbage-collected
                background=BackgroundTask(_finish, events, choices),
            )
        result = await _while_connected(request, self._collect(choices, req, chat, tool_prompt, log))
        return JSONResponse(result, headers=headers) if result is not None else Response(status_code=499)

    def _headers(self, generation: Generation, req: ParsedRequest) -> dict[str, str]:
        headers = _notice_headers(generation)
        if req.vanilla_because:
            # the accelerated modes verify drafts without a grammar and keep no logits: the worker ran vanilla
            headers[MODE_HEADER] = f"vanilla ({req.vanilla_because})"
            if self.bridge.mode != "vanilla":
                what = f"{req.grammar_for} grammar, logprobs" if req.logprobs and req.grammar else req.grammar_for or "logprobs"
                self.bridge.log(
                    f"request {generation.request_id}: {what}: answered by the vanilla decoder (mode {self.bridge.mode})"
                )
        return headers

    async def responses(self, request: Request) -> Response:
        """POST /v1/responses: text in, one message out (engine.serve.responses)."""
        self.guard.check(request)
        body = await read_json(request)
        req = parse_responses(body, self.model_id, self._n_ctx())
        self.bridge.check_accepting()
        generation = await _while_connected(request, self._start(self._generate(req, None), "input"))
        if generation is None:
            return Response(status_code=499)
        headers = self._headers(generation, req)
        shapes = ResponseShapes(generation.request_id, self.model_id, req)
        if req.stream:
            events = self._stream_response(generation, shapes, _Usage(request))
            return StreamingResponse(
                events,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
                background=BackgroundTask(_finish, events, generation),
            )
        result = await _while_connected(request, self._collect_response(generation, shapes, _Usage(request)))
        return JSONResponse(result, headers=headers) if result is not None else Response(status_code=499)

    async def _collect_response(self, generation: Generation, shapes: ResponseShapes, log: _Usage) -> dict[str, Any]:
        try:
            async for msg in generation.events():
                log.add(0, msg)
                if isinstance(msg, p.Done):
                    return shapes.complete(msg, log.cached)
        finally:
            log.close()
            generation.close()
        raise ApiError(500, "the engine ended the answer without a result")

    async def _stream_response(self, generation: Generation, shapes: ResponseShapes, log: _Usage) -> AsyncGenerator[bytes, None]:
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

    async def embeddings(self, request: Request) -> Response:
        """POST /v1/embeddings: vectors from the loaded model (engine.serve.embeddings)."""
        self.guard.check(request)
        req = parse_embeddings(await read_json(request), self.model_id)
        try:
            out = await _while_connected(request, self.bridge.embed(req.embed()))
        except ApiError as exc:
            if exc.status == 400:
                exc.param = "input"
            raise
        if out is None:
            return Response(status_code=499)
        if (entry := entry_of(request.scope)) is not None:
            entry.usage(sum(out.n_tokens), 0, 0, 0.0)
            entry.finish = "stop"
        return JSONResponse(embeddings_response(out, req, self.model_id))

    async def _start(self, generate: p.Generate, overflow_param: str) -> Generation:
        generation = await self.bridge.submit(generate)
        try:
            await generation.first()
        except ApiError as exc:
            if exc.code == "context_length_exceeded":  # which part is too long, as OpenAI says it
                exc.param = overflow_param
            raise
        finally:
            if generation.peeked is None:
                generation.close()
        return generation

    async def _collect(
        self, choices: Choices, req: ParsedRequest, chat: bool, tool_prompt: ToolPrompt | None, log: _Usage
    ) -> dict[str, Any]:
        shapes = [Shapes(choices.request_id, self.model_id, chat, req.logprobs, i) for i in range(choices.n)]
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
            answer = self._parsed(done.text, tool_prompt, partial=done.finish_reason != "stop") if tool_prompt else None
            out.append(shapes[i].choice(done, logprobs[i], message(answer) if answer is not None else None))
        return shapes[0].response(out, [dones[i] for i in sorted(dones)], log.cached)

    async def _stream(self, choices: Choices, req: ParsedRequest, chat: bool, log: _Usage) -> AsyncGenerator[bytes, None]:
        try:
            shapes = [Shapes(choices.request_id, self.model_id, chat, req.logprobs, i) for i in range(choices.n)]
            if chat:
                for each in shapes:
                    yield _sse(each.chunk(first=True))
            dones: list[p.Done] = []
            async for i, msg in choices.events():
                log.add(i, msg)
                if isinstance(msg, p.Token) and (msg.text or msg.logprobs):
                    yield _sse(shapes[i].chunk(msg.text, logprobs=msg.logprobs if req.logprobs else None))
                elif isinstance(msg, p.Done):
                    dones.append(msg)
                    yield _sse(shapes[i].chunk(finish=msg.finish_reason))
                elif isinstance(msg, p.PromptProgress) and req.return_progress and i == 0:  # the choices share the prompt
                    yield _sse(shapes[0].progress_chunk(msg))
            if req.include_usage and dones:
                yield _sse(shapes[0].usage_chunk(dones, log.cached))
            yield b"data: [DONE]\n\n"
        except ApiError as exc:
            # the status line is long gone: OpenAI clients raise on an error event
            log.failed()
            yield _sse(exc.body())
        finally:
            log.close()
            choices.close()

    def _parsed(self, text: str, tool_prompt: ToolPrompt, partial: bool) -> dict[str, Any]:
        """The answer read by the template's parser; a text it cannot read is content."""
        from engine.llm.tool_calls import ToolTemplateError

        assert self._templates is not None
        try:
            return self._templates.parse(text, tool_prompt, partial)
        except ToolTemplateError as exc:
            self.bridge.log(f"the answer could not be parsed for tool calls ({exc}); sent as content")
            return {"role": "assistant", "content": text}

    async def _stream_tools(
        self, choices: Choices, req: ParsedRequest, tool_prompt: ToolPrompt, log: _Usage
    ) -> AsyncGenerator[bytes, None]:
        """A chat answer with tools (n is 1), streamed: parsed as it grows (llama.cpp's partial parse),
        sent as OpenAI's content and tool_calls deltas."""
        try:
            shapes = Shapes(choices.request_id, self.model_id, True, req.logprobs)
            deltas = DeltaStream()
            # content null, not "": what OpenAI's first chunk says when the answer may be calls only
            yield _sse(shapes.delta_chunk({"role": "assistant", "content": None}))
            text = ""
            async for _i, msg in choices.events():
                log.add(0, msg)
                if isinstance(msg, p.Token) and (msg.text or msg.logprobs):
                    text += msg.text
                    out = deltas.update(self._parsed(text, tool_prompt, partial=True)) if msg.text else []
                    lp = msg.logprobs if req.logprobs else None
                    if lp and not out:  # the text so far may be held back (a call's opening): its logprobs are not
                        out = [{}]
                    for i, delta in enumerate(out):  # logprobs ride on the first delta
                        yield _sse(shapes.delta_chunk(delta, logprobs=lp if i == 0 else None))
                elif isinstance(msg, p.Done):
                    final = msg.finish_reason == "stop"
                    for delta in deltas.update(self._parsed(msg.text, tool_prompt, partial=not final), final=True):
                        yield _sse(shapes.delta_chunk(delta))
                    reason = FINISH.get(msg.finish_reason, "stop")
                    yield _sse(shapes.delta_chunk({}, "tool_calls" if deltas.calls and reason == "stop" else reason))
                    if req.include_usage:
                        yield _sse(shapes.usage_chunk(msg, log.cached))
            yield b"data: [DONE]\n\n"
        except ApiError as exc:
            log.failed()
            yield _sse(exc.body())
        finally:
            log.close()
            choices.close()


def _notice_headers(generation: Generation) -> dict[str, str]:
    """The worker trims (truncation "auto") before the first token: its Notice is the first event."""
    first = generation.peeked
    if isinstance(first, p.Notice) and first.kind == "context_trimmed":
        return {TRUNCATED_HEADER: first.message.encode("ascii", "replace").decode()}
    return {}


async def _finish(events: AsyncGenerator[bytes, None], answer: Generation | Choices) -> None:
    await events.aclose()
    answer.close()


class _Usage:
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


async def _api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return ApiError(exc.status_code, exc.detail, code="not_found" if exc.status_code == 404 else None).response()


def create_app(
    bridge: EngineBridge,
    model_id: str,
    api_key: str | None = None,
    local_only: bool = True,
    allow_origins: Iterable[str] = (),
    request_log: RequestLog | None = None,
) -> Starlette:
    """request_log: where requests are logged (default: memory only)."""
    guard = Guard(api_key, local_only, allow_origins)
    log = request_log or RequestLog()
    routes = Routes(bridge, model_id, guard, log)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await bridge.start()
        try:
            yield
        finally:
            await bridge.close()

    return Starlette(
        routes=[
            Route("/health", routes.health, methods=["GET"]),
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/v1/models/{model_id:path}", routes.model, methods=["GET"]),
            Route("/v1/chat/completions", routes.chat, methods=["POST"]),
            Route("/v1/completions", routes.completions, methods=["POST"]),
            Route("/v1/responses", routes.responses, methods=["POST"]),
            Route("/v1/embeddings", routes.embeddings, methods=["POST"]),
            Route("/log/requests", routes.requests, methods=["GET"]),
        ],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
        middleware=[Middleware(RequestLogger, log=log, model=model_id), Middleware(Cors, guard=guard)],
        lifespan=lifespan,
    )
