"""The OpenAI-compatible HTTP API as we use it: the model list, a streamed chat completion, and
every way they fail turned into one of four error kinds with a message that names the URL and
says what to check. HTTP and the server-sent-event framing are httpx2's; the JSON inside is ours."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2

from engine import __version__
from engine import protocol as p
from engine.client import EngineError
from engine.remote.endpoints import Endpoint


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0  # to open the connection
    read: float = 120.0  # the longest silence: a slow server's prompt processing comes before the first token

    def httpx(self) -> httpx2.Timeout:
        return httpx2.Timeout(connect=self.connect, read=self.read, write=self.read, pool=self.connect)


DEFAULT_TIMEOUTS = Timeouts()


class RemoteError(EngineError):
    """A remote endpoint refused or failed a request (the local worker's is WorkerError).
    kind: unreachable | unauthorized | timeout | bad_response | server_stopped (engine/protocol/enums.py's error kinds)."""


@dataclass
class RemoteModel:
    id: str
    owned_by: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # llama-server: n_ctx_train, n_params, size, ...


def new_http_client(api_key: str | None, timeouts: Timeouts) -> httpx2.Client:
    headers = {"User-Agent": f"specee-chat/{__version__}"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    # trust_env: HTTP(S)_PROXY and NO_PROXY apply as for any other client on this machine
    return httpx2.Client(headers=headers, timeout=timeouts.httpx(), follow_redirects=True)


def list_models(
    endpoint: Endpoint, api_key: str | None = None, timeouts: Timeouts = DEFAULT_TIMEOUTS, http: httpx2.Client | None = None
) -> list[RemoteModel]:
    """GET {base}/models; RemoteError when the server cannot say."""
    url = endpoint.url("models")
    client = http or new_http_client(api_key, timeouts)
    try:
        response = client.get(url)
        check_status(response, endpoint, api_key)
        try:
            data = response.json()
            entries = data["data"]
            models = [RemoteModel(str(m["id"]), str(m.get("owned_by") or ""), dict(m.get("meta") or {})) for m in entries]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            detail = f"{type(exc).__name__}: {exc}"
            raise RemoteError("bad_response", f"{url} did not answer with a model list ({detail}); {_CHECK_BASE}") from None
        return models
    except httpx2.HTTPError as exc:
        raise transport_error(exc, url, timeouts) from None
    finally:
        if http is None:
            client.close()


def chat_body(gen: p.Generate, model: str) -> dict[str, Any]:
    """Only the OpenAI API's own sampling fields: top_k, min_p and the repeat penalty are not part
    of it (strict servers refuse unknown fields), so a remote engine samples with its own defaults
    for those. A continued answer goes as a last assistant message, which llama-server (and
    `specee serve`) continue in place."""
    s = gen.sampling
    body: dict[str, Any] = {
        "model": model,
        "messages": gen.messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": s.temperature,
        "top_p": s.top_p,
    }
    if s.max_tokens:  # 0: no limit of ours, the server's context decides
        body["max_tokens"] = s.max_tokens
    if s.seed >= 0:
        body["seed"] = s.seed
    if s.stop:
        body["stop"] = list(s.stop)
    return body


@dataclass
class Chunk:
    """One streamed piece of the answer."""

    text: str = ""
    finish_reason: str = ""  # set on the last piece: stop | length | (other reasons map to stop)
    n_prompt: int = 0  # from the usage the server reports at the end (0 = not reported)
    n_completion: int = 0


def stream_chat(client: httpx2.Client, endpoint: Endpoint, api_key: str | None, body: dict[str, Any]) -> Iterator[Chunk]:
    """POST {base}/chat/completions with stream=true; the parsed chunks, ending with the one that
    carries the finish reason. Raises RemoteError for a refused request or an unreadable stream, and
    httpx2's own errors for the transport (see transport_error)."""
    url = endpoint.url("chat/completions")
    with client.stream("POST", url, json=body, headers={"Accept": "text/event-stream"}) as response:
        check_status(response, endpoint, api_key)
        finish = ""
        try:
            for event in httpx2.EventSource(response):
                if event.data.strip() == "[DONE]":
                    break
                chunk = _parse_chunk(event.data, url)
                finish = chunk.finish_reason or finish
                yield chunk
        except httpx2.SSEError as exc:
            raise RemoteError("bad_response", f"{url} did not send an event stream ({exc}); {_CHECK_BASE}") from None
        if not finish:
            raise RemoteError(
                "server_stopped",
                f"the answer stream from {url} ended before the answer was finished; the server may have crashed or "
                "been restarted (check its log). What arrived so far is kept.",
            )


def _parse_chunk(data: str, url: str) -> Chunk:
    try:
        obj = json.loads(data)
    except ValueError:
        raise RemoteError(
            "bad_response", f"{url} sent a piece of the answer that is not JSON: {data[:120]!r}. What arrived so far is kept."
        ) from None
    if not isinstance(obj, dict):
        raise RemoteError("bad_response", f"{url} sent a piece of the answer that is not an object: {data[:120]!r}")
    if "error" in obj:
        raise RemoteError("bad_response", f"{url} stopped the answer with an error: {_error_text(obj)}")
    out = Chunk()
    try:
        choices = obj.get("choices") or []
        if choices:
            choice = choices[0]
            content = (choice.get("delta") or {}).get("content")
            out.text = content if isinstance(content, str) else ""
            reason = choice.get("finish_reason")
            if reason:
                out.finish_reason = "length" if reason == "length" else "stop"
        usage = obj.get("usage")
        if isinstance(usage, dict):
            out.n_prompt = int(usage.get("prompt_tokens") or 0)
            out.n_completion = int(usage.get("completion_tokens") or 0)
    except (AttributeError, TypeError, ValueError, IndexError) as exc:
        raise RemoteError(
            "bad_response", f"{url} sent a piece of the answer in an unknown shape ({exc}): {data[:120]!r}"
        ) from None
    return out


# -- errors -----------------------------------------------------------------------------------------

_CHECK_BASE = "check that the address is the server's OpenAI-compatible API (it usually ends in /v1)"


def check_status(response: httpx2.Response, endpoint: Endpoint, api_key: str | None) -> None:
    if response.status_code < 400:
        return
    response.read()
    url = str(response.request.url)
    what = f"{url} answered HTTP {response.status_code}"
    said = _error_text(_json_or_none(response)) or response.text.strip()[:300] or response.reason_phrase
    if response.status_code in (401, 403):
        fix = (
            f"check the API key of endpoint '{endpoint.name}' and give the right one"
            if api_key
            else f"the server needs an API key and endpoint '{endpoint.name}' has none; add one"
        )
        raise RemoteError("unauthorized", f"{what} ({said}): {fix}.")
    if response.status_code == 404:
        raise RemoteError("bad_response", f"{what} ({said}): {_CHECK_BASE}, and that the model exists there.")
    if response.status_code >= 500:
        raise RemoteError("bad_response", f"{what} ({said}): the server failed; its log says why. Try again later.")
    raise RemoteError("bad_response", f"{what} ({said}).")


def _json_or_none(response: httpx2.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _error_text(obj: Any) -> str:
    """The message of an OpenAI-style {"error": {"message": ...}} (or {"error": "..."}) body."""
    if not isinstance(obj, dict):
        return ""
    err = obj.get("error", obj)
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or "").strip()
    return str(err).strip()


def transport_error(exc: Exception, url: str, timeouts: Timeouts) -> RemoteError:
    """httpx2's transport errors (and anything else a request raised), in the user's terms."""
    if isinstance(exc, RemoteError):
        return exc
    if isinstance(exc, httpx2.ConnectTimeout | httpx2.PoolTimeout):
        return RemoteError(
            "timeout",
            f"{url} did not accept a connection within {timeouts.connect:g} s: check the address, and that the server "
            "is up and reachable from here.",
        )
    if isinstance(exc, httpx2.TimeoutException):
        return RemoteError(
            "timeout",
            f"{url} sent nothing for {timeouts.read:g} s: the server may be overloaded or still loading its model. "
            "Try again, or check the server's log. What arrived so far is kept.",
        )
    if isinstance(exc, httpx2.ConnectError):
        return RemoteError(
            "unreachable",
            f"cannot connect to {url} ({_reason(exc)}): check that the server is running, that the address and port "
            "are right, and that no firewall or VPN blocks it.",
        )
    if isinstance(exc, httpx2.RemoteProtocolError):  # the connection closed mid-reply: the server died or restarted
        return RemoteError(
            "server_stopped",
            f"{url} broke off its reply ({_reason(exc)}); check that the server still runs, and its log. What arrived so "
            "far is kept.",
        )
    if isinstance(exc, httpx2.DecodingError):
        return RemoteError(
            "bad_response",
            f"{url} garbled its reply ({_reason(exc)}); check the server's log. What arrived so far is kept.",
        )
    if isinstance(exc, httpx2.ReadError | httpx2.WriteError):  # connected, then the connection was lost
        return RemoteError(
            "server_stopped",
            f"the connection to {url} was lost ({_reason(exc)}); check the network and the server. What arrived so far is kept.",
        )
    if isinstance(exc, httpx2.NetworkError):
        return RemoteError(
            "unreachable",
            f"the connection to {url} was lost ({_reason(exc)}); check the network and the server. What arrived so far is kept.",
        )
    if isinstance(exc, httpx2.HTTPError):
        return RemoteError("bad_response", f"the request to {url} failed ({_reason(exc)}).")
    return RemoteError("bad_response", f"the reply from {url} could not be handled ({type(exc).__name__}: {exc}).")


def _reason(exc: Exception) -> str:
    return str(exc).strip() or type(exc).__name__
