"""`specee serve` with the official openai client: a real server process, the real worker and model.

One keyed server runs for the module (the key rules are tested on it too); answers are greedy and
short, so the module takes seconds.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest

from engine.cli import main as cli_main
from engine.serve import schema
from engine.serve.errors import ApiError
from engine.serve.launcher import ServerProcess
from engine.serve.security import bind_problem, is_local

KEY = "test-key-3f9a"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
COUNT = [{"role": "user", "content": "Count from 1 to 1000, separated by commas."}]


@pytest.fixture(scope="module")
def served(model_path: Path):
    # one request at a time, as before --parallel (the queue's tests below); tests/test_serve_parallel.py batches
    server = ServerProcess(model=model_path, mode="vanilla", api_key=KEY, extra_args=["--parallel", "1"])
    server.start(timeout=180)
    yield server
    server.stop()


def client(server: ServerProcess, key: str | None = KEY) -> openai.OpenAI:
    # no retries: a test must see the server's first answer
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key or "none", max_retries=0, timeout=60)


def ask(server: ServerProcess, text: str, max_tokens: int = 12, **kw) -> openai.types.chat.ChatCompletion:
    messages = [{"role": "user", "content": text}]
    kw = {"temperature": 0, **kw}
    return client(server).chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=max_tokens, **kw)


def raw_request(server: ServerProcess, method: str, path: str, body: bytes = b"", headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request(method, path, body=body, headers={"Authorization": f"Bearer {KEY}", **(headers or {})})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data) if data else None


def wait_idle(server: ServerProcess, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = server.health()
        if state.get("status") == "ok" and not state["busy"] and not state["queued"]:
            return state
        time.sleep(0.1)
    raise AssertionError(f"the server stayed busy: {server.health()}")


# -- the OpenAI API ------------------------------------------------------------------------------


def test_chat_non_streaming(served: ServerProcess) -> None:
    reply = ask(served, "What is the capital of France? Answer in one word.", max_tokens=16)
    assert reply.object == "chat.completion" and reply.model == MODEL_ID
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and "Paris" in choice.message.content  # type: ignore[operator]
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens >= 1 and reply.usage.prompt_tokens > 5


def test_chat_streaming_matches_non_streaming(served: ServerProcess) -> None:
    whole = ask(served, "Name three colours.", max_tokens=16).choices[0].message.content
    stream = client(served).chat.completions.create(
        model=MODEL_ID,
        messages=[{"role": "user", "content": "Name three colours."}],
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert len([p for p in pieces if p]) > 3  # it streamed, token by token
    assert "".join(pieces) == whole
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 16


def test_max_tokens_ends_with_length(served: ServerProcess) -> None:
    reply = client(served).chat.completions.create(model=MODEL_ID, messages=COUNT, max_tokens=5, temperature=0)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 5


def test_stop_string_ends_the_answer_before_it(served: ServerProcess) -> None:
    full = client(served).chat.completions.create(model=MODEL_ID, messages=COUNT, max_tokens=24, temperature=0)
    text = full.choices[0].message.content
    assert "4" in text, text  # type: ignore[operator]
    reply = client(served).chat.completions.create(model=MODEL_ID, messages=COUNT, max_tokens=24, temperature=0, stop=["4"])
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.content == text[: text.index("4")]  # type: ignore[index]


def test_seeded_sampling_repeats(served: ServerProcess) -> None:
    def sample(seed: int) -> str:
        messages = [{"role": "user", "content": "Write one sentence about the sea."}]
        reply = client(served).chat.completions.create(
            model=MODEL_ID, messages=messages, max_tokens=16, temperature=1.0, top_p=0.9, seed=seed
        )
        return reply.choices[0].message.content  # type: ignore[return-value]

    assert sample(7) == sample(7)


def test_text_completion_uses_the_raw_prompt(served: ServerProcess) -> None:
    reply = client(served).completions.create(model=MODEL_ID, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert reply.object == "text_completion"
    assert "Paris" in reply.choices[0].text
    # the prompt went in as is: 5 tokens, no chat template around it
    assert reply.usage.prompt_tokens < 10
    streamed = client(served).completions.create(
        model=MODEL_ID, prompt="The capital of France is", max_tokens=6, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == reply.choices[0].text


def test_a_completion_prompt_too_long_for_the_context_is_400_not_cut(served: ServerProcess) -> None:
    with pytest.raises(openai.BadRequestError, match="shorten it"):
        client(served).completions.create(model=MODEL_ID, prompt="word " * 6000, max_tokens=4)


def test_models_and_health(served: ServerProcess) -> None:
    models = client(served).models.list()
    assert [m.id for m in models.data] == [MODEL_ID]
    state = served.health()
    assert state["status"] == "ok" and state["mode"] == "vanilla" and state["model"] == MODEL_ID


# -- errors -------------------------------------------------------------------------------------


def test_bad_settings_are_400(served: ServerProcess) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        ask(served, "hi", temperature=9)
    assert "temperature" in err.value.message and err.value.body["param"] == "temperature"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client(served).chat.completions.create(model=MODEL_ID, messages=[], max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        ask(served, "hi", max_tokens=10**7)


def test_unknown_model_is_404(served: ServerProcess) -> None:
    with pytest.raises(openai.NotFoundError, match=MODEL_ID):
        client(served).chat.completions.create(model="gpt-4o", messages=COUNT, max_tokens=4)
    # naming no model gets the one served (curl one-liners, tools that leave it out)
    body = json.dumps({"messages": COUNT, "max_tokens": 4, "temperature": 0}).encode()
    status, reply = raw_request(served, "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    assert status == 200 and reply["model"] == MODEL_ID and reply["choices"][0]["message"]["content"]


def test_api_key_is_required(served: ServerProcess) -> None:
    with pytest.raises(openai.AuthenticationError):
        client(served, key="wrong").models.list()
    status, body = raw_request(served, "GET", "/v1/models", headers={"Authorization": ""})
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert served.health()["status"] == "ok"  # /health needs no key


def test_oversized_and_malformed_bodies(served: ServerProcess) -> None:
    big = json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": "x" * (2 << 20)}]}).encode()
    status, body = raw_request(served, "POST", "/v1/chat/completions", big)
    assert status == 413 and body["error"]["code"] == "request_too_large"
    status, body = raw_request(served, "POST", "/v1/chat/completions", b"{not json")
    assert status == 400 and body["error"]["code"] == "invalid_json"


def test_foreign_host_and_origin_are_refused(served: ServerProcess) -> None:
    # DNS rebinding and cross-site pages: a browser would send these headers
    status, _ = raw_request(served, "GET", "/v1/models", headers={"Host": "evil.example:80"})
    assert status == 403
    status, _ = raw_request(served, "GET", "/v1/models", headers={"Origin": "https://evil.example"})
    assert status == 403
    status, _ = raw_request(served, "GET", "/v1/models", headers={"Origin": f"http://localhost:{served.port}"})
    assert status == 200


def test_refuses_remote_bind_without_flag_and_key(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECEE_API_KEY", raising=False)
    assert cli_main(["serve", "--host", "0.0.0.0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert cli_main(["serve", "--host", "0.0.0.0", "--allow-remote"]) == 2
    assert "API key" in capsys.readouterr().err
    assert bind_problem("0.0.0.0", True, "k") == ""
    assert is_local("127.0.0.1") and is_local("[::1]") and is_local("localhost") and not is_local("192.168.1.2")


def test_a_frozen_app_serves_through_its_own_executable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installer has no Python to run `-m engine.cli`: the launcher runs the app with the serve flag,
    and specee_entry.py hands the rest of the command line to `specee serve` (here refused: a remote bind)."""
    from engine.serve.launcher import FROZEN_SERVE_FLAG, serve_command
    from specee_entry import main as app_main

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert serve_command() == [sys.executable, FROZEN_SERVE_FLAG]
    monkeypatch.delenv("SPECEE_API_KEY", raising=False)
    assert app_main(["specee-chat", FROZEN_SERVE_FLAG, "--host", "0.0.0.0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err


def test_request_parsing_without_a_server() -> None:
    req = schema.parse_chat(
        {"model": "m", "messages": [{"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
                                    {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}],
         "temperature": 0, "stop": "\n", "max_completion_tokens": 9},
        "m", 2048,
    )  # fmt: skip
    assert req.messages[0] == {"role": "system", "content": "be brief"}
    assert req.continue_answer and req.sampling.top_k == 1 and req.sampling.stop == ["\n"] and req.sampling.max_tokens == 9
    for body, param in [
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 17}, "n"),
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools[0].function"),
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_p": "high"}, "top_p"),
        ({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"model": "m", "messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": [{"role": "system", "content": "x"}]}, "messages"),
    ]:
        with pytest.raises(ApiError) as err:
            schema.parse_chat(body, "m", 2048)
        assert err.value.status == 400 and err.value.param == param, body
    with pytest.raises(ApiError, match="one string"):
        schema.parse_completion({"model": "m", "prompt": [1, 2, 3]}, "m", 2048)


# -- concurrency and disconnects ---------------------------------------------------------------------


def test_concurrent_clients_get_their_own_answers(served: ServerProcess) -> None:
    questions = ["Name a fruit.", "What is 2 plus 2?", "Say hello in French.", "Name a planet."]
    alone = [ask(served, q).choices[0].message.content for q in questions]
    together: dict[int, str] = {}

    def run(i: int) -> None:
        stream = client(served).chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": questions[i]}], max_tokens=12, temperature=0, stream=True
        )
        together[i] = "".join(c.choices[0].delta.content or "" for c in stream)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(questions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [together.get(i) for i in range(len(questions))] == alone


def test_client_disconnect_cancels_the_answer(served: ServerProcess) -> None:
    before = wait_idle(served)["cancelled"]
    stream = client(served).chat.completions.create(model=MODEL_ID, messages=COUNT, max_tokens=2000, temperature=0, stream=True)
    received = 0
    for chunk in stream:
        received += bool(chunk.choices and chunk.choices[0].delta.content)
        if received >= 3:
            break
    stream.close()  # the client goes away mid-answer
    state = wait_idle(served, timeout=20)  # not 2000 tokens later
    assert state["cancelled"] == before + 1
    t0 = time.monotonic()
    assert ask(served, "Say hi.", max_tokens=4).choices[0].message.content
    assert time.monotonic() - t0 < 15


def test_queued_request_left_by_its_client_never_runs(served: ServerProcess) -> None:
    """A non-streaming request whose client gives up while waiting for its turn is dropped."""
    cancelled = wait_idle(served)["cancelled"]
    running = client(served).chat.completions.create(model=MODEL_ID, messages=COUNT, max_tokens=2000, temperature=0, stream=True)
    next(iter(running))  # it holds the turn now
    body = json.dumps({"model": MODEL_ID, "messages": COUNT, "max_tokens": 2000, "temperature": 0})
    sock = socket.create_connection(("127.0.0.1", served.port))
    sock.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
    )
    deadline = time.monotonic() + 10
    while served.health()["queued"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.health()["queued"] == 1
    sock.close()
    deadline = time.monotonic() + 10
    while served.health()["queued"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.health()["queued"] == 0  # it left the queue before its turn
    running.close()
    # only the running answer was cancelled; the queued one never started
    assert wait_idle(served, timeout=20)["cancelled"] == cancelled + 1


def test_worker_death_is_503_then_the_next_request_works(served: ServerProcess) -> None:
    wait_idle(served)
    stream = client(served).chat.completions.create(model=MODEL_ID, messages=COUNT, max_tokens=2000, temperature=0, stream=True)
    pid = served.health()["worker_pid"]
    with pytest.raises(openai.APIError, match="engine process") as err:
        for chunk in stream:
            if pid and chunk.choices and chunk.choices[0].delta.content:
                os.kill(pid, signal.SIGKILL)
                pid = 0
    # told as this server's, not the app's ("Your conversation is kept; restart the engine")
    assert "this server" in err.value.message and "signal 9" in err.value.message, err.value.message
    assert "conversation" not in err.value.message and "restart the engine" not in err.value.message
    assert ask(served, "Say hi.", max_tokens=4).choices[0].message.content
    assert served.health()["restarts"] == 1


def test_a_launched_server_never_outlives_its_launcher(model_path: Path, tmp_path: Path) -> None:
    """The app starts `specee serve` for its Serve switch; when the app dies, even by kill -9, the
    server (and its engine) stop too instead of holding the port and the model's memory."""
    script = (
        "import sys\n"
        "from engine.serve.launcher import ServerProcess\n"
        f"s = ServerProcess(model={str(model_path)!r}, mode='vanilla')\n"
        "s.start(timeout=180)\n"
        "print(s.pid, s.port, flush=True)\n"
        "sys.stdin.read()\n"
    )
    launcher = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = launcher.stdout.readline() if launcher.stdout else ""
        server_pid, port = map(int, line.split())
        # the server answers on its port with its model loaded (start() returned), and it is the process we watch
        state = _health(port)
        assert state.get("status") == "ok", state
        worker_pid = state["worker_pid"]
        assert _alive(server_pid) and worker_pid and _alive(worker_pid)
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 30
        while (_alive(server_pid) or _alive(worker_pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(server_pid), "the server outlived the process that started it"
        assert not _alive(worker_pid), "the server's engine outlived the process that started the server"
        assert _health(port) == {}, "something still answers on the server's port"
    finally:
        launcher.kill()


def _health(port: int) -> dict:
    """GET /health on 127.0.0.1:port: its JSON, or {} when nothing answers there."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/health")
        return json.loads(conn.getresponse().read())
    except (OSError, ValueError):
        return {}
    finally:
        conn.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie has exited (its parent, gone, never reaped it)
    except FileNotFoundError:
        return False
