"""`specee serve` is never silently wrong (issue 26, item 4): every system message reaches the model, a
chat too long for the context is refused unless the client asks for truncation, penalties and
logit_bias are honoured, malformed input of any shape is a 400, errors speak of the server,
/v1/models/{id}, ignored parameters, CORS for local browser clients.

One keyed server with a small context (512 tokens, so overflows are cheap) runs for the module.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import openai
import pytest

from engine.cli import main as cli_main
from engine.serve import schema
from engine.serve.errors import for_clients
from engine.serve.launcher import ServerProcess
from engine.serve.security import allowed_origin

KEY = "strict-key-81c2"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
N_CTX = 512
EXTENSION = "app://obsidian.md"
USER = {"role": "user", "content": "Name a colour."}
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def served(model_path: Path):
    server = ServerProcess(
        model=model_path, mode="vanilla", api_key=KEY, extra_args=["--ctx", str(N_CTX), "--allow-origin", EXTENSION]
    )
    server.start(timeout=180)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def vocab(model_path: Path):
    import llama_cpp

    return llama_cpp.Llama(model_path=str(model_path), vocab_only=True, verbose=False)


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=60)


def chat(server: ServerProcess, messages: list[dict], max_tokens: int = 1, **kw):
    kw = {"temperature": 0, **kw}
    return client(server).chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=max_tokens, **kw)


def raw(server: ServerProcess, method: str, path: str, body: bytes = b"", headers: dict | None = None):
    """(status, headers, the body's JSON or text) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request(method, path, body=body, headers={"Authorization": f"Bearer {KEY}", **(headers or {})})
    resp = conn.getresponse()
    data = resp.read().decode()
    conn.close()
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        parsed = data
    return resp.status, resp.headers, parsed


def post(server: ServerProcess, body: dict | bytes, path: str = "/v1/chat/completions", **headers: str):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return raw(server, "POST", path, data, {"Content-Type": "application/json", **headers})


def prompt_tokens(server: ServerProcess, messages: list[dict]) -> int:
    return chat(server, messages).usage.prompt_tokens


def text_tokens(server: ServerProcess, text: str) -> int:
    """The text's own tokens: a raw completion prompt goes in without any template."""
    reply = client(server).completions.create(model=MODEL_ID, prompt=text, max_tokens=1, temperature=0)
    return reply.usage.prompt_tokens


def assert_openai_error(status: int, body: dict, want_status: int = 400) -> dict:
    assert status == want_status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["message"] and body["error"]["type"]
    return body["error"]


# -- 1. every system message reaches the template ---------------------------------------------------

SECOND = "Always answer in French, even when the question is asked in English or German."


def test_a_second_system_message_reaches_the_prompt(served: ServerProcess) -> None:
    base = [{"role": "system", "content": "You are terse."}, USER]
    n_second = text_tokens(served, SECOND)
    with_second = [base[0], {"role": "system", "content": SECOND}, USER]
    assert prompt_tokens(served, with_second) - prompt_tokens(served, base) >= n_second
    # in the middle of the chat: it keeps its place (this template renders system messages anywhere)
    history = [base[0], {"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}, USER]
    middle = [*history[:3], {"role": "developer", "content": SECOND}, USER]
    assert prompt_tokens(served, middle) - prompt_tokens(served, history) >= n_second


SMOL_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# the kind of template that takes one system message, first, and raises on any other (Gemma, Mistral)
STRICT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] + '\n\n' %}{% set rest = messages[1:] %}"
    "{% else %}{% set sys = '' %}{% set rest = messages %}{% endif %}"
    "{% for message in rest %}{% if message['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}<turn>{{ message['role'] }}\n{% if loop.first %}{{ sys }}{% endif %}{{ message['content'] }}</turn>\n"
    "{% endfor %}<turn>assistant\n"
)
# ... and the kind that silently skips what it does not expect
SKIPPING_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' and loop.first %}[SYS]{{ message['content'] }}"
    "{% elif message['role'] != 'system' %}[{{ message['role'] }}]{{ message['content'] }}{% endif %}{% endfor %}[assistant]"
)


def _rendered(template: str, messages: list[dict]) -> str:
    from engine.llm.chat_prompt import ChatPrompt  # imports llama_cpp: not in the quick subset's venv

    prompt = ChatPrompt(template, "", "", lambda text: list(text))  # one token per character
    return "".join(prompt.fit(messages, 10_000).tokens)


@pytest.mark.slow  # engine.llm imports llama_cpp (not in the quick subset's venv)
def test_system_messages_keep_their_place_or_merge_into_the_first() -> None:
    chat_ = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Name a colour."},
    ]
    kept = _rendered(SMOL_TEMPLATE, chat_)
    assert kept.index("Hello.") < kept.index("<|im_start|>system\nAnswer in French.") < kept.index("Name a colour.")
    for template in (STRICT_TEMPLATE, SKIPPING_TEMPLATE):
        merged = _rendered(template, chat_)
        assert "Be terse.\n\nAnswer in French." in merged and merged.count("Answer in French.") == 1, merged
        assert merged.index("Answer in French.") < merged.index("Hi."), merged
    # one system message first: as before
    assert _rendered(STRICT_TEMPLATE, chat_[:2]) == "<turn>user\nBe terse.\n\nHi.</turn>\n<turn>assistant"


@pytest.mark.slow  # engine.llm imports llama_cpp (not in the quick subset's venv)
def test_the_app_still_trims_and_the_server_path_refuses() -> None:
    from engine.llm.chat_prompt import ChatPrompt, ContextOverflow

    prompt = ChatPrompt(SMOL_TEMPLATE, "", "", lambda text: text.split())  # type: ignore[return-value]  # one token per word
    turns = [{"role": "system", "content": "Be terse."}]
    for i in range(6):
        turns += [{"role": "user", "content": f"question {i} " + "w " * 20}, {"role": "assistant", "content": "a " * 20}]
    turns += [{"role": "system", "content": "Now in French."}, {"role": "user", "content": "last"}]
    fitted = prompt.fit(turns, 100)
    text = " ".join(fitted.tokens)
    assert fitted.dropped_messages >= 2 and "Be terse." in text and "Now in French." in text and "question 0" not in text
    with pytest.raises(ContextOverflow, match="shorten it"):
        prompt.fit(turns, 100, trim=False)


# -- 2. a chat longer than the context is refused, unless truncation is asked for ------------------

TOPIC = [
    ({"role": "user", "content": f"Tell me about topic {i}. " + "word " * 45}, {"role": "assistant", "content": "word " * 45})
    for i in range(6)
]
LONG_CHAT = [m for pair in TOPIC for m in pair] + [USER]  # about 600 tokens


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("messages", [LONG_CHAT, [{"role": "user", "content": "word " * 1000}]], ids=["turns", "one-message"])
def test_a_chat_longer_than_the_context_is_400(served: ServerProcess, messages: list[dict], stream: bool) -> None:
    status, headers, body = post(served, {"model": MODEL_ID, "messages": messages, "max_tokens": 16, "stream": stream})
    error = assert_openai_error(status, body)
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages", error
    assert "shorten it" in error["message"]
    assert "x-specee-truncated" not in headers


@pytest.mark.parametrize("stream", [False, True])
def test_truncation_auto_trims_and_says_so(served: ServerProcess, stream: bool) -> None:
    body = {"model": MODEL_ID, "messages": LONG_CHAT, "max_tokens": 4, "temperature": 0, "truncation": "auto", "stream": stream}
    status, headers, reply = post(served, body)
    assert status == 200, reply
    assert "oldest messages were left out" in headers["x-specee-truncated"]
    if not stream:
        assert reply["usage"]["prompt_tokens"] <= N_CTX and reply["choices"][0]["message"]["content"]
    else:
        assert reply.rstrip().endswith("data: [DONE]")
    # a raw prompt is never cut: truncation is for chats
    status, _, reply = post(served, {"model": MODEL_ID, "prompt": "hi", "truncation": "auto"}, "/v1/completions")
    assert assert_openai_error(status, reply)["param"] == "truncation"


def test_a_completion_prompt_too_long_says_context_length_exceeded(served: ServerProcess) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(served).completions.create(model=MODEL_ID, prompt="word " * 1000, max_tokens=4)
    assert err.value.code == "context_length_exceeded" and err.value.body["param"] == "prompt"  # type: ignore[index]


# -- 3. presence/frequency penalties and logit_bias ------------------------------------------------

REPEATS = [{"role": "user", "content": "Write the word yes ten times."}]  # greedy: "yes" on line after line


def test_logit_bias_forces_or_bans_a_token(served: ServerProcess, vocab) -> None:
    plain = chat(served, [USER], max_tokens=6).choices[0].message.content
    forced = vocab.tokenize(b"Banana", add_bos=False)[0]
    piece = vocab.detokenize([forced]).decode()
    assert not plain.startswith(piece)
    biased = chat(served, [USER], max_tokens=6, logit_bias={str(forced): 100}).choices[0].message.content
    assert biased.startswith(piece), biased
    first = vocab.tokenize(plain.encode(), add_bos=False)[0]
    banned = chat(served, [USER], max_tokens=6, logit_bias={str(first): -100}).choices[0].message.content
    assert banned != plain, banned


def test_penalties_change_a_repetitive_greedy_answer(served: ServerProcess) -> None:
    plain = chat(served, REPEATS, max_tokens=30).choices[0].message.content
    assert plain.count("\nyes") >= 3, plain
    for name in ("frequency_penalty", "presence_penalty"):
        penalised = chat(served, REPEATS, max_tokens=30, **{name: 2.0}).choices[0].message.content
        assert penalised.count("\nyes") < plain.count("\nyes"), (name, penalised)


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"frequency_penalty": "high"}, "frequency_penalty"),
        ({"logit_bias": {"abc": 5}}, "logit_bias"),
        ({"logit_bias": {"-1": 5}}, "logit_bias"),
        ({"logit_bias": {"42": 101}}, "logit_bias"),
        ({"logit_bias": {"42": "up"}}, "logit_bias"),
        ({"logit_bias": [42]}, "logit_bias"),
        ({"logit_bias": {"99999999": 5}}, None),  # beyond the vocabulary: the engine says so
    ],
)
def test_bad_penalties_and_biases_are_400(served: ServerProcess, extra: dict, param: str | None) -> None:
    status, _, body = post(served, {"model": MODEL_ID, "messages": [USER], "max_tokens": 2, **extra})
    error = assert_openai_error(status, body)
    assert error["param"] == param and (param or "logit_bias") in error["message"], error


# -- 4. malformed input of any shape is a 400 ---------------------------------------------------------


def _body(**fields: object) -> bytes:
    return json.dumps({"model": MODEL_ID, "messages": [USER], "max_tokens": 2, **fields}).encode()


MALFORMED = {
    "nested-1000": b"[" * 1000 + b"]" * 1000,
    "nested-in-a-field": _body()[:-1] + b', "metadata": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    "max_tokens-4300-digits": _body()[:-1] + b', "max_tokens": ' + b"9" * 4400 + b"}",
    "seed-4300-digits": _body()[:-1] + b', "seed": ' + b"1" * 5000 + b"}",
    "temperature-huge-int": _body(temperature=10**400),
    "seed-huge-int": _body(seed=10**300),
    "role-object": _body(messages=[{"role": {}, "content": "hi"}]),
    "role-list": _body(messages=[{"role": ["user"], "content": "hi"}]),
    "role-number": _body(messages=[{"role": 1, "content": "hi"}]),
    "content-number": _body(messages=[{"role": "user", "content": 5}]),
    "content-object": _body(messages=[{"role": "user", "content": {"text": "hi"}}]),
    "content-null": _body(messages=[{"role": "user", "content": None}]),
    "content-part-type-object": _body(messages=[{"role": "user", "content": [{"type": {}, "text": "hi"}]}]),
    "lone-surrogate": _body(messages=[{"role": "user", "content": "hi \ud800 there"}]),
    "lone-surrogate-in-a-part": _body(messages=[{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]),
    "lone-surrogate-in-stop": _body(stop=["\ud800"]),
    "message-not-an-object": _body(messages=["hi"]),
    "messages-not-a-list": _body(messages="hi"),
    "model-object": _body(model={"id": MODEL_ID}),
    "stream-string": _body(stream="yes"),
    "stream_options-list": _body(stream_options=[1]),
    "top-level-list": b"[]",
    "top-level-string": b'"hello"',
    "top-level-null": b"null",
    "top-level-number": b"42",
    "not-utf8": b'{"model": "\xff"}',
    "empty": b"",
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_input_is_400_in_openai_shape(served: ServerProcess, case: str) -> None:
    status, _, body = post(served, MALFORMED[case])
    assert_openai_error(status, body)


def test_malformed_completions_and_the_server_still_answers(served: ServerProcess) -> None:
    for body in (
        json.dumps({"model": MODEL_ID, "prompt": "a \ud800"}).encode(),
        json.dumps({"model": MODEL_ID, "prompt": {"text": "hi"}}).encode(),
        b'{"model": "x", "prompt": "hi", "max_tokens": ' + b"7" * 5000 + b"}",
    ):
        status, _, reply = post(served, body, "/v1/completions")
        assert_openai_error(status, reply)
    assert served.health()["status"] == "ok" and served.health()["restarts"] == 0
    assert chat(served, [USER], max_tokens=2).choices[0].message.content


# -- 5. errors speak of this server -------------------------------------------------------------------


def test_worker_messages_are_told_as_the_server_s() -> None:
    died = "The engine process was killed by signal 9. Your conversation is kept; restart the engine to continue. Log: /x"
    text = for_clients("worker_died", died)
    assert "this server" in text and "signal 9" in text and "conversation" not in text and "/x" not in text
    assert "this server" in for_clients("no_model", "No model is loaded; load one first.")
    for path in (REPO / "engine" / "serve").glob("*.py"):
        source = path.read_text().lower()
        for app_words in ("restart the engine", "your conversation", "in the window", "load one first"):
            assert app_words not in source, (path.name, app_words)


# -- 6. GET /v1/models/{id} ----------------------------------------------------------------------------


def test_a_model_by_id(served: ServerProcess) -> None:
    model = client(served).models.retrieve(MODEL_ID)
    assert model.id == MODEL_ID and model.object == "model" and model.owned_by == "specee"
    with pytest.raises(openai.NotFoundError) as err:
        client(served).models.retrieve("gpt-4o")
    assert err.value.code == "model_not_found" and MODEL_ID in err.value.message
    status, _, body = raw(served, "GET", "/v1/models/org/other-model")
    assert assert_openai_error(status, body, 404)["code"] == "model_not_found"


# -- 7. parameters a local server cannot mean are accepted and ignored -------------------------------


def test_ignored_parameters_are_accepted_and_documented(served: ServerProcess) -> None:
    ignored = {
        "store": True,
        "service_tier": "auto",
        "metadata": {"project": "x"},
        "user": "user-1",
        "prediction": {"type": "content", "content": "Blue"},
    }
    assert set(ignored) == set(schema.IGNORED)
    plain = chat(served, [USER], max_tokens=6).choices[0].message.content
    status, _, body = post(served, {"model": MODEL_ID, "messages": [USER], "max_tokens": 6, "temperature": 0, **ignored})
    assert status == 200 and body["choices"][0]["message"]["content"] == plain
    # other unknown fields stay ignored too (clients send many)
    status, _, body = post(served, {"model": MODEL_ID, "messages": [USER], "max_tokens": 2, "some_extension": {"a": 1}})
    assert status == 200
    server_doc = (REPO / "docs" / "server.md").read_text()
    ignored_part = server_doc[server_doc.index("## What is refused, cut or ignored") : server_doc.index("## Concurrent requests")]
    assert "accepted and ignored" in ignored_part.lower() and all(f"`{name}`" in ignored_part for name in schema.IGNORED)


# -- 8. CORS for local browser clients ----------------------------------------------------------------


def _preflight(server: ServerProcess, origin: str, host: str | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
    }
    if host:
        headers["Host"] = host
    conn.request("OPTIONS", "/v1/chat/completions", headers=headers)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status, resp.headers


def test_a_local_page_preflights_then_streams(served: ServerProcess) -> None:
    page = "http://localhost:3000"
    status, headers = _preflight(served, page)
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == page and "Origin" in headers["Vary"]
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert headers["Access-Control-Allow-Headers"] == "authorization, content-type, x-stainless-os"
    body = {"model": MODEL_ID, "messages": [USER], "max_tokens": 4, "stream": True}
    status, headers, text = post(served, body, Origin=page)
    assert status == 200 and text.rstrip().endswith("data: [DONE]")
    assert headers["Access-Control-Allow-Origin"] == page and "Origin" in headers["Vary"]
    # not streamed, and errors too: the page can read why
    status, headers, _ = raw(served, "GET", "/v1/models", headers={"Origin": page})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == page
    status, headers, _ = post(served, {"messages": []}, Origin=page)
    assert status == 400 and headers["Access-Control-Allow-Origin"] == page


def test_allowed_and_refused_origins(served: ServerProcess) -> None:
    status, headers = _preflight(served, EXTENSION)  # --allow-origin
    assert status == 204 and headers["Access-Control-Allow-Origin"] == EXTENSION
    status, headers, _ = raw(served, "GET", "/v1/models", headers={"Origin": EXTENSION})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == EXTENSION
    for origin in ("https://evil.example", "chrome-extension://someoneelse", "null"):
        status, headers = _preflight(served, origin)
        assert status == 403 and "Access-Control-Allow-Origin" not in headers, origin
        status, headers, _ = raw(served, "GET", "/v1/models", headers={"Origin": origin})
        assert status == 403 and "Access-Control-Allow-Origin" not in headers, origin
    # DNS rebinding: a local origin's preflight addressed to another host name
    status, _ = _preflight(served, "http://localhost:3000", host="evil.example")
    assert status == 403


def test_allow_origin_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert allowed_origin("vscode-webview://ABC123") == "vscode-webview://abc123"
    assert allowed_origin("chrome-extension://abcdef/") == "chrome-extension://abcdef"
    for bad in ("*", "null", "obsidian.md", "https://site.example/path"):
        with pytest.raises(ValueError):
            allowed_origin(bad)
    assert cli_main(["serve", "--allow-origin", "*"]) == 2
    assert "--allow-origin" in capsys.readouterr().err


def test_specee_exits_never_skip_a_bias_or_a_penalty(model_path: Path) -> None:
    """SpecEE's exits emit the token they are sure of without the sampler chain: a token biased down
    is never one they emit, and a bias up or a penalty runs every step at full depth."""
    from engine import protocol as p
    from engine.client import WorkerClient

    def answer(client: WorkerClient, **sampling: object) -> tuple[p.Done, dict]:
        s = p.Sampling.greedy(48)
        for name, value in sampling.items():
            setattr(s, name, value)
        events = list(client.stream([{"role": "user", "content": "Explain how a bicycle works."}], s))
        return events[-1], [e for e in events if isinstance(e, p.Stats)][-1].accel  # type: ignore[return-value]

    with WorkerClient() as client:
        assert client.load(model_path, p.Placement(n_ctx=1024), mode="specee").mode == "specee"
        plain, accel = answer(client)
        assert accel["exit_rate"] > 0
        banned = set(plain.tokens[1:6])  # the first comes from the prefill, through the sampler anyway
        done, accel = answer(client, logit_bias={str(t): -100.0 for t in banned})
        assert not banned & set(done.tokens) and accel["exit_rate"] > 0, done.text
        for sampling in ({"frequency_penalty": 1.0}, {"presence_penalty": 0.5}, {"logit_bias": {str(plain.tokens[3]): 5.0}}):
            done, accel = answer(client, **sampling)
            assert accel["exit_rate"] == 0 and done.n_generated > 8, sampling
