"""The asyncio side of one engine worker: load, generations in turns (FIFO), restart after death.

The worker decodes up to `parallel` requests together (vanilla and ngram: Loaded.n_parallel) or one
at a time (eagle, specee, draft), so requests take turns for that many places (Turns wakes waiters
in arrival order) and each one's events are routed by request_id into its own queue: answers are
never mixed. A client that goes away mid-answer sends Cancel and keeps its place until the worker
confirms (Done), so the next request starts on a free place. WorkerClient's reader thread hands
events to the event loop with call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from engine import protocol as p
from engine.client import WorkerClient, WorkerError
from engine.serve.errors import ApiError, for_clients


class Turns:
    """Up to `capacity` holders at once, waiters served in arrival order; the capacity may change
    (auto switching between a mode that batches and one that does not)."""

    def __init__(self, capacity: int = 1) -> None:
        self.capacity, self.held = capacity, 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        if self.held < self.capacity and not self._waiters:
            self.held += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted as it was cancelled: pass it on
                self.release()
            else:
                self._waiters.remove(fut)
            raise

    def release(self) -> None:
        self.held -= 1
        self._wake()

    def resize(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.held < self.capacity:
            fut = self._waiters.popleft()
            if not fut.done():
                self.held += 1
                fut.set_result(None)


# load errors that a new try would only repeat (a bad file, a broken build, impossible settings)
FATAL_LOAD_ERRORS = {"model_file", "load_failed", "native", "bad_settings"}
CANCEL_GRACE_S = 30.0  # a worker that does not confirm a cancel by then is not waited for any longer


class Generation:
    """One request's turn on the worker; close() ends it (cancelling the answer if unfinished)."""

    def __init__(self, bridge: EngineBridge, request_id: str, events: asyncio.Queue[p.Message]) -> None:
        self.request_id = request_id
        self._bridge, self._events = bridge, events
        self._finished = self._closed = False
        self._first: p.Message | None = None

    async def first(self) -> p.Message:
        """The first event, kept for events(); an Error raises ApiError. The worker refuses a request
        (a prompt too long, a bad setting) before any token: awaited before a response starts, such
        a refusal gets its own status rather than an error inside a stream that began with 200."""
        if self._first is None:
            self._first = await self._next()
        return self._first

    @property
    def peeked(self) -> p.Message | None:
        """The event first() returned (None before it)."""
        return self._first

    async def _next(self) -> p.Message:
        msg = await self._events.get()
        if isinstance(msg, p.Error):
            self._finished = True
            raise ApiError.from_worker(msg.kind, msg.message)
        self._finished = isinstance(msg, p.Done)
        return msg

    async def events(self) -> AsyncIterator[p.Message]:
        """Token, Stats, Notice ... up to and including Done; an Error raises ApiError."""
        if self._first is not None:
            yield self._first
        while not self._finished:
            yield await self._next()

    def close(self) -> None:
        """Synchronous, so it also runs where the caller's task is being cancelled."""
        if self._closed:
            return
        self._closed = True
        self._bridge._end_turn(self.request_id, finished=self._finished)


class EngineBridge:
    def __init__(
        self,
        model_path: Path,
        mode: str = "auto",
        placement: p.Placement | None = None,
        max_queue: int = 32,
        log: Callable[[str], None] = lambda _msg: None,
        parallel: int = 1,
    ) -> None:
        """parallel: requests the worker may decode together (Load.n_parallel); it uses them in the
        modes that batch (p.BATCHED_MODES), one at a time in the others."""
        self.model_path, self.requested_mode = Path(model_path), mode
        self.placement = placement or p.Placement()
        self.max_queue = max_queue
        self.parallel = parallel
        self.log = log
        self.state = "starting"  # starting | loading | ok | error
        self.error = ""
        self.loaded: p.Loaded | None = None
        self.mode = mode
        self.cancelled = 0  # answers stopped because their client went away (confirmed by the worker)
        self.restarts = 0
        self._fatal = False  # the last load failed in a way a new try would repeat
        self._client = WorkerClient(on_event=self._from_worker_thread)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._control: asyncio.Queue[p.Message] = asyncio.Queue()
        self._turn = Turns(1)  # sized once the worker says what it batches
        self._waiting = 0
        self._streams: dict[str, asyncio.Queue[p.Message]] = {}
        self._abandoned: set[str] = set()
        self._load_task: asyncio.Task[None] | None = None
        self._closing = False

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def worker_pid(self) -> int | None:
        return self._client.pid if self._client.alive else None

    @property
    def queued(self) -> int:
        return self._waiting

    @property
    def busy(self) -> bool:
        return self._turn.held > 0

    @property
    def in_flight(self) -> int:
        """Requests the worker is answering now (or confirming a cancel of)."""
        return self._turn.held

    @property
    def capacity(self) -> int:
        """Requests answered at once now: the worker's batch in a mode that batches, else 1."""
        return self._turn.capacity

    def _size_turns(self) -> None:
        batched = self.loaded is not None and self.mode in p.BATCHED_MODES
        self._turn.resize(self.loaded.n_parallel if batched and self.loaded is not None else 1)

    async def start(self) -> None:
        """Begin loading in the background: the server answers /health (loading) meanwhile."""
        self._loop = asyncio.get_running_loop()
        self._load_task = asyncio.create_task(self._load())

    async def close(self) -> None:
        self._closing = True
        if self._load_task is not None and not self._load_task.done():
            self._load_task.cancel()
        await asyncio.to_thread(self._client.stop)

    async def _load(self) -> None:
        self.state, self.loaded = "loading", None
        while not self._control.empty():
            self._control.get_nowait()
        self.log(f"loading {self.model_path.name} (mode {self.requested_mode}) ...")
        try:
            self._client.start()
            await self._wait_control(p.Ready, 120)
            self._client.send(p.Load(str(self.model_path), self.placement, self.requested_mode, n_parallel=self.parallel))  # type: ignore[arg-type]  # as in WorkerClient.load
            loaded = await self._wait_control(p.Loaded, 900)
        except (WorkerError, TimeoutError) as exc:
            why = for_clients(exc.kind, str(exc)) if isinstance(exc, WorkerError) else str(exc)
            self.state, self.error = "error", why or "the engine did not answer in time"
            self._fatal = isinstance(exc, WorkerError) and exc.kind in FATAL_LOAD_ERRORS
            self.log(f"loading failed: {exc}")
            return
        assert isinstance(loaded, p.Loaded)
        self.loaded, self.mode, self.state, self.error, self._fatal = loaded, loaded.mode, "ok", "", False
        self._size_turns()
        why = f" ({loaded.mode_reason})" if loaded.mode_reason else ""
        self.log(
            f"ready: {loaded.name or self.model_path.name}, mode {loaded.mode}{why}, loaded in {loaded.load_ms / 1000:.1f} s"
        )

    async def _wait_control(self, kind: type[p.Message], timeout: float) -> p.Message:
        async with asyncio.timeout(timeout):
            while True:
                msg = await self._control.get()
                if isinstance(msg, kind):
                    return msg
                if isinstance(msg, p.Error):
                    raise WorkerError(msg.kind, msg.message)

    async def _ensure_ready(self) -> None:
        if self.state == "ok" and self._client.alive:
            return
        if self._load_task is None or self._load_task.done():
            if self.state == "error" and self._fatal:
                raise ApiError(503, f"the model could not be loaded: {self.error}", code="load_failed")
            self._load_task = asyncio.create_task(self._load())
        # shielded: a request whose client leaves must not abort a load others wait for
        await asyncio.shield(self._load_task)
        if self.state != "ok":
            raise ApiError(503, f"the engine is not available: {self.error}", code="engine_unavailable")

    def check_accepting(self) -> None:
        """Refuse at once what would fail anyway: a full queue, a model that cannot load."""
        if self._waiting >= self.max_queue:
            raise ApiError(429, f"{self._waiting} requests are already waiting; try again shortly", code="queue_full")
        if self.state == "error" and self._fatal:
            raise ApiError(503, f"the model could not be loaded: {self.error}", code="load_failed")

    # -- requests -------------------------------------------------------------------------------

    async def submit(self, request: p.Generate) -> Generation:
        """Wait for this request's turn, then start it on the worker."""
        self.check_accepting()
        request.request_id = request.request_id or uuid.uuid4().hex[:16]
        self._waiting += 1
        try:
            await self._turn.acquire()
        finally:
            self._waiting -= 1
        rid = request.request_id
        try:
            await self._ensure_ready()
            events: asyncio.Queue[p.Message] = asyncio.Queue()
            self._streams[rid] = events
            self._client.send(request)
        except WorkerError as exc:
            self._streams.pop(rid, None)
            self._turn.release()
            raise ApiError.from_worker(exc.kind, str(exc)) from None
        except BaseException:
            self._streams.pop(rid, None)
            self._turn.release()
            raise
        return Generation(self, rid, events)

    async def embed(self, request: p.Embed) -> p.Embeddings:
        """The worker's embeddings of request's inputs (ApiError for a refusal). No turn is taken: the
        worker reads the command after the answer it is decoding (or the batch's answers) ends."""
        self.check_accepting()
        await self._ensure_ready()
        rid = request.request_id = request.request_id or uuid.uuid4().hex[:16]
        events: asyncio.Queue[p.Message] = asyncio.Queue()
        self._streams[rid] = events
        try:
            self._client.send(request)
            while True:
                msg = await events.get()
                if isinstance(msg, p.Embeddings):
                    return msg
                if isinstance(msg, p.Error):
                    raise ApiError.from_worker(msg.kind, msg.message)
        except WorkerError as exc:
            raise ApiError.from_worker(exc.kind, str(exc)) from None
        finally:
            self._streams.pop(rid, None)

    def _end_turn(self, rid: str, finished: bool) -> None:
        self._streams.pop(rid, None)
        if finished or not self._client.alive:
            self._turn.release()
            return
        # the client went away mid-answer: stop the worker, and hand the turn on once it confirms
        self._abandoned.add(rid)
        try:
            self._client.send(p.Cancel(rid))
        except WorkerError:
            self._release_abandoned(rid)
            return
        if self._loop is not None:
            self._loop.call_later(CANCEL_GRACE_S, self._release_abandoned, rid)

    def _release_abandoned(self, rid: str) -> None:
        if rid in self._abandoned:
            self._abandoned.discard(rid)
            self._turn.release()

    # -- events (on the event loop) ---------------------------------------------------------------

    def _from_worker_thread(self, msg: p.Message) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._route, msg)
        except RuntimeError:  # the loop closed meanwhile (shutdown)
            pass

    def _route(self, msg: p.Message) -> None:
        rid = getattr(msg, "request_id", "")
        if isinstance(msg, p.AutoDecided):  # auto's choice, or an explicit mode's vanilla reference
            switched = msg.mode != self.mode
            self.mode = msg.mode
            self._size_turns()
            self.log(f"{'auto now runs' if switched else 'still'} {msg.mode}: {msg.mode_reason}")
        elif isinstance(msg, p.Error) and msg.kind == "worker_died":
            self._worker_died(msg)
        elif rid in self._streams:
            self._streams[rid].put_nowait(msg)
        elif rid in self._abandoned:
            if isinstance(msg, p.Done | p.Error):
                if isinstance(msg, p.Done) and msg.finish_reason == "cancelled":
                    self.cancelled += 1
                self._release_abandoned(rid)
        elif not rid:
            self._control.put_nowait(msg)

    def _worker_died(self, msg: p.Error) -> None:
        self._control.put_nowait(msg)  # a load in progress fails with it
        if self._closing:
            return
        self.log(msg.message.splitlines()[0])
        for events in self._streams.values():
            events.put_nowait(msg)
        for rid in list(self._abandoned):
            self._release_abandoned(rid)
        # restart now, so the next request finds a loaded model (and /health says loading meanwhile)
        if self.state == "ok":
            self.restarts += 1
            self.state, self.error = "loading", for_clients(msg.kind, msg.message)
            self._load_task = asyncio.get_running_loop().create_task(self._load())
