"""Remote engines (issue 15): an OpenAI-compatible server answers through the same ChatSession as the
local worker. Against a real llama-server built from our pinned llama.cpp source (started here on
127.0.0.1 with the default model), and against small real HTTP servers that misbehave on purpose:
closed port, silence, garbage, a stream cut short (tests/remote_servers.py). No test touches the
user's real OS keyring (tests/conftest.py).

To run the round trip against another server (e.g. `specee serve`), add a fixture that yields its
base URL and name it in `openai_server`'s params (and in conftest's SLOW_FIXTURES)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import keyring
import keyring.backends.fail
import pytest

from engine import protocol as p
from engine.chats.session import ChatSession
from engine.chats.store import ConversationStore
from engine.cli import main as cli
from engine.paths import REPO_ROOT
from engine.remote import endpoints
from engine.remote.client import RemoteClient, display_model
from engine.remote.endpoints import Endpoint, EndpointError, EndpointRegistry, api_key, normalise_base_url, store_api_key
from engine.remote.openai_api import RemoteError, Timeouts, list_models
from tests.remote_servers import MemoryKeyring, Script, free_port, piece, scripted_server, silent_server

QUICK = Timeouts(connect=2.0, read=1.0)
# building llama-server (first run on a machine only; `make test` builds it before pytest) takes minutes
SERVER_BUILD_TIMEOUT = pytest.mark.timeout(1800)


@pytest.fixture(params=["llama_server", "specee_serve"])
def openai_server(request: pytest.FixtureRequest) -> str:
    """The base URL of each real OpenAI-compatible server the round trip runs against: upstream
    llama-server from the same pinned sources, and our own `specee serve`."""
    return request.getfixturevalue(request.param)


@pytest.fixture(params=["llama_server_with_key", "specee_serve_with_key"])
def keyed_server(request: pytest.FixtureRequest) -> str:
    """The same servers, refusing any request without the API key "the-right-key"."""
    return request.getfixturevalue(request.param)


# -- driving a ChatSession with a RemoteClient ------------------------------------------------------


def ask(chat: ChatSession, client: RemoteClient, gen: p.Generate | None, timeout: float = 120) -> list[p.Message]:
    """Send the session's request and feed it every event until its Done or Error."""
    assert gen is not None
    client.send(gen)
    events: list[p.Message] = []
    while True:
        ev = client.next_event(timeout)
        events.append(ev)
        chat.on_event(ev)
        if isinstance(ev, p.Done | p.Error) and ev.request_id == gen.request_id:
            return events


def connect(base_url: str, tmp_path: Path, name: str = "test", key: str | None = None, timeouts: Timeouts = QUICK):
    """A started client, its Loaded, and a ChatSession with a store that has seen that Loaded."""
    client = RemoteClient(Endpoint(name, normalise_base_url(base_url)), key, timeouts=timeouts)
    client.start()
    chat = ChatSession(ConversationStore(tmp_path / "c.db"), p.Sampling.greedy(24))
    loaded = client.load()
    chat.on_event(loaded)
    return client, chat, loaded


def check_chat_roundtrip(base_url: str, tmp_path: Path) -> None:
    """What any OpenAI-compatible server must do for the chat: stream a greedy answer in pieces
    with speed, stop at max_tokens, record which engine answered, and continue a cut answer."""
    client, chat, loaded = connect(base_url, tmp_path, "local-test", timeouts=Timeouts(connect=5, read=120))
    try:
        assert loaded.mode == "remote" and loaded.name.startswith("local-test/") and loaded.model_path == base_url + "/v1"
        events = ask(chat, client, chat.send("What is the capital of France? Answer in one sentence."))
        tokens = [e for e in events if isinstance(e, p.Token)]
        stats = [e for e in events if isinstance(e, p.Stats)]
        done = events[-1]
        assert isinstance(done, p.Done) and done.finish_reason == "stop", events[-1]
        assert len(tokens) >= 3 and done.text.strip() and "".join(t.text for t in tokens) == done.text
        assert [t.index for t in tokens] == list(range(len(tokens)))
        assert stats and stats[-1].mode == "remote" and stats[-1].decode_tok_s > 0 and stats[-1].ttft_ms > 0
        assert stats[-1].n_generated >= len(tokens) and stats[-1].n_prompt > 0  # the server's usage
        assert chat.messages[-1]["content"] == done.text and chat.messages[-1]["stats"]["decode_tok_s"] > 0
        stored = chat.store.get(chat.conv_id).messages
        assert stored[-1].content == done.text and stored[-1].complete
        assert stored[-1].engine == f"remote:local-test/{display_model(client.model)}" == chat.engine

        chat.sampling = p.Sampling.greedy(4)
        events = ask(chat, client, chat.send("Count from one to twenty in words."))
        assert isinstance(events[-1], p.Done) and events[-1].finish_reason == "length"
        assert chat.can_continue and "4-token limit" in chat.notices[-1]
        cut = chat.answer
        events = ask(chat, client, chat.continue_answer())
        assert isinstance(events[-1], p.Done) and chat.answer.startswith(cut) and len(chat.answer) > len(cut)
    finally:
        client.stop()


# -- endpoints and keys -------------------------------------------------------------------------------


def test_model_ids_that_are_file_paths_show_as_file_names() -> None:
    assert display_model("/home/me/models/SmolLM2.Q4_1.gguf") == "SmolLM2.Q4_1.gguf"
    assert display_model("C:\\models\\qwen.gguf") == "qwen.gguf"
    assert display_model("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"  # a hub id keeps its owner


def test_base_urls_are_validated_and_normalised() -> None:
    assert normalise_base_url(" http://127.0.0.1:8080 ") == "http://127.0.0.1:8080/v1"
    assert normalise_base_url("http://127.0.0.1:8080/") == "http://127.0.0.1:8080/v1"
    assert normalise_base_url("HTTPS://API.Example.com/v1/") == "https://api.example.com/v1"
    assert normalise_base_url("https://example.com/api/v1/chat/completions") == "https://example.com/api/v1"
    assert normalise_base_url("https://example.com/v1beta/models") == "https://example.com/v1beta"
    assert normalise_base_url("http://host:8000/openai") == "http://host:8000/openai/v1"
    for bad in ("127.0.0.1:8080", "ftp://host/v1", "http://", "http://host:99999", "http://host/v1?key=x", ""):
        with pytest.raises(EndpointError):
            normalise_base_url(bad)


def test_endpoints_are_kept_without_their_key_which_goes_to_the_keyring(
    isolated_data: Path, memory_keyring: MemoryKeyring
) -> None:
    reg = EndpointRegistry()
    added = reg.add(Endpoint("lab-box", "http://10.0.0.5:8080", "qwen"))
    assert added.base_url == "http://10.0.0.5:8080/v1"
    assert store_api_key("lab-box", "sk-secret-123") == ""
    assert memory_keyring.passwords == {("specee-chat", "lab-box"): "sk-secret-123"}
    assert api_key("lab-box") == "sk-secret-123"
    assert "sk-secret" not in (isolated_data / "endpoints.json").read_text()
    reg.add(Endpoint("lab-box", "http://10.0.0.5:8080", "llama"))  # replaced by name
    assert [(e.name, e.model) for e in EndpointRegistry().all()] == [("lab-box", "llama")]
    with pytest.raises(EndpointError, match="lab-box"):
        reg.get("nope")  # the message lists what exists
    with pytest.raises(EndpointError, match="cannot name"):
        reg.add(Endpoint("bad name!", "http://h"))
    reg.remove("lab-box")
    assert reg.all() == [] and memory_keyring.passwords == {} and api_key("lab-box") is None


def test_without_a_keyring_the_key_stays_in_this_process_and_the_env_can_give_one(
    isolated_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "no OS keyring" in store_api_key("box", "sk-1")
    assert api_key("box") == "sk-1" and api_key("other") is None
    monkeypatch.setenv(endpoints.API_KEY_ENV, "sk-env")
    assert api_key("other") == "sk-env" and api_key("box") == "sk-1"


def test_a_damaged_endpoints_file_is_set_aside(isolated_data: Path) -> None:
    isolated_data.mkdir(parents=True)
    (isolated_data / "endpoints.json").write_text("{not json")
    assert EndpointRegistry().all() == []
    assert list(isolated_data.glob("endpoints.broken-*.json"))


# -- errors lose nothing -----------------------------------------------------------------------------


def test_a_closed_port_is_unreachable_and_the_question_comes_back(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    client = RemoteClient(Endpoint("gone", normalise_base_url(url), "m"), timeouts=QUICK)
    client.start()
    with pytest.raises(RemoteError) as err:
        client.load()
    assert err.value.kind == "unreachable" and url in str(err.value) and "running" in str(err.value)
    chat = ChatSession(ConversationStore(tmp_path / "c.db"))
    events = ask(chat, client, chat.send("Are you there?"))
    assert isinstance(events[-1], p.Error) and events[-1].kind == "unreachable"
    assert chat.restored_question == "Are you there?" and chat.messages == [] and not chat.streaming
    assert chat.notices[-1].startswith("**The server cannot be reached:**")


def test_a_silent_server_times_out(tmp_path: Path) -> None:
    with silent_server() as url:
        client = RemoteClient(Endpoint("mute", normalise_base_url(url), "m"), timeouts=Timeouts(connect=2.0, read=0.5))
        client.start()
        chat = ChatSession(ConversationStore(tmp_path / "c.db"))
        t0 = time.monotonic()
        events = ask(chat, client, chat.send("Hello?"))
        assert time.monotonic() - t0 < 10
    assert isinstance(events[-1], p.Error) and events[-1].kind == "timeout" and "0.5 s" in events[-1].message
    assert chat.restored_question == "Hello?" and "did not answer in time" in chat.notices[-1]


def _part_then(rest: Script) -> Script:
    def script(write: Callable[[str], None], over: threading.Event) -> None:
        write(piece("Part of"))
        write(piece(" it"))
        rest(write, over)

    return script


@pytest.mark.parametrize(
    ("rest", "kind", "said"),
    [
        (lambda write, over: over.wait(30), "timeout", "sent nothing"),
        (lambda write, over: write("data: {this is not json\n\n"), "bad_response", "not JSON"),
        (lambda write, over: write('data: {"choices": "many"}\n\n'), "bad_response", "unknown shape"),
        (lambda write, over: None, "server_stopped", "ended before the answer was finished"),
        (lambda write, over: write('data: {"error": {"message": "out of memory"}}\n\n'), "bad_response", "out of memory"),
    ],
    ids=["stalls", "garbage", "wrong-shape", "cut-short", "error-event"],
)
def test_a_failure_mid_answer_keeps_the_part_already_streamed(
    rest: Script, kind: str, said: str, tmp_path: Path, isolated_data: Path
) -> None:
    with scripted_server(_part_then(rest)) as url:
        client, chat, _ = connect(url, tmp_path, timeouts=Timeouts(connect=2.0, read=0.5))
        events = ask(chat, client, chat.send("Tell me"))
        client.stop()
    error = events[-1]
    assert isinstance(error, p.Error) and error.kind == kind and said in error.message, error
    assert chat.messages[-1] == {**chat.messages[-1], "role": "assistant", "content": "Part of it", "interrupted": True}
    assert chat.can_continue and not chat.restored_question
    stored = chat.store.get(chat.conv_id).messages
    assert [(m.role, m.content, m.complete) for m in stored] == [("user", "Tell me", True), ("assistant", "Part of it", False)]
    assert stored[-1].engine == "remote:test/stub-model"


def test_stop_answers_at_once_and_keeps_the_part(tmp_path: Path) -> None:
    release = threading.Event()

    def held(write: Callable[[str], None], over: threading.Event) -> None:
        for i in range(10):
            write(piece(f" w{i}"))
        release.wait(30)  # the server holds the answer open until the test lets it go on
        for i in range(10, 20):
            write(piece(f" w{i}"))

    with scripted_server(held) as url:
        client, chat, _ = connect(url, tmp_path)
        gen = chat.send("Go on and on")
        assert gen is not None
        before = set(threading.enumerate())
        client.send(gen)
        (stream,) = [t for t in threading.enumerate() if t not in before and t.name == "remote-stream"]
        try:
            while len(chat.answer) < 10:
                chat.on_event(client.next_event(10))
            cancel = chat.cancel()
            assert cancel is not None
            client.send(cancel)
            # at once: the server still holds the stream open, so Done can only come from the cancel
            events = list(client.events_of(gen.request_id, timeout=10))
        finally:
            release.set()
        for ev in events:
            chat.on_event(ev)
        assert isinstance(events[-1], p.Done) and events[-1].finish_reason == "cancelled"
        assert chat.notices[-1] == "[stopped]" and chat.answer.startswith(" w0 w1") and not chat.streaming
        # the server goes on; the stream's thread wakes on its next piece and hangs up, sending nothing
        stream.join(10)
        assert not stream.is_alive()
        with pytest.raises(RemoteError):  # nothing more of that answer arrived
            client.next_event(0)
        client.stop()


def test_a_second_request_while_streaming_is_refused_as_busy(tmp_path: Path) -> None:
    with scripted_server(lambda write, over: (write(piece("x")), over.wait(30))) as url:
        client = RemoteClient(Endpoint("t", normalise_base_url(url), "stub-model"), timeouts=QUICK)
        client.start()
        first = client.generate([{"role": "user", "content": "a"}])
        second = client.generate([{"role": "user", "content": "b"}])
        with pytest.raises(RemoteError) as err:
            list(client.events_of(second, timeout=5))
        assert err.value.kind == "busy"
        client.cancel(first)
        client.stop()


# -- the CLI ------------------------------------------------------------------------------------------


def test_cli_adds_lists_and_removes_endpoints(
    isolated_data: Path, memory_keyring: MemoryKeyring, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("sk-2\n"))
    keyring.set_keyring(keyring.backends.fail.Keyring())
    assert cli(["endpoints", "add", "headless", "http://127.0.0.1:1", "--api-key-stdin"]) == 0
    err = capsys.readouterr().err
    assert "NOT saved: no OS keyring" in err and "SPECEE_API_KEY=... specee chat --endpoint headless" in err
    keyring.set_keyring(memory_keyring)
    with scripted_server(lambda write, over: None) as url:
        monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("sk-from-stdin\n"))
        assert cli(["endpoints", "add", "stub", url, "--api-key-stdin", "--model", "stub-model"]) == 0
        out = capsys.readouterr().out
        assert f"added stub: {url}/v1" in out and "models: stub-model" in out and "keyring" in out
        assert memory_keyring.passwords == {("specee-chat", "stub"): "sk-from-stdin"}
        assert "sk-from-stdin" not in (isolated_data / "endpoints.json").read_text()
        assert cli(["endpoints", "add", "dead", f"http://127.0.0.1:{free_port()}"]) == 0  # kept even if down now
        assert "not available now: cannot connect" in capsys.readouterr().err
        assert cli(["endpoints"]) == 0
        out = capsys.readouterr().out
        assert "stub" in out and "model: stub-model" in out and "API key: OS keyring" in out and "dead" in out
    assert cli(["endpoints", "add", "bad", "localhost:8080"]) == 2
    assert "http://" in capsys.readouterr().err
    assert cli(["endpoints", "remove", "nope"]) == 2
    assert "stub" in capsys.readouterr().err  # says which exist
    assert cli(["endpoints", "remove", "stub"]) == 0
    assert memory_keyring.passwords == {}
    assert cli(["chat", "--endpoint", "stub"]) == 2
    assert "no endpoint named 'stub'" in capsys.readouterr().err


# -- against real servers -------------------------------------------------------------------------------


@SERVER_BUILD_TIMEOUT
def test_chat_round_trip(openai_server: str, tmp_path: Path) -> None:
    check_chat_roundtrip(openai_server, tmp_path)


@SERVER_BUILD_TIMEOUT
def test_llama_server_lists_its_model(llama_server: str, model_path: Path) -> None:
    models = list_models(Endpoint("l", normalise_base_url(llama_server)))
    assert len(models) == 1 and models[0].id and models[0].meta.get("n_vocab", 0) > 0
    client = RemoteClient(Endpoint("l", normalise_base_url(llama_server), "no-such-model"), timeouts=QUICK)
    client.start()
    with pytest.raises(RemoteError, match=f"no model 'no-such-model'; it offers: {models[0].id}") as err:
        client.load()
    assert err.value.kind == "no_model"


@SERVER_BUILD_TIMEOUT
def test_a_wrong_api_key_is_refused_clearly(keyed_server: str, tmp_path: Path) -> None:
    for key in ("the-wrong-key", None):
        client = RemoteClient(Endpoint("keyed", normalise_base_url(keyed_server), "any"), key, timeouts=QUICK)
        client.start()
        chat = ChatSession(ConversationStore(tmp_path / f"{key}.db"))
        events = ask(chat, client, chat.send("Hi"))
        error = events[-1]
        assert isinstance(error, p.Error) and error.kind == "unauthorized", error
        assert "HTTP 401" in error.message and "'keyed'" in error.message and "the-wrong-key" not in error.message
        assert ("check the API key" if key else "has none") in error.message
        assert chat.restored_question == "Hi" and chat.notices[-1].startswith("**The server refused the API key:**")
        client.stop()
    client, chat, _ = connect(keyed_server, tmp_path, key="the-right-key", timeouts=Timeouts(connect=5, read=120))
    events = ask(chat, client, chat.send("Hi"))
    assert isinstance(events[-1], p.Done) and chat.answer
    client.stop()


@SERVER_BUILD_TIMEOUT
def test_specee_chat_talks_to_an_endpoint(llama_server: str, isolated_data: Path) -> None:
    """`specee endpoints add` then `specee chat --endpoint` in real processes; the key comes from
    SPECEE_API_KEY there (no keyring), and an unneeded key does no harm."""
    env = {**os.environ, "SPECEE_DATA_DIR": str(isolated_data), "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
           "SPECEE_API_KEY": "unused"}  # fmt: skip
    specee = [sys.executable, "-m", "engine.cli"]
    added = subprocess.run(
        [*specee, "endpoints", "add", "box", llama_server], env=env, capture_output=True, text=True, timeout=60
    )
    assert added.returncode == 0 and "models:" in added.stdout, added.stderr
    chat = subprocess.run(
        [*specee, "chat", "--endpoint", "box", "--temperature", "0", "--max-tokens", "16"],
        input="What is the capital of France?\n/quit\n", env=env, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
    )  # fmt: skip
    assert chat.returncode == 0, chat.stderr
    assert "box/" in chat.stderr and "(" + llama_server + "/v1)" in chat.stderr and "tok/s" in chat.stderr
    assert chat.stdout.replace(">", "").strip()  # the answer


def test_an_answer_with_no_length_limit_sends_no_max_tokens() -> None:
    """max_tokens 0 (the context's room, issue 23 item 15) is ours alone: the server's context decides."""
    from engine.remote.openai_api import chat_body

    unlimited = chat_body(p.Generate("r", [{"role": "user", "content": "hi"}], p.Sampling(max_tokens=0)), "m")
    assert "max_tokens" not in unlimited
    assert chat_body(p.Generate("r", [], p.Sampling(max_tokens=64)), "m")["max_tokens"] == 64
