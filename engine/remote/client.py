"""A remote OpenAI-compatible server as an engine: the same surface as the local worker's client
(engine/client.py), so the window's bridge, `specee chat` and ChatSession drive it unchanged.

send(Generate) streams POST {base}/chat/completions on a background thread and answers with the
worker's events: Token per streamed piece, Stats every STATS_INTERVAL_S and at the end (speed
measured here, from what arrives), then Done, or Error with a kind from openai_api. send(Load)
checks the model against GET {base}/models and answers Loaded (mode "remote", name
"<endpoint>/<model id>", which ChatSession records as the answering engine)."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import httpx2

from engine import protocol as p
from engine.client import EngineClient, EventHandler
from engine.remote.endpoints import Endpoint
from engine.remote.openai_api import (
    DEFAULT_TIMEOUTS,
    RemoteError,
    Timeouts,
    chat_body,
    list_models,
    new_http_client,
    stream_chat,
    transport_error,
)

REMOTE_MODE = p.Mode.REMOTE  # Loaded.mode and Stats.mode of a remote engine
STATS_INTERVAL_S = 0.25


@dataclass
class _Request:
    """One streaming answer; `lock` orders its events against a cancel from another thread."""

    gen: p.Generate
    t0: float = field(default_factory=time.perf_counter)
    text: str = ""
    n_generated: int = 0
    n_prompt: int = 0
    t_first: float = 0.0
    t_last: float = 0.0
    over: bool = False  # cancelled or stopped: its thread sends nothing more
    lock: threading.RLock = field(default_factory=threading.RLock)

    def stats(self) -> p.Stats:
        first = self.t_first or time.perf_counter()
        ttft = first - self.t0
        span = self.t_last - self.t_first
        return p.Stats(
            request_id=self.gen.request_id,
            mode=REMOTE_MODE,
            n_prompt=self.n_prompt,
            n_generated=self.n_generated,
            ttft_ms=ttft * 1000,
            # what the user waits for: the server's prompt processing plus the network
            prefill_tok_s=self.n_prompt / ttft if self.n_prompt and ttft > 0 else 0.0,
            decode_tok_s=(self.n_generated - 1) / span if self.n_generated > 1 and span > 0 else 0.0,
        )


def display_model(model_id: str) -> str:
    """llama-server names its model by the file's full path (without --alias): show the file's name."""
    if model_id.startswith("/") or model_id[1:3] in (":\\", ":/") or model_id.lower().endswith(".gguf"):
        return model_id.replace("\\", "/").rsplit("/", 1)[-1]
    return model_id


class RemoteClient(EngineClient):
    error_type = RemoteError

    def __init__(
        self,
        endpoint: Endpoint,
        api_key: str | None = None,
        on_event: EventHandler | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        super().__init__(on_event)
        self.endpoint = endpoint
        self.model = endpoint.model  # "" until load() picks the first listed one
        self.timeouts = timeouts
        self._api_key = api_key
        self._http: httpx2.Client | None = None
        self._lock = threading.Lock()
        self._current: _Request | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._http is not None

    def start(self, timeout: float = 60.0) -> p.Ready:
        """Ready at once: nothing is contacted until a Load or Generate (their errors say why)."""
        self.stop()
        self._events = queue.Queue()  # nothing of an earlier run is read as this one's
        self._http = new_http_client(self._api_key, self.timeouts)
        ready = p.Ready(pid=0, native={"remote": self.endpoint.base_url})
        self.ready = ready
        if self._on_event is not None:
            self._dispatch(ready)
        return ready

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            req, self._current = self._current, None
            http, self._http = self._http, None
        if req is not None:
            with req.lock:
                req.over = True
        if http is not None:
            http.close()

    # -- commands ---------------------------------------------------------------------------------

    def send(self, msg: p.Message) -> None:
        if self._http is None:
            raise RemoteError("bad_request", f"the connection to {self.endpoint.name} is closed; start it again")
        if isinstance(msg, p.Generate):
            self._generate(msg)
        elif isinstance(msg, p.Cancel):
            self._cancel(msg.request_id)
        elif isinstance(msg, p.Load):
            model = msg.model_path or self.model
            threading.Thread(target=self._load, args=(model,), name="remote-load", daemon=True).start()
        elif isinstance(msg, p.Unload):
            self._dispatch(p.Unloaded())
        elif isinstance(msg, p.Shutdown):
            self.stop()
        else:
            self._dispatch(
                p.Error(getattr(msg, "request_id", ""), p.ErrorKind.BAD_REQUEST, f"a remote engine cannot do '{msg.TYPE}'")
            )

    def load(self, model: str = "", timeout: float = 60.0) -> p.Loaded:
        """Blocking (no on_event): pick the model ("" = the endpoint's, else the first listed)."""
        self.send(p.Load(model_path=model))
        loaded = self.wait_for(p.Loaded, timeout=timeout)
        assert isinstance(loaded, p.Loaded)
        return loaded

    def _load(self, model: str) -> None:
        t0 = time.perf_counter()
        http = self._http
        if http is None:
            return
        try:
            models = list_models(self.endpoint, self._api_key, self.timeouts, http)
        except RemoteError as exc:
            self._dispatch(p.Error("", exc.kind, str(exc)))  # type: ignore[arg-type]  # an unknown kind stays a string (EngineError)
            return
        ids = [m.id for m in models]
        if not model and not ids:
            self._dispatch(
                p.Error("", p.ErrorKind.NO_MODEL, f"{self.endpoint.base_url} lists no models; load one on the server first")
            )
            return
        model = model or ids[0]
        if ids and model not in ids:
            offered = ", ".join(ids[:20])
            self._dispatch(
                p.Error("", p.ErrorKind.NO_MODEL, f"{self.endpoint.base_url} has no model '{model}'; it offers: {offered}")
            )
            return
        self.model = model
        meta = next((m.meta for m in models if m.id == model), {})
        self._dispatch(
            p.Loaded(
                model_path=self.endpoint.base_url,
                name=f"{self.endpoint.name}/{display_model(model)}",
                n_embd=int(meta.get("n_embd") or 0),
                n_vocab=int(meta.get("n_vocab") or 0),
                n_ctx_train=int(meta.get("n_ctx_train") or 0),
                mode=REMOTE_MODE,
                load_ms=(time.perf_counter() - t0) * 1000,
                plan=f"answers come from {self.endpoint.name} ({self.endpoint.base_url}), an OpenAI-compatible server",
            )
        )

    def _generate(self, gen: p.Generate) -> None:
        try:
            gen.sampling.validate()
        except p.SettingsError as exc:
            self._dispatch(p.Error(gen.request_id, p.ErrorKind.BAD_SETTINGS, str(exc)))
            return
        req = _Request(gen)
        with self._lock:
            busy = self._current is not None
            if not busy:
                self._current = req
        if busy:
            self._dispatch(p.Error(gen.request_id, p.ErrorKind.BUSY, "an answer is still streaming; stop it first"))
            return
        threading.Thread(target=self._stream, args=(req,), name="remote-stream", daemon=True).start()

    def _cancel(self, request_id: str) -> None:
        """Done(cancelled) at once, with what arrived so far; the stream's thread hangs up (which stops
        the server's generation) as soon as it wakes."""
        with self._lock:
            req = self._current
            if req is None or request_id not in ("", req.gen.request_id):
                return
            self._current = None
        with req.lock:
            if req.over:
                return
            req.over = True
            self._finish(req, p.FinishReason.CANCELLED)

    # -- the stream's thread ----------------------------------------------------------------------

    def _stream(self, req: _Request) -> None:
        http = self._http
        if http is None:
            return
        url = self.endpoint.url("chat/completions")
        body = chat_body(req.gen, self.model)
        last_stats = 0.0
        finish = p.FinishReason.STOP
        try:
            for chunk in stream_chat(http, self.endpoint, self._api_key, body):
                with req.lock:
                    if req.over:
                        return
                    now = time.perf_counter()
                    if chunk.text:
                        req.t_first = req.t_first or now
                        req.t_last = now
                        req.n_generated += 1
                        req.text += chunk.text
                        self._dispatch(p.Token(req.gen.request_id, chunk.text, req.n_generated - 1, (now - req.t0) * 1000))
                    if chunk.n_completion:  # the server's count beats ours (a piece may hold several tokens)
                        req.n_generated = chunk.n_completion
                    req.n_prompt = chunk.n_prompt or req.n_prompt
                    finish = p.FinishReason(chunk.finish_reason) if chunk.finish_reason else finish  # stop or length
                    if now - last_stats >= STATS_INTERVAL_S and req.n_generated:
                        last_stats = now
                        self._dispatch(req.stats())
        except Exception as exc:  # every failure becomes an Error event: the answer so far stays with the session
            error = transport_error(exc, url, self.timeouts)
            with req.lock:
                if req.over:
                    return
                req.over = True
                self._release(req)
                self._dispatch(p.Error(req.gen.request_id, error.kind, str(error)))  # type: ignore[arg-type]  # an unknown kind stays a string (EngineError)
            return
        with req.lock:
            if req.over:
                return
            req.over = True
            self._release(req)
            self._finish(req, finish)

    def _release(self, req: _Request) -> None:
        """The next request may start before this one's last events are handled (as with the worker)."""
        with self._lock:
            if self._current is req:
                self._current = None

    def _finish(self, req: _Request, reason: p.FinishReason) -> None:
        self._dispatch(req.stats())
        self._dispatch(p.Done(req.gen.request_id, reason, req.text, req.n_prompt, req.n_generated))
