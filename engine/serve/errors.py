"""Errors in the shape OpenAI clients parse: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.responses import Response

# Worker Error.kind -> HTTP status: the client's mistakes are 400s, a missing or broken engine 503
WORKER_STATUS = {
    "bad_settings": 400,
    "bad_request": 400,
    "context_length_exceeded": 400,
    "busy": 429,
    "no_model": 503,
    "model_file": 503,
    "load_failed": 503,
    "native": 503,
    "worker_died": 503,
    "timeout": 503,
    "internal": 500,
}
TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


# how the worker says its process ended (engine/client.py), for a message of this server's own
_DEATH = re.compile(r"(was killed by signal \d+|exited with code -?\d+|is not running|is gone)")


def for_clients(kind: str, message: str) -> str:
    """A worker's message as this server's client should read it: the worker's texts are for the
    app.s user (advice about the app, a log path on this machine)."""
    if kind == "worker_died":
        how = _DEATH.search(message)
        return (
            f"this server's engine process {how.group(1) if how else 'stopped'}; the server restarts it by itself:"
            " send the request again"
        )
    if kind == "no_model":
        return "this server has no model loaded yet (GET /health says when it is ready)"
    return message


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    @classmethod
    def from_worker(cls, kind: str, message: str) -> ApiError:
        return cls(WORKER_STATUS.get(kind, 500), for_clients(kind, message), code=kind)

    def body(self) -> dict[str, Any]:
        kind = TYPE_BY_STATUS.get(self.status, "server_error" if self.status >= 500 else "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}

    def response(self) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        # ASCII JSON: a message that quotes what the client sent (a lone surrogate) still encodes
        return Response(json.dumps(self.body()), status_code=self.status, headers=headers, media_type="application/json")
