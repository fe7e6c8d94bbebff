"""Which engine answers the chat, Qt-free: the local model through the worker process, or a model of
a remote OpenAI-compatible endpoint. The window drives an EngineChoice; `specee chat --last-engine`
picks the engine the app used last with the same rules (restore_now).

- The local worker stays up, its model loaded, while a remote engine answers, so going back is
  instant: what the worker says about itself meanwhile (Loaded, AutoDecided, errors outside a
  request) is held and told when the local model answers again, never shown as the remote engine's
  state. A request's events always pass: ChatSession matches them by id, and a stopped answer's
  Done may arrive after a switch.
- The endpoints list their models off the caller's thread; entries() is the model switcher's list.
- The engine used last (AppSettings.engine) is picked again at start once the local model has
  loaded and its endpoint has listed its models; when it is gone or cannot be used, the local model
  stays and RestoreSkipped says why.

Threads: the clients and the listings report on background threads. Everything they report goes
through `post`, which runs a callable on the owner's thread (a queued Qt signal in the window; a
direct call in tests), so only that thread touches the state. `on_event` gets, on that thread, the
answering engine's protocol messages and the choice's own events (the dataclasses below).

It lives in engine/remote/ because it builds remote clients: the chat session below it stays
unaware of where answers come from."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine import protocol as p
from engine.chats.session import ERROR_TITLES
from engine.client import EngineClient, EngineError, EventHandler, WorkerClient
from engine.models.acceleration import installed_weights
from engine.models.default_model import default_model_path
from engine.models.library import file_problem
from engine.models.registry import ModelRegistry
from engine.remote.client import RemoteClient, display_model
from engine.remote.endpoints import Endpoint, EndpointError, EndpointRegistry, api_key
from engine.remote.openai_api import RemoteError, Timeouts, list_models
from engine.settings import LOCAL_ENGINE, engine_remote, remote_engine_setting

RemoteTarget = tuple[str, str]  # (endpoint name, model id)
Listed = list[str] | RemoteError | None  # an endpoint's model ids, why it could not list them, or None: asking now

LIST_TIMEOUTS = Timeouts(connect=5.0, read=15.0)  # a listing should answer quickly or say why not
ORIGINS = {"local": "your file", "hf": "downloaded", "pypi": "downloaded"}  # ModelRecord.source prefixes
# the switcher's short words for why an endpoint's models could not be listed (its tooltip says all)
LIST_FAILURES = {"unreachable": "unreachable", "unauthorized": "API key refused", "timeout": "not answering"}
# a remote engine failing this way before it loaded: its models are listed again, so the switcher says why too
REMOTE_KINDS = ("unreachable", "unauthorized", "timeout", "bad_response", "server_stopped")


def remote_error_text(exc: RemoteError) -> str:
    """ "<title>: <message>" in the user's terms (never the raw kind)."""
    return f"{ERROR_TITLES.get(str(exc.kind), 'The server cannot be used')}: {exc}"


def restore_problem(name: str, model: str, set_up: bool, listed: list[str] | RemoteError) -> tuple[str, str] | None:
    """Why the engine used last (name's model) cannot answer again, in a line and in detail; None
    when it can. set_up: the endpoint is still saved; listed: what it lists now."""
    if not set_up:
        return f"{name}, the remote engine used last, is no longer set up", ""
    if isinstance(listed, RemoteError):
        return f"{name}, the remote engine used last, cannot be used now", remote_error_text(listed)
    if model not in listed:
        return f"{name} no longer lists {display_model(model)}, the model used last", ""
    return None


def restore_now(
    engine: str, endpoints: EndpointRegistry | None = None, timeouts: Timeouts = LIST_TIMEOUTS
) -> tuple[RemoteTarget | None, tuple[str, str] | None]:
    """The window's restore at start, blocking (for the CLI): engine is AppSettings.engine. Returns
    the endpoint's model to chat with (None: the local model) and why the one used last cannot be
    (None when it can, or when the local model was used last)."""
    target = engine_remote(engine)
    if target is None:
        return None, None
    name, model = target
    endpoint = next((e for e in (endpoints or EndpointRegistry()).all() if e.name == name), None)
    listed: list[str] | RemoteError = []
    if endpoint is not None:
        try:
            listed = [m.id for m in list_models(endpoint, api_key(name), timeouts)]
        except RemoteError as exc:
            listed = exc
    problem = restore_problem(name, model, endpoint is not None, listed)
    return (None, problem) if problem else (target, None)


def remote_client(name: str, endpoints: EndpointRegistry | None = None, on_event: EventHandler | None = None) -> RemoteClient:
    """A client for the saved endpoint `name`, with its API key; EndpointError names the saved ones."""
    endpoint = (endpoints or EndpointRegistry()).get(name)
    return RemoteClient(endpoint, api_key(name), on_event=on_event)


# -- what the choice tells its owner, besides the engine's protocol messages ------------------------


@dataclass(frozen=True)
class Leaving:
    """The engine in use is about to be replaced or to load another model: stop what it streams now
    (the Cancel still reaches the engine that runs it)."""


@dataclass(frozen=True)
class Switched:
    """Another engine answers from now on: an endpoint's model, or (None) the local model, whose
    Loaded follows at once when the worker kept it loaded."""

    remote: RemoteTarget | None


@dataclass(frozen=True)
class Loading:
    """The worker was asked to load this model file; its Loaded or Error follows."""

    path: str


@dataclass(frozen=True)
class ListChanged:
    """The switcher's entries changed: an endpoint was added, removed, or listed its models (or why not)."""


@dataclass(frozen=True)
class RestoreSkipped:
    """The engine used last cannot answer again: why, in a line and in detail; the local model answers."""

    short: str
    detail: str


@dataclass(frozen=True)
class Remember:
    """The engine to pick again at the next start changed: AppSettings.engine."""

    engine: str


ChoiceEvent = Leaving | Switched | Loading | ListChanged | RestoreSkipped | Remember


@dataclass(frozen=True)
class Entry:
    """One line of the model switcher. target: a model file's path (local); "<endpoint>\\n<model id>"
    (remote; "<endpoint>\\n" when its models are not listed: picking it asks again); "" otherwise."""

    label: str
    target: str
    kind: str  # "local" | "damaged" (a registered file that cannot be used) | "remote" | "add-remote" | "separator"
    tooltip: str = ""


def _in_thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="list-models", daemon=True).start()


class EngineChoice:
    """Which engine answers, and the way between them (see the module's docstring)."""

    def __init__(
        self,
        on_event: Callable[[p.Message | ChoiceEvent], None],
        load_for: Callable[[str], p.Load],
        *,
        post: Callable[[Callable[[], None]], None] = lambda call: call(),
        last_engine: str = LOCAL_ENGINE,
        local_path: str | None = None,
        endpoints: EndpointRegistry | None = None,
        local: Callable[[EventHandler], EngineClient] = lambda on_event: WorkerClient(on_event=on_event),
        remote: Callable[[str, EventHandler], EngineClient] | None = None,
        list_ids: Callable[[Endpoint], list[str]] | None = None,
        in_background: Callable[[Callable[[], None]], None] = _in_thread,
    ) -> None:
        """load_for: the worker's Load for a model file (the caller's settings: context, threads,
        mode); last_engine: AppSettings.engine at start; local_path: the model to load first.
        local, remote, list_ids and in_background: how clients are made and endpoints listed (tests
        give fakes)."""
        self._on_event = on_event
        self._load_for = load_for
        self._post = post
        self._engine = last_engine
        self._restore = engine_remote(last_engine)  # picked again once the local model has loaded
        self.local_path = local_path  # the local model: the last one asked of the worker
        self.endpoints = endpoints or EndpointRegistry()
        self._make_remote = remote or (lambda name, handler: remote_client(name, self.endpoints, handler))
        self._list_ids = list_ids or (lambda e: [m.id for m in list_models(e, api_key(e.name), LIST_TIMEOUTS)])
        self._in_background = in_background
        self.local = local(lambda msg: self._post(lambda: self._on_local(msg)))
        self.remote: EngineClient | None = None
        self.remote_target: RemoteTarget | None = None  # who answers while remote
        self.remote_models: dict[str, Listed] = {}
        self.local_loaded: p.Loaded | None = None  # the worker's model, kept while a remote engine answers
        self.local_decided: p.AutoDecided | None = None
        # My models' Unload: the worker holds no model until the next load (local_path is the one
        # unloaded: what "Use local model" or a restart loads again); the switcher shows none chosen
        self.unloaded = False
        self._held: list[p.Message] = []  # the worker's other news while it does not answer
        self._remote_loaded = False

    @property
    def client(self) -> EngineClient:
        """The engine in use."""
        return self.remote or self.local

    @property
    def is_remote(self) -> bool:
        return self.remote is not None

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """(Re)start the worker; the endpoints list their models if they never did."""
        self.local.start()
        if not self.remote_models:
            self.list_remote_models()

    def shutdown(self) -> None:
        self._stop_remote()
        self.local.stop()

    def send(self, msg: p.Message, local: bool = False) -> bool:
        """To the engine in use (local: to the worker whichever answers); a refusal becomes an Error event."""
        try:
            (self.local if local else self.client).send(msg)
            return True
        except EngineError as exc:
            self._on_event(p.Error(getattr(msg, "request_id", ""), exc.kind, str(exc)))  # type: ignore[arg-type]  # an unknown kind stays a string (EngineError)
            return False

    # -- choosing ----------------------------------------------------------------------------------

    def load(self, path: str) -> None:
        """The worker loads this model file and answers (at start, or after a repair): the engine
        used last is still picked again once it has loaded."""
        if self.remote is not None:
            self._leave_remote(replay=False)
        self.local_path, self.unloaded = path, False
        self._on_event(Loading(path))
        self.send(self._load_for(path), local=True)

    def use_local(self, path: str) -> None:
        """The user picked a local model: back at once from a remote engine when the worker still
        has it loaded, else it loads."""
        self._restore = None
        self._on_event(Leaving())
        if self.remote is not None and path == self.local_path and self.local_loaded is not None:
            self._leave_remote(replay=True)
        else:
            self.load(path)

    def use_remote(self, name: str, model: str) -> None:
        """Chat with this endpoint's model (the conversation goes on; each answer records which engine
        wrote it); the worker keeps its model loaded for the way back."""
        self._on_event(Leaving())
        try:
            remote = self._make_remote(name, lambda msg: self._post(lambda: self._on_remote(remote, msg)))
        except EndpointError as exc:  # removed meanwhile (e.g. with `specee endpoints remove`)
            self._on_event(p.Error("", p.ErrorKind.BAD_REQUEST, str(exc)))
            self.list_remote_models()
            return
        self._restore = None
        self._remember(remote_engine_setting(name, model))
        self._stop_remote()
        self.remote, self.remote_target, self._remote_loaded = remote, (name, model), False
        remote.start()
        self._on_event(Switched((name, model)))
        self.send(p.Load(model_path=model))

    def unload_local(self) -> None:
        """The worker frees its model (My models' Unload); its Unloaded follows. A remote engine that
        answers goes on answering."""
        self.local_loaded = self.local_decided = None
        self.unloaded = True
        self.send(p.Unload(), local=True)

    def stop_restoring(self) -> None:
        """The user chose: the engine used last is not picked over their choice."""
        self._restore = None

    def drop_local_model(self) -> None:
        """The local model's settings changed while a remote engine answers: going back loads it again."""
        self.local_loaded = self.local_decided = None

    def _leave_remote(self, replay: bool) -> None:
        """The worker answers again; replay: tell its model as if just loaded (no new Load follows)."""
        self._stop_remote()
        self.remote_target = None
        self._remember(LOCAL_ENGINE)
        self._on_event(Switched(None))
        held, self._held = self._held, []
        if replay and self.local_loaded is not None:
            self._on_event(self.local_loaded)
            if self.local_decided is not None:
                self._on_event(self.local_decided)
        for msg in held:
            self._on_event(msg)

    def _stop_remote(self) -> None:
        remote, self.remote = self.remote, None
        if remote is not None:
            remote.stop()

    def _remember(self, engine: str) -> None:
        if engine != self._engine:
            self._engine = engine
            self._on_event(Remember(engine))

    # -- restoring the engine used last --------------------------------------------------------------

    def _try_restore(self) -> None:
        """Once the local model has loaded and the endpoint has answered: the engine used last answers
        again, or RestoreSkipped says why not (an endpoint that is gone is forgotten; one that cannot
        be used now is kept: it may answer at the next start)."""
        if self._restore is None or self.local_loaded is None or self.remote is not None:
            return
        name, model = self._restore
        set_up = name in {e.name for e in self.endpoints.all()}
        listed = self.remote_models.get(name)
        if set_up and listed is None:
            if name not in self.remote_models:
                self.list_remote_models([name])
            return  # asked: back here when it answers
        problem = restore_problem(name, model, set_up, listed if listed is not None else [])
        self._restore = None
        if problem is None:
            self.use_remote(name, model)
            return
        if not set_up:
            self._remember(LOCAL_ENGINE)
        self._on_event(RestoreSkipped(*problem))

    # -- endpoints -------------------------------------------------------------------------------------

    def list_remote_models(self, names: list[str] | None = None) -> None:
        """Ask the endpoints (all, or these) for their models, off this thread."""
        for e in self.endpoints.all():
            if names is None or e.name in names:
                self.remote_models[e.name] = None
                self._in_background(functools.partial(self._list, e))
        self._on_event(ListChanged())

    def _list(self, endpoint: Endpoint) -> None:
        try:
            result: list[str] | RemoteError = self._list_ids(endpoint)
        except RemoteError as exc:
            result = exc
        self._post(lambda: self._listed(endpoint.name, result))

    def _listed(self, name: str, result: list[str] | RemoteError) -> None:
        if name in self.remote_models:  # not removed meanwhile
            self.remote_models[name] = result
            self._on_event(ListChanged())
            self._try_restore()

    def endpoint_saved(self, name: str, models: list[str]) -> None:
        """Added or edited: the models its connection test listed, or ([]) ask it now."""
        if models:
            self.remote_models[name] = models
            self._on_event(ListChanged())
        else:
            self.list_remote_models([name])

    def remove_endpoint(self, name: str) -> None:
        """Remove a saved endpoint (its API key leaves the keyring too)."""
        try:
            self.endpoints.remove(name)
        except EndpointError:
            pass  # already gone
        self.endpoint_removed(name)

    def endpoint_removed(self, name: str) -> None:
        self.remote_models.pop(name, None)
        if self.remote_target and self.remote_target[0] == name and self.local_path:
            self.use_local(self.local_path)
        self._on_event(ListChanged())

    # -- the switcher's list ---------------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        """Registered models (one whose file is damaged or gone says so), the local model (registered or
        not), then each endpoint's models ("gpu-box / qwen2.5-coder") or one entry saying why they could
        not be listed, then "Add remote engine…"."""
        out: list[Entry] = []
        paths: list[str] = []
        default = str(default_model_path())
        for m in ModelRegistry().all():
            if m.path in paths:
                continue
            paths.append(m.path)
            problem = file_problem(m)
            if problem:  # listed, saying why, never silently left out: My models repairs or removes it
                short = "file missing" if problem.startswith("the file is gone") else problem.split(":")[0]
                tip = f"{m.path}\n{problem}\nPick it to repair it (download it again) or remove it in My models."
                out.append(Entry(f"{m.id} · {short} (pick to repair or remove)", m.path, "damaged", tip))
                continue
            size = f"{m.size / 1e9:.2f} GB" if m.size >= 1e9 else f"{m.size / 1e6:.0f} MB"
            weights = installed_weights(m)
            origin = "default" if m.path == default else ORIGINS.get(m.source.split(":", 1)[0], "")
            label = " · ".join(x for x in (m.id, size, weights, origin) if x)
            out.append(Entry(label, m.path, "local", f"{m.path}\nsource: {m.source}\n{weights}"))
        if self.local_path and self.local_path not in paths:
            out.append(Entry(Path(self.local_path).stem, self.local_path, "local", self.local_path))
        if out:
            out.append(Entry("", "", "separator"))
        for e in self.endpoints.all():
            listed = self.remote_models.get(e.name)
            if listed is None:
                out.append(Entry(f"{e.name} · listing models…", f"{e.name}\n", "remote", f"Asking {e.url('models')}"))
            elif isinstance(listed, RemoteError):
                short = LIST_FAILURES.get(str(listed.kind), "cannot be used")
                out.append(Entry(f"{e.name} · {short} (pick to retry)", f"{e.name}\n", "remote", remote_error_text(listed)))
            elif not listed:
                tip = f"{e.base_url} lists no models"
                out.append(Entry(f"{e.name} · no models (pick to retry)", f"{e.name}\n", "remote", tip))
            for model in listed if isinstance(listed, list) else []:
                tip = f"{model}\nanswered by {e.name} ({e.base_url}), an OpenAI-compatible server"
                out.append(Entry(f"{e.name} / {display_model(model)}", f"{e.name}\n{model}", "remote", tip))
        out.append(Entry("Add remote engine…", "", "add-remote", "Chat with a model on another machine or a hosted API"))
        return out

    def current_target(self) -> str:
        """The entry target of the engine answering the chat."""
        return "\n".join(self.remote_target) if self.remote_target else self.local_path or ""

    # -- the clients' events (on the owner's thread) ---------------------------------------------------

    def _on_local(self, msg: p.Message) -> None:
        if isinstance(msg, p.Loaded):
            self.local_loaded, self.local_decided = msg, None
            self.local_path = msg.model_path  # after a refused load, the model kept is the local one
        elif isinstance(msg, p.AutoDecided):
            self.local_decided = msg
        elif isinstance(msg, p.Unloaded) or (
            isinstance(msg, p.Error) and msg.kind in (p.ErrorKind.WORKER_DIED, p.ErrorKind.VERSION_MISMATCH)
        ):
            self.local_loaded = self.local_decided = None  # nothing to go back to without a new Load
        if self.remote is None or isinstance(msg, p.Ready) or bool(getattr(msg, "request_id", "")):
            self._on_event(msg)  # Ready: the worker's build (for About), whichever engine answers
            if isinstance(msg, p.Loaded) and self.remote is None:
                self._try_restore()
        elif not isinstance(msg, p.Loaded | p.AutoDecided):
            self._held.append(msg)

    def _on_remote(self, client: EngineClient, msg: p.Message) -> None:
        # a replaced client's request events still pass (its stopped answer's Done), nothing else
        current = client is self.remote
        if isinstance(msg, p.Ready) or not (current or bool(getattr(msg, "request_id", ""))):
            return
        self._remote_loaded = self._remote_loaded or (current and isinstance(msg, p.Loaded))
        self._on_event(msg)
        failed = isinstance(msg, p.Error) and msg.kind in REMOTE_KINDS
        if current and failed and self.remote_target and not self._remote_loaded:
            self.list_remote_models([self.remote_target[0]])  # the switcher says why too
