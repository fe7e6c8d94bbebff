"""The Starlette app: /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, /v1/models[/{id}],
/health and /log/requests.

Every request waits for its turn and the worker's first event before its response starts, so a
refusal (a chat longer than the context, a full queue) has its own status, streamed or not; a client
that leaves meanwhile is noticed (`_while_connected`). The answer is then read by engine/serve/streams.py:
collected whole, or streamed as server-sent events (`data: {chunk}` ... `data: [DONE]`); Starlette's
StreamingResponse watches for the client leaving and cancels the stream, whose cleanup then cancels
the answer on the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Iterable
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
from engine.serve.schema import MAX_BODY_BYTES, MODE_HEADER, TRUNCATED_HEADER, ParsedRequest, parse_chat, parse_completion
from engine.serve.security import Cors, Guard
from engine.serve.streams import (
    Parse,
    Usage,
    collect,
    collect_response,
    finish,
    stream,
    stream_response,
    stream_tools,
)

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
        log = Usage(request)
        parse = self._parser(tool_prompt) if tool_prompt else None
        if req.stream:
            events = (
                stream_tools(choices, req, self.model_id, log, parse) if parse else stream(choices, req, chat, self.model_id, log)
            )
            return StreamingResponse(
                events,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
                # runs also after a disconnect; a stream cancelled while sending (or never started) is
                # closed here, its answer cancelled, rather than whenever it is garbage-collected
                background=BackgroundTask(finish, events, choices),
            )
        result = await _while_connected(request, collect(choices, req, chat, self.model_id, log, parse))
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
            events = stream_response(generation, shapes, Usage(request))
            return StreamingResponse(
                events,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
                background=BackgroundTask(finish, events, generation),
            )
        result = await _while_connected(request, collect_response(generation, shapes, Usage(request)))
        return JSONResponse(result, headers=headers) if result is not None else Response(status_code=499)

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

    def _parser(self, tool_prompt: ToolPrompt) -> Parse:
        """The answer's text read by the template's parser; a text it cannot read is content."""

        def parse(text: str, partial: bool) -> dict[str, Any]:
            from engine.llm.tool_calls import ToolTemplateError

            assert self._templates is not None
            try:
                return self._templates.parse(text, tool_prompt, partial)
            except ToolTemplateError as exc:
                self.bridge.log(f"the answer could not be parsed for tool calls ({exc}); sent as content")
                return {"role": "assistant", "content": text}

        return parse


def _notice_headers(generation: Generation) -> dict[str, str]:
    """The worker trims (truncation "auto") before the first token: its Notice is the first event."""
    first = generation.peeked
    if isinstance(first, p.Notice) and first.kind == "context_trimmed":
        return {TRUNCATED_HEADER: first.message.encode("ascii", "replace").decode()}
    return {}


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
