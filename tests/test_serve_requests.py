"""The server's request log (engine/serve/request_log.py) and the app's Requests view of it: requests
made with the openai client against `specee serve`, started by the window's Serve switch (an
offscreen widget), show with their client, endpoint, model, tokens, speed and status."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import openai
import pytest

from app.serve_switch import ServeSwitch
from engine.serve.request_log import RequestLog, log_path, read_new

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
ASK = [{"role": "user", "content": "Name a colour."}]


def test_the_log_file_is_read_as_it_grows(tmp_path: Path) -> None:
    from engine.serve.request_log import Entry

    path = tmp_path / "logs" / "requests.jsonl"
    log = RequestLog(path, size=2)
    for i in range(3):
        log.add(Entry(time=1.0 + i, client="127.0.0.1", endpoint="/v1/completions", model="m", status=200))
    assert [e["time"] for e in log.recent()] == [2.0, 3.0]  # the ring is bounded; the file keeps all
    entries, offset = read_new(path, 0)
    assert [e["time"] for e in entries] == [1.0, 2.0, 3.0]
    with path.open("a") as f:
        f.write('{"time": 4.0')  # a line being written is read once it is whole
    assert read_new(path, offset) == ([], offset)
    with path.open("a") as f:
        f.write("}\n")
    assert [e["time"] for e in read_new(path, offset)[0]] == [4.0]


def test_requests_show_in_the_servers_log_and_the_switchs_view(qtbot, model_path: Path) -> None:
    switch = ServeSwitch(lambda: (str(model_path), "vanilla"))
    qtbot.addWidget(switch)
    switch.show()
    _, start = read_new(log_path(), 0)  # what earlier servers of this test run logged
    switch.toggle.click()
    try:
        qtbot.waitUntil(lambda: switch.serving, timeout=180_000)
        assert switch.requests_button.isVisible()
        c = openai.OpenAI(base_url=switch.base_url, api_key="none", max_retries=0, timeout=120)
        c.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=8, temperature=0)
        list(c.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=8, temperature=0, stream=True))
        c.embeddings.create(model=MODEL_ID, input="hello")
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=8, n=99)
        # the server's ring
        with urllib.request.urlopen(f"{switch.url}/log/requests", timeout=30) as r:
            ring = json.load(r)["data"]
        chat, streamed, embedded, refused = ring[-4:]
        for entry in (chat, streamed, embedded, refused):
            assert entry["client"] == "127.0.0.1" and entry["model"] == MODEL_ID and entry["time"] > 0
        assert chat["endpoint"] == streamed["endpoint"] == "/v1/chat/completions"
        for entry in (chat, streamed):
            assert entry["status"] == 200 and entry["completion_tokens"] == 8 and entry["prompt_tokens"] > 5
            assert entry["tok_s"] > 0 and entry["finish"] == "length"
        assert streamed["cached_tokens"] > 0  # the same conversation again
        assert embedded["endpoint"] == "/v1/embeddings" and embedded["status"] == 200 and embedded["prompt_tokens"] > 0
        assert refused["status"] == 400 and refused["completion_tokens"] == 0
        # ... the file beside it, and the view of it
        assert read_new(log_path(), start)[0] == ring[-4:]
        view = switch.show_requests()
        qtbot.waitUntil(lambda: view.table.rowCount() >= 4, timeout=10_000)
        newest = [view.row(i) for i in range(4)]
        assert [row[2] for row in newest] == ["chat/completions", "embeddings", "chat/completions", "chat/completions"]
        assert newest[0][7] == "400" and newest[1][7] == "200" and newest[2][7] == "200 length"
        assert newest[3][1] == "127.0.0.1" and newest[3][3] == MODEL_ID and newest[3][5] == "8" and float(newest[3][6]) > 0
        assert not view.empty.isVisible()
    finally:
        switch.shutdown(wait=True)
    assert not switch.requests_button.isVisible()
