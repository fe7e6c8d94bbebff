"""Who may talk to the server: where it binds, the API key, and localhost-only requests.

Bound to localhost (the default), requests must also name a local host (DNS rebinding: a web page
whose name resolves to 127.0.0.1 would otherwise reach us) and may not come from a web page of
another origin (a browser can send a cross-site POST without asking). Bound elsewhere, a key is
required: every /v1 request then needs `Authorization: Bearer <key>`.

Browser clients (CORS): pages served from this machine (http://localhost:3000, ...) and the origins
named with --allow-origin (an editor's webview, an extension) get their preflights answered and may
read the answers; any other origin gets no CORS headers, and bound to localhost a 403.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.serve.errors import ApiError
from engine.serve.schema import TRUNCATED_HEADER

LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def is_local(host: str) -> bool:
    host = host.strip("[]").lower()
    if host in LOCAL_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_problem(host: str, allow_remote: bool, api_key: str | None) -> str:
    """Why binding `host` is refused ("" when it is fine)."""
    if is_local(host):
        return ""
    if not allow_remote:
        return (
            f"refusing to listen on {host}: other machines could reach the model. Pass --allow-remote (and an API key:"
            " --api-key or SPECEE_API_KEY) to serve beyond this machine, or use --host 127.0.0.1"
        )
    if not api_key:
        return f"listening on {host} needs an API key (--api-key or SPECEE_API_KEY): anyone on the network could use it otherwise"
    return ""


def allowed_origin(value: str) -> str:
    """An --allow-origin value as browsers send it (scheme://host[:port], lower case); ValueError
    for anything else, "*" included: that would let every web page use the model."""
    parts = urlsplit(value.strip())
    if not parts.scheme or not parts.netloc or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(
            f"--allow-origin takes an origin such as app://obsidian.md, vscode-webview://ID or chrome-extension://ID,"
            f" got {value!r}"
        )
    return f"{parts.scheme}://{parts.netloc}".lower()


def _host_name(value: str) -> str:
    """The name in a Host header ("[::1]:8080" -> "::1", "localhost:8080" -> "localhost")."""
    return urlsplit(f"//{value}").hostname or ""


class Guard:
    def __init__(self, api_key: str | None, local_only: bool, allow_origins: Iterable[str] = ()) -> None:
        self.api_key, self.local_only = api_key or None, local_only
        self.allow_origins = {allowed_origin(o) for o in allow_origins}

    def origin_allowed(self, origin: str) -> bool:
        """A page of this machine (any port) or an origin named with --allow-origin."""
        return origin.strip().lower() in self.allow_origins or is_local(urlsplit(origin).hostname or "")

    def check(self, request: Request, need_key: bool = True) -> None:
        if self.local_only:
            host = _host_name(request.headers.get("host", ""))
            if host and not is_local(host):  # no Host at all: an HTTP/1.0 client, not a browser
                raise ApiError(403, "this server answers only requests addressed to localhost", code="host_not_allowed")
            origin = request.headers.get("origin")
            if origin is not None and not self.origin_allowed(origin):
                raise ApiError(403, ORIGIN_REFUSED, code="origin_not_allowed")
        if need_key and self.api_key:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.api_key.encode()):
                raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'", code="invalid_api_key")


ORIGIN_REFUSED = "requests from web pages of other sites are refused (serve with --allow-origin ORIGIN to allow one)"
PREFLIGHT_MAX_AGE_S = 600


class Cors:
    """ASGI middleware: preflights (OPTIONS with Access-Control-Request-Method) of allowed origins get
    a 204 that allows them, other origins' a 403; every response to an allowed origin, streamed or not,
    errors included, says that origin may read it."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if scope["method"] == "OPTIONS" and origin is not None and "access-control-request-method" in headers:
            await self._preflight(Request(scope), origin)(scope, receive, send)
            return
        if origin is None or not self.guard.origin_allowed(origin):
            await self.app(scope, receive, send)  # Guard.check refuses it where it must
            return

        async def send_allowed(message: Message) -> None:
            if message["type"] == "http.response.start":
                _allow(MutableHeaders(scope=message), origin)
            await send(message)

        await self.app(scope, receive, send_allowed)

    def _preflight(self, request: Request, origin: str) -> Response:
        try:
            self.guard.check(request, need_key=False)  # the Host check (DNS rebinding) too
        except ApiError as exc:
            return exc.response()
        if not self.guard.origin_allowed(origin):  # bound beyond localhost: not refused, but no CORS
            return ApiError(403, ORIGIN_REFUSED, code="origin_not_allowed").response()
        response = Response(status_code=204)
        _allow(response.headers, origin)
        response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
        asked = request.headers.get("access-control-request-headers", "").strip()
        response.headers["Access-Control-Allow-Headers"] = asked or "authorization, content-type"
        response.headers["Access-Control-Max-Age"] = str(PREFLIGHT_MAX_AGE_S)
        return response


def _allow(headers: MutableHeaders, origin: str) -> None:
    headers["Access-Control-Allow-Origin"] = origin
    headers["Access-Control-Expose-Headers"] = TRUNCATED_HEADER
    headers.add_vary_header("Origin")
