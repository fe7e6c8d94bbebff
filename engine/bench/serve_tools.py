"""What a real model does with tools and structured output behind `specee serve`: the clients' cases
(issue 26) run against the server on a tool-capable model, with real answers, and reported case by case.

    python -m engine.bench.serve_tools --model qwen2.5-coder-1.5b

Cases: tool_choice required / a named function / auto, the call streamed as deltas, two calls at
once, the round trip (call, tool result, final answer) streamed and not, and response_format
json_schema / json_object. Strings are bounded (maxLength, enums), so that a call or object always
ends, even from random weights. Where the grammar binds the model (required, a named function, a schema)
a wrong shape is a failure (exit 1); what the model chose to say (auto, the final answer) is shown,
not judged. The CI runs the same cases on a tiny random-weight model (tests/test_serve_tools_bench.py);
this is for the models people use, too slow and too big for the tests."""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tqdm import tqdm

from engine.bench.serve_load import sse_chunks

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET", "EST", "JST"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
RESULT = {"temp_c": 14, "sky": "cloudy"}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer"},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
    },
    "required": ["name", "age", "languages"],
    "additionalProperties": False,
}
PERSON_ASK = [{"role": "user", "content": "Invent a software engineer: give their name, age and the languages they use."}]


@dataclass
class Case:
    name: str
    ok: bool | None  # None: shown, not judged (what the model chose to say)
    seconds: float
    detail: str
    finish_reason: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)


class Client:
    """Plain HTTP to one server (no client library needed to measure)."""

    def __init__(self, url: str, model: str, api_key: str | None) -> None:
        self.url, self.model, self.api_key = url, model, api_key

    def _request(self, body: dict[str, Any]) -> http.client.HTTPResponse:
        parts = urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=900)
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})}
        conn.request("POST", "/v1/chat/completions", json.dumps({"model": self.model, "temperature": 0, **body}), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
        return resp

    def chat(self, **body: Any) -> dict[str, Any]:
        """The answer's message, with its finish_reason."""
        answer = json.loads(self._request(body).read())
        choice = answer["choices"][0]
        return {**choice["message"], "finish_reason": choice["finish_reason"]}

    def chat_streamed(self, **body: Any) -> dict[str, Any]:
        """The message a client builds from the streamed deltas (content and tool_calls by index)."""
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish = ""
        for chunk in sse_chunks(self._request({**body, "stream": True})):
            for choice in chunk["choices"]:
                delta = choice["delta"]
                content.append(delta.get("content") or "")
                for d in delta.get("tool_calls") or []:
                    call = calls.setdefault(d["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                    call["id"] = d.get("id") or call["id"]
                    fn = d.get("function") or {}
                    call["function"]["name"] += fn.get("name") or ""
                    call["function"]["arguments"] += fn.get("arguments") or ""
                finish = choice.get("finish_reason") or finish
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None, "finish_reason": finish}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        return message


def _calls(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]


def _call_ok(message: dict[str, Any], names: set[str], keys: dict[str, set[str]]) -> tuple[bool, str]:
    """The answer is calls only, each to one of `names` with JSON arguments holding the required keys."""
    calls = _calls(message)
    if message["finish_reason"] != "tool_calls" or not calls:
        return False, f"no call: finish {message['finish_reason']}, content {str(message.get('content'))[:120]!r}"
    for name, args in calls:
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError:
            return False, f"{name}: arguments are not JSON: {args[:120]!r}"
        if name not in names or not isinstance(parsed, dict) or not keys[name] <= parsed.keys():
            return False, f"unexpected call {name}({args[:120]})"
    return True, "; ".join(f"{n}({a})" for n, a in calls)


def _person_ok(text: str | None) -> tuple[bool, str]:
    try:
        obj = json.loads(text or "")
    except json.JSONDecodeError:
        return False, f"not JSON: {str(text)[:120]!r}"
    good = (
        isinstance(obj, dict) and set(obj) == {"name", "age", "languages"} and isinstance(obj["name"], str)
        and isinstance(obj["age"], int) and isinstance(obj["languages"], list)
        and all(isinstance(x, str) for x in obj["languages"])
    )  # fmt: skip
    return good, json.dumps(obj)[:160]


def _round_trip(client: Client, streamed: bool, max_tokens: int) -> tuple[bool | None, str, dict[str, Any]]:
    ask = client.chat_streamed if streamed else client.chat
    first = ask(messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=max_tokens)
    ok, why = _call_ok(first, {"get_weather", "get_time"}, {"get_weather": {"city"}, "get_time": {"zone"}})
    if not ok:
        return False, why, first
    history = [*ASK, {k: v for k, v in first.items() if k != "finish_reason"}]
    history += [{"role": "tool", "tool_call_id": c["id"], "content": json.dumps(RESULT)} for c in first["tool_calls"]]
    final = ask(messages=history, tools=TOOLS, max_tokens=max_tokens)
    text = str(final.get("content") or "")
    # the model's own words: shown, not judged; a call made again instead of an answer is a finding
    uses = "14" in text or "cloudy" in text.lower()
    return None, f"{why} -> {final['finish_reason']}: {text[:160]!r}" + (" (uses the result)" if uses else ""), final


def cases(client: Client, max_tokens: int) -> list[tuple[str, Callable[[], tuple[bool | None, str, dict[str, Any]]]]]:
    keys = {"get_weather": {"city"}, "get_time": {"zone"}}

    def call(
        tool_choice: Any, streamed: bool = False, messages: list[dict[str, Any]] = ASK, parallel: bool = False
    ) -> tuple[bool | None, str, dict[str, Any]]:
        ask = client.chat_streamed if streamed else client.chat
        msg = ask(messages=messages, tools=TOOLS, tool_choice=tool_choice, parallel_tool_calls=parallel, max_tokens=max_tokens)
        names = {tool_choice["function"]["name"]} if isinstance(tool_choice, dict) else set(keys)
        ok, why = _call_ok(msg, names, keys)
        return (ok if tool_choice != "auto" else None), why, msg

    def schema(kind: str, streamed: bool = False) -> tuple[bool | None, str, dict[str, Any]]:
        ask = client.chat_streamed if streamed else client.chat
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}
        if kind == "json_object":
            fmt = {"type": "json_object"}
            msgs = [{"role": "system", "content": "Answer in JSON."}, *PERSON_ASK]
        else:
            msgs = PERSON_ASK
        msg = ask(messages=msgs, response_format=fmt, max_tokens=max_tokens * 2)
        if kind == "json_object":
            try:
                json.loads(msg.get("content") or "")
                return True, str(msg.get("content"))[:160], msg
            except json.JSONDecodeError:
                return False, f"not JSON: {str(msg.get('content'))[:120]!r}", msg
        return (*_person_ok(msg.get("content")), msg)

    both = [{"role": "user", "content": "What is the weather in Paris, and what time is it in UTC?"}]
    return [
        ("required", lambda: call("required")),
        ("required, streamed", lambda: call("required", streamed=True)),
        ("named function", lambda: call({"type": "function", "function": {"name": "get_time"}})),
        ("two calls at once", lambda: call("required", messages=both, parallel=True)),
        ("auto", lambda: call("auto")),
        ("auto, streamed", lambda: call("auto", streamed=True)),
        ("round trip", lambda: _round_trip(client, False, max_tokens)),
        ("round trip, streamed", lambda: _round_trip(client, True, max_tokens)),
        ("json_schema (strict)", lambda: schema("json_schema")),
        ("json_schema, streamed", lambda: schema("json_schema", streamed=True)),
        ("json_object", lambda: schema("json_object")),
    ]


def served_model(url: str, api_key: str | None) -> str:
    """The id of the model a server answers to (its first in /v1/models)."""
    req = urllib.request.Request(f"{url}/v1/models", headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["data"][0]["id"]


def run(url: str, model: str, api_key: str | None, max_tokens: int = 96) -> list[Case]:
    client = Client(url, model, api_key)
    out = []
    todo = cases(client, max_tokens)
    for name, fn in tqdm(todo, desc="cases", unit="case", file=sys.stderr):
        t0 = time.perf_counter()
        try:
            ok, detail, msg = fn()
        except (OSError, RuntimeError) as exc:
            ok, detail, msg = False, f"error: {exc}", {}
        out.append(Case(name, ok, time.perf_counter() - t0, detail, msg.get("finish_reason", ""), _calls(msg)))
    return out


def report(results: list[Case]) -> str:
    mark = {True: "pass", False: "FAIL", None: "shown"}
    lines = [f"{'case':24} {'result':6} {'s':>6}  what came back"]
    lines += [f"{c.name:24} {mark[c.ok]:6} {c.seconds:6.1f}  {c.detail}" for c in results]
    judged = [c for c in results if c.ok is not None]
    lines.append(f"{sum(bool(c.ok) for c in judged)}/{len(judged)} judged cases pass")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.bench.serve_tools", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="a registered model id or a GGUF path")
    ap.add_argument("--url", help="a running server instead of starting one")
    ap.add_argument("--served-id", help="the model id the running server answers to (with --url)")
    ap.add_argument("--api-key")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--json", help="write the cases here too")
    args = ap.parse_args(argv)
    server = None
    if args.url:
        url, served = args.url, args.served_id or args.model
    else:
        from engine.models.registry import ModelRegistry
        from engine.serve.launcher import ServerProcess

        model = ModelRegistry().path_for(args.model)
        server = ServerProcess(model=model, mode="vanilla", api_key=args.api_key, extra_args=["--ctx", "2048", "--parallel", "1"])
        url = server.start(timeout=600)
        served = served_model(url, args.api_key)
    try:
        results = run(url, served, args.api_key, args.max_tokens)
    finally:
        if server is not None:
            server.stop()
    print(report(results))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps([asdict(c) for c in results], indent=1))
    return 0 if all(c.ok is not False for c in results) else 1


if __name__ == "__main__":
    sys.exit(main())
