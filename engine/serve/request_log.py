"""The server's log of requests: time, client, endpoint, model, tokens, speed and status of each
answering request (POST /v1/...), kept in a bounded ring (GET /log/requests) and appended as JSON
lines to a file in the app's cache (the app's Serve "Requests" view reads it: engine-side, Qt-free).

An ASGI middleware (RequestLogger) times each request and reads its status from the response's
start; the routes add what only they know (tokens, speed) to the request's Entry, found in the
ASGI scope's state. What is logged never includes prompts or answers: only their sizes.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.paths import cache_dir

if TYPE_CHECKING:  # the app's Requests view imports this module: no web framework at run time
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

RING_SIZE = 500  # entries kept in memory (GET /log/requests)
FILE_MAX_BYTES = 4 << 20  # the file is renamed to .1 (replacing the one before) once it grows past this
STATE_KEY = "specee_log_entry"


def log_path() -> Path:
    """Where `specee serve` appends its requests (one JSON object a line)."""
    return cache_dir() / "logs" / "serve-requests.jsonl"


@dataclass
class Entry:
    time: float  # when the request came (Unix time)
    client: str  # the client's address
    endpoint: str  # the path, e.g. /v1/chat/completions
    model: str
    status: int = 0  # the HTTP status; 499: the client left before an answer was sent
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tok_s: float = 0.0  # the answer's decode speed (the mean of its choices'); 0 where nothing was decoded
    duration_ms: float = 0.0
    finish: str = ""  # "stop", "length", "cancelled" (a stream its client left), "error" (an error event)

    def usage(self, prompt: int, completion: int, cached: int, tok_s: float) -> None:
        self.prompt_tokens, self.completion_tokens, self.cached_tokens, self.tok_s = prompt, completion, cached, round(tok_s, 2)


def entry_of(scope: Scope) -> Entry | None:
    """The Entry of the request being answered (None where it is not logged)."""
    return scope.get("state", {}).get(STATE_KEY)


class RequestLog:
    def __init__(self, path: Path | None = None, size: int = RING_SIZE) -> None:
        """path: the JSON-lines file (None: memory only)."""
        self.path = path
        self.ring: deque[Entry] = deque(maxlen=size)

    def add(self, entry: Entry) -> None:
        self.ring.append(entry)
        if self.path is None:
            return
        line = json.dumps(asdict(entry), ensure_ascii=False) + "\n"
        with contextlib.suppress(OSError):  # a full disk or a read-only cache never fails a request
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists() and self.path.stat().st_size > FILE_MAX_BYTES:
                os.replace(self.path, self.path.with_suffix(".jsonl.1"))
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)

    def recent(self, n: int = RING_SIZE) -> list[dict[str, Any]]:
        return [asdict(e) for e in list(self.ring)[-n:]]


class RequestLogger:
    """ASGI middleware: every POST under /v1/ becomes an Entry in `log` once its response ended."""

    def __init__(self, app: ASGIApp, log: RequestLog, model: str) -> None:
        self.app, self.log, self.model = app, log, model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        entry = Entry(time.time(), client[0] if client else "", scope["path"], self.model)
        scope.setdefault("state", {})[STATE_KEY] = entry
        start = time.perf_counter()

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                entry.status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            entry.status = entry.status or 500
            raise
        finally:
            if not entry.status:  # no response began: the client left (or the server stopped) first
                entry.status = 499
            entry.duration_ms = round((time.perf_counter() - start) * 1000, 1)
            self.log.add(entry)


def read_new(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Entries appended to `path` since byte `offset`, and the offset after them (for a reader that
    polls: a file that was rotated, smaller than offset, is read from its start)."""
    try:
        size = path.stat().st_size
    except OSError:
        return [], 0
    if size < offset:
        offset = 0
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    complete = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
    out = []
    for line in complete.splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            if isinstance(item, dict):
                out.append(item)
    return out, offset + len(complete)
