"""The Starlette app: /v1/chat/completions, /v1/completions, /v1/models[/{id}], /health.

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
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine import protocol as p
from engine.serve.bridge import EngineBridge, Generation
from engine.serve.errors import ApiError
from engine.serve.schema import (
    MAX_BODY_BYTES,
    MODE_HEADER,
    TRUNCATED_HEADER,
    ParsedRequest,
    Shapes,
    parse_chat,
    parse_completion,
)
from engine.serve.security import Cors, Guard

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
    def __init__(self, bridge: EngineBridge, model_id: str, guard: Guard) -> None:
        self.bridge, self.model_id, self.guard = bridge, model_id, guard

    def _n_ctx(self) -> int:
        loaded = self.bridge.loaded
        return loaded.n_ctx if loaded else self.bridge.placement.n_ctx

    def _generate(self, req: ParsedRequest) -> p.Generate:
        return p.Generate(
            messages=req.messages,
            sampling=req.sampling,
            continue_answer=req.continue_answer,
            prompt=req.prompt,
            on_overflow=req.on_overflow,
            grammar=req.grammar,
            logprobs=req.logprobs,
            top_logprobs=req.top_logprobs,
        )

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
        self.bridge.check_accepting()
        # the turn and the worker's first event are awaited while the client is watched (one that
        # leaves is dropped from the queue); a refusal then gets its own status, streamed or not
        generation = await _while_connected(request, self._start(self._generate(req)))
        if generation is None:
            return Response(status_code=499)
        headers = _notice_headers(generation)
        if req.vanilla_because:
            # the accelerated modes verify drafts without a grammar and keep no logits: the worker ran vanilla
            headers[MODE_HEADER] = f"vanilla ({req.vanilla_because})"
            if self.bridge.mode != "vanilla":
                what = f"{req.grammar_for} grammar, logprobs" if req.logprobs and req.grammar else req.grammar_for or "logprobs"
                self.bridge.log(
                    f"request {generation.request_id}: {what}: answered by the vanilla decoder (mode {self.bridge.mode})"
                )
        if req.stream:
            events = self._stream(generation, req, chat)
            return StreamingResponse(
                events,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
                # runs also after a disconnect; a stream cancelled while sending (or never started) is
                # closed here, its answer cancelled, rather than whenever it is garbage-collected
                background=BackgroundTask(_finish, events, generation),
            )
        result = await _while_connected(request, self._collect(generation, req, chat))
        return JSONResponse(result, headers=headers) if result is not None else Response(status_code=499)

    async def _start(self, generate: p.Generate) -> Generation:
        generation = await self.bridge.submit(generate)
        try:
            await generation.first()
        except ApiError as exc:
            if exc.code == "context_length_exceeded":  # which part is too long, as OpenAI says it
                exc.param = "prompt" if generate.prompt else "messages"
            raise
        finally:
            if generation.peeked is None:
                generation.close()
        return generation

    async def _collect(self, generation: Generation, req: ParsedRequest, chat: bool) -> dict[str, Any]:
        logprobs: list[p.TokenLogprob] = []
        try:
            async for msg in generation.events():
                if isinstance(msg, p.Token):
                    logprobs += msg.logprobs
                elif isinstance(msg, p.Done):
                    return Shapes(generation.request_id, self.model_id, chat, req.logprobs).complete(msg, logprobs)
        finally:
            generation.close()
        raise ApiError(500, "the engine ended the answer without a result")

    async def _stream(self, generation: Generation, req: ParsedRequest, chat: bool) -> AsyncGenerator[bytes, None]:
        try:
            shapes = Shapes(generation.request_id, self.model_id, chat, req.logprobs)
            if chat:
                yield _sse(shapes.chunk(first=True))
            async for msg in generation.events():
                if isinstance(msg, p.Token) and (msg.text or msg.logprobs):
                    yield _sse(shapes.chunk(msg.text, logprobs=msg.logprobs if req.logprobs else None))
                elif isinstance(msg, p.Done):
                    yield _sse(shapes.chunk(finish=msg.finish_reason))
                    if req.include_usage:
                        yield _sse(shapes.usage_chunk(msg))
            yield b"data: [DONE]\n\n"
        except ApiError as exc:
            # the status line is long gone: OpenAI clients raise on an error event
            yield _sse(exc.body())
        finally:
            generation.close()


def _notice_headers(generation: Generation) -> dict[str, str]:
    """The worker trims (truncation "auto") before the first token: its Notice is the first event."""
    first = generation.peeked
    if isinstance(first, p.Notice) and first.kind == "context_trimmed":
        return {TRUNCATED_HEADER: first.message.encode("ascii", "replace").decode()}
    return {}


async def _finish(events: AsyncGenerator[bytes, None], generation: Generation) -> None:
    await events.aclose()
    generation.close()


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
) -> Starlette:
    guard = Guard(api_key, local_only, allow_origins)
    routes = Routes(bridge, model_id, guard)

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
        ],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
        middleware=[Middleware(Cors, guard=guard)],
        lifespan=lifespan,
    )
