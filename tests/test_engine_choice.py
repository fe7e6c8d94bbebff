"""The engine choice (engine/remote/engine_choice.py), Qt-free and without a model: which engine
answers (the local worker or an endpoint's model), the idle worker's news held and told on the way
back, the engine used last picked again at start (or why not), the switcher's entries. The clients
are fakes that record what they are sent; what their threads report waits in `posted` until the
test runs it, as the window's queued signal does."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import protocol as p
from engine.client import EngineClient, EventHandler, WorkerError
from engine.models.registry import ModelRecord, ModelRegistry
from engine.remote.endpoints import Endpoint, EndpointRegistry
from engine.remote.engine_choice import (
    EngineChoice,
    Leaving,
    ListChanged,
    Loading,
    Remember,
    RestoreSkipped,
    Switched,
    restore_now,
)
from engine.remote.openai_api import RemoteError
from engine.settings import AppSettings, remote_engine_setting, save_settings
from tests.remote_servers import free_port, piece, scripted_server


class FakeClient(EngineClient):
    def __init__(self, on_event: EventHandler, name: str = "local") -> None:
        super().__init__(on_event)
        self.name, self.running, self.refuse = name, False, False
        self.sent: list[p.Message] = []

    @property
    def alive(self) -> bool:
        return self.running

    def start(self, timeout: float = 60.0) -> p.Ready:
        self.running = True
        self._dispatch(p.Ready(pid=0))  # a RemoteClient tells its Ready at once, on the caller's thread
        return p.Ready(pid=0)

    def stop(self, timeout: float = 5.0) -> None:
        self.running = False

    def send(self, msg: p.Message) -> None:
        if self.refuse:
            raise WorkerError(p.ErrorKind.WORKER_DIED, "The engine process is not running; restart it.")
        self.sent.append(msg)

    def says(self, msg: p.Message) -> None:
        """What its reader thread would report."""
        self._dispatch(msg)


class Harness:
    """An EngineChoice with fake clients; `seen` is everything it told its owner, in order."""

    def __init__(self, last_engine: str = "local", listings: dict[str, list[str] | RemoteError] | None = None) -> None:
        self.seen: list[object] = []
        self.posted: list[Callable[[], None]] = []
        self.remotes: list[FakeClient] = []
        self.listings = listings if listings is not None else {}
        self.asked: list[str] = []
        self.local: FakeClient | None = None

        def make_local(on_event: EventHandler) -> FakeClient:
            self.local = FakeClient(on_event)
            return self.local

        def make_remote(name: str, on_event: EventHandler) -> FakeClient:
            EndpointRegistry().get(name)  # EndpointError for one removed meanwhile, as the real one
            self.remotes.append(FakeClient(on_event, name))
            return self.remotes[-1]

        def list_ids(endpoint: Endpoint) -> list[str]:
            self.asked.append(endpoint.name)
            listed = self.listings.get(endpoint.name, [])
            if isinstance(listed, RemoteError):
                raise listed
            return listed

        self.choice = EngineChoice(
            self.seen.append,
            lambda path: p.Load(path, mode="auto"),
            post=self.posted.append,
            last_engine=last_engine,
            local_path="/models/m.gguf",
            local=make_local,
            remote=make_remote,
            list_ids=list_ids,
            in_background=lambda work: work(),
        )

    def run_posted(self) -> None:
        while self.posted:
            self.posted.pop(0)()

    def worker_says(self, msg: p.Message) -> None:
        assert self.local is not None
        self.local.says(msg)
        self.run_posted()

    def events(self, *kinds: type) -> list[object]:
        return [e for e in self.seen if isinstance(e, kinds)]


LOCAL = p.Loaded(model_path="/models/m.gguf", name="local-model", mode=p.Mode.AUTO)


@pytest.fixture
def box(isolated_data: Path) -> None:
    EndpointRegistry().add(Endpoint("box", "http://127.0.0.1:9/v1"))


def test_nothing_is_touched_until_the_owners_thread_runs_it(box: None) -> None:
    h = Harness()
    h.choice.start()
    assert h.local is not None and h.local.running and h.choice.remote_models == {"box": None}
    assert h.events(ListChanged) and h.asked == ["box"]
    h.local.says(LOCAL)  # on the worker's reader thread
    assert h.choice.local_loaded is None and LOCAL not in h.seen  # posted, not yet run
    h.run_posted()
    assert h.choice.local_loaded is LOCAL and h.seen[-1] is LOCAL and h.choice.remote_models == {"box": []}


def test_the_idle_local_worker_never_speaks_for_the_remote_engine(box: None) -> None:
    """While a remote engine answers, what the worker says about itself (auto finishing its
    measurement, a notice) is kept and told when the local model answers again; a request's events
    pass; the remote's Ready is not the worker's build."""
    h = Harness(listings={"box": ["qwen"]})
    h.choice.start()
    h.run_posted()
    h.worker_says(LOCAL)
    h.choice.use_remote("box", "qwen")
    remote = h.remotes[-1]
    assert h.choice.is_remote and h.choice.client is remote and remote.sent == [p.Load(model_path="qwen")]
    assert h.events(Leaving, Switched, Remember) == [Leaving(), Remember("remote:box/qwen"), Switched(("box", "qwen"))]
    h.run_posted()  # the remote's Ready
    assert len([m for m in h.seen if isinstance(m, p.Ready)]) == 1  # the worker's, from start()
    before = len(h.seen)
    decided = p.AutoDecided(mode=p.Mode.NGRAM, measured_tok_s={"ngram": 50.0})
    done = p.Done(request_id="r1", finish_reason="cancelled")
    note = p.Notice(message="the worker says something")
    for msg in (decided, done, note):
        h.worker_says(msg)
    assert h.seen[before:] == [done]  # only the stopped local answer's end, which its chat waits for
    assert h.choice.local_loaded is LOCAL and h.choice.local_decided is decided
    h.choice.use_local("/models/m.gguf")  # the same model, still loaded: back at once, no Load
    assert h.seen[before + 1 :] == [Leaving(), Remember("local"), Switched(None), LOCAL, decided, note]
    assert not h.choice.is_remote and not remote.running and h.local is not None and h.local.sent == []


def test_a_replaced_remote_client_only_finishes_its_request(isolated_data: Path) -> None:
    for name in ("a", "b"):
        EndpointRegistry().add(Endpoint(name, "http://127.0.0.1:9/v1"))
    h = Harness()
    h.choice.use_remote("a", "m")
    old = h.remotes[-1]
    h.choice.use_remote("b", "m")
    before = len(h.seen)
    old.says(p.Loaded(name="a/m", mode="remote"))
    old.says(p.Done(request_id="r1", finish_reason="cancelled"))
    h.run_posted()
    assert h.seen[before:] == [p.Done(request_id="r1", finish_reason="cancelled")]


def test_going_back_loads_the_local_model_when_the_worker_has_none(box: None) -> None:
    h = Harness(listings={"box": ["qwen"]})
    h.worker_says(LOCAL)
    h.choice.use_remote("box", "qwen")
    h.choice.drop_local_model()  # its settings changed meanwhile
    h.choice.use_local("/models/m.gguf")
    assert h.seen[-2:] == [Switched(None), Loading("/models/m.gguf")]
    assert h.local is not None and h.local.sent == [p.Load("/models/m.gguf", mode="auto")]
    h.choice.use_local("/models/other.gguf")  # another model: always a Load
    assert h.choice.local_path == "/models/other.gguf" and h.local.sent[-1] == p.Load("/models/other.gguf", mode="auto")


def test_a_refused_command_becomes_an_error_event() -> None:
    h = Harness()
    assert h.local is not None
    h.local.refuse = True
    assert not h.choice.send(p.Generate("r9", [{"role": "user", "content": "hi"}]))
    error = h.seen[-1]
    assert isinstance(error, p.Error) and error.request_id == "r9" and error.kind == p.ErrorKind.WORKER_DIED


def test_an_endpoint_removed_meanwhile_is_said_and_listed_again(box: None) -> None:
    h = Harness()
    h.choice.use_remote("gone", "m")
    error = next(e for e in h.seen if isinstance(e, p.Error))
    assert error.kind == p.ErrorKind.BAD_REQUEST and "no endpoint named 'gone'" in error.message
    assert not h.choice.is_remote and h.asked == ["box"] and not h.events(Switched, Remember)


def test_a_remote_engine_failing_before_it_loaded_is_listed_again(box: None) -> None:
    h = Harness(listings={"box": RemoteError(p.ErrorKind.UNREACHABLE, "cannot connect to http://127.0.0.1:9/v1")})
    h.choice.use_remote("box", "qwen")
    h.remotes[-1].says(p.Error("", p.ErrorKind.UNREACHABLE, "cannot connect"))
    h.run_posted()
    assert h.asked == ["box"] and isinstance(h.choice.remote_models["box"], RemoteError)
    label = next(e.label for e in h.choice.entries() if e.kind == "remote")
    assert label == "box · unreachable (pick to retry)"


def test_the_engine_used_last_is_picked_again_once_the_local_model_loaded(box: None) -> None:
    h = Harness(last_engine=remote_engine_setting("box", "qwen"), listings={"box": ["qwen"]})
    h.choice.start()
    h.run_posted()  # listed before the local model loaded: nothing picked yet
    assert not h.choice.is_remote
    h.worker_says(LOCAL)
    assert h.choice.remote_target == ("box", "qwen") and h.seen[-1] == Switched(("box", "qwen"))
    assert not h.events(Remember)  # it was the one saved
    h.choice.use_local("/models/m.gguf")
    h.worker_says(LOCAL)  # a later load never picks it again
    assert not h.choice.is_remote and h.events(Remember) == [Remember("local")]


def test_the_engine_used_last_waits_for_its_endpoints_answer(box: None) -> None:
    h = Harness(last_engine=remote_engine_setting("box", "qwen"), listings={"box": ["qwen"]})
    waiting: list[Callable[[], None]] = []
    h.choice._in_background = waiting.append  # the listing is slow
    h.choice.start()
    h.worker_says(LOCAL)
    assert not h.choice.is_remote and h.choice.remote_models == {"box": None}
    waiting.pop()()
    h.run_posted()
    assert h.choice.remote_target == ("box", "qwen")


@pytest.mark.parametrize(
    ("listing", "short", "forgotten"),
    [
        (["other"], "box no longer lists qwen, the model used last", False),
        (RemoteError(p.ErrorKind.UNAUTHORIZED, "HTTP 401"), "box, the remote engine used last, cannot be used now", False),
        (None, "gone, the remote engine used last, is no longer set up", True),
    ],
)
def test_an_engine_used_last_that_cannot_answer_says_why(
    box: None, listing: list[str] | RemoteError | None, short: str, forgotten: bool
) -> None:
    name = "gone" if listing is None else "box"
    h = Harness(last_engine=remote_engine_setting(name, "qwen"), listings={"box": listing or []})
    h.choice.start()
    h.worker_says(LOCAL)
    skipped = h.events(RestoreSkipped)
    assert len(skipped) == 1 and skipped[0].short == short and not h.choice.is_remote  # type: ignore[attr-defined]
    if isinstance(listing, RemoteError):
        assert skipped[0].detail.startswith("The server refused the API key:")  # type: ignore[attr-defined]
    assert h.events(Remember) == ([Remember("local")] if forgotten else [])


def test_the_switcher_lists_local_models_then_endpoints(box: None, tmp_path: Path) -> None:
    model = tmp_path / "mine.gguf"
    model.write_bytes(b"x" * 2_000_000)
    ModelRegistry().add(ModelRecord("mine", str(model), "0" * 64, 2_000_000, "local:" + str(model)))
    EndpointRegistry().add(Endpoint("empty", "http://127.0.0.1:8/v1"))
    h = Harness(listings={"box": ["/srv/models/qwen.gguf"], "empty": []})
    assert [(e.kind, e.label) for e in h.choice.entries()] == [
        ("local", "mine · 2 MB · training-free modes · your file"),
        ("local", "m"),  # the local model, not registered
        ("separator", ""),
        ("remote", "box · listing models…"),
        ("remote", "empty · listing models…"),
        ("add-remote", "Add remote engine…"),
    ]
    h.choice.start()
    h.run_posted()
    entries = h.choice.entries()
    assert [(e.label, e.target) for e in entries if e.kind == "remote"] == [
        ("box / qwen.gguf", "box\n/srv/models/qwen.gguf"),  # llama-server's model id is a path
        ("empty · no models (pick to retry)", "empty\n"),
    ]
    assert h.choice.current_target() == "/models/m.gguf"
    h.choice.use_remote("box", "/srv/models/qwen.gguf")
    assert h.choice.current_target() == "box\n/srv/models/qwen.gguf"
    h.choice.remove_endpoint("box")  # the one answering: back to the local model
    assert not h.choice.is_remote and "box" not in h.choice.remote_models
    assert [e.name for e in EndpointRegistry().all()] == ["empty"]  # box is gone, and only box


def test_restore_now_is_the_same_rule_without_waiting(isolated_data: Path) -> None:
    """`specee chat --last-engine` asks restore_now: the endpoint is listed there and then."""
    assert restore_now("local") == (None, None)
    assert restore_now(remote_engine_setting("box", "stub-model"))[1] == (
        "box, the remote engine used last, is no longer set up",
        "",
    )
    EndpointRegistry().add(Endpoint("dead", f"http://127.0.0.1:{free_port()}"))
    target, why = restore_now(remote_engine_setting("dead", "stub-model"))
    assert target is None and why and why[1].startswith("The server cannot be reached:")
    with scripted_server(lambda write, over: None) as url:
        EndpointRegistry().add(Endpoint("box", url))
        assert restore_now(remote_engine_setting("box", "stub-model")) == (("box", "stub-model"), None)
        assert restore_now(remote_engine_setting("box", "other"))[1] == ("box no longer lists other, the model used last", "")


def test_specee_chat_picks_the_engine_the_window_used_last(
    isolated_data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.cli import _last_engine, build_parser
    from engine.cli import main as cli

    with scripted_server(lambda write, over: write(piece("Paris", "stop"))) as url:
        EndpointRegistry().add(Endpoint("box", url))
        save_settings(AppSettings(engine=remote_engine_setting("box", "stub-model")))
        monkeypatch.setattr("sys.stdin", io.StringIO("Capital of France?\n/quit\n"))
        assert cli(["chat", "--last-engine", "--temperature", "0"]) == 0
    out, err = capsys.readouterr()
    assert "box/stub-model" in err and "Paris" in out
    EndpointRegistry().remove("box")  # gone: the local model answers, and the chat says why first
    args = build_parser().parse_args(["chat", "--last-engine"])
    _last_engine(args)
    assert args.endpoint is None and args.model is None
    assert "box, the remote engine used last, is no longer set up: chatting with the local model." in capsys.readouterr().err
