"""Who may talk to the server: where it binds, the API key, and localhost-only requests.

Bound to localhost (the default), requests must also name a local host (DNS rebinding: a web page
whose name resolves to 127.0.0.1 would otherwise reach us) and may not come from a web page of
another origin (a browser can send a cross-site POST without asking). Bound elsewhere, a key is
required: every /v1 request then needs `Authorization: Bearer <key>`.
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import urlsplit

from starlette.requests import Request

from engine.serve.errors import ApiError

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


def _host_name(value: str) -> str:
    """The name in a Host header ("[::1]:8080" -> "::1", "localhost:8080" -> "localhost")."""
    return urlsplit(f"//{value}").hostname or ""


class Guard:
    def __init__(self, api_key: str | None, local_only: bool) -> None:
        self.api_key, self.local_only = api_key or None, local_only

    def check(self, request: Request, need_key: bool = True) -> None:
        if self.local_only:
            host = _host_name(request.headers.get("host", ""))
            if host and not is_local(host):  # no Host at all: an HTTP/1.0 client, not a browser
                raise ApiError(403, "this server answers only requests addressed to localhost", code="host_not_allowed")
            origin = request.headers.get("origin")
            if origin is not None and not is_local(urlsplit(origin).hostname or ""):
                raise ApiError(403, "requests from web pages of other sites are refused", code="origin_not_allowed")
        if need_key and self.api_key:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.api_key.encode()):
                raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'", code="invalid_api_key")
