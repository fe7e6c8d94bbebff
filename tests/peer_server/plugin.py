"""The adapter: llama.cpp's server tests, run unchanged, with `specee serve` where they start llama-server.

Loaded with `-p tests.peer_server.plugin` into a pytest run of their files (a copy of
tools/server/tests from the pinned sources, made at test time: tests/test_peer_server_suite.py).
Their tests build a `utils.ServerProcess`, set llama-server's flags on it, call start(), then send
requests to its host and port. This plugin imports their `utils` before they do and replaces:

- `ServerProcess.start`/`stop`: a shared `specee serve` (engine/serve/launcher.py) of our local model,
  one per setting we can honour (the context size, the API key), started once and kept for the run;
  their other flags (llama-server's own: slots, chat templates, sampling defaults, aliases) have no
  meaning for us and are ignored: the tests that depend on them are on the exclusion list;
- `make_url`: llama-server also answers its OpenAI routes without `/v1` (`/chat/completions`,
  `/completions`, `/models`, ...) and their tests mostly call them so; the adapter sends those to `/v1`;
- `ServerPreset.load_all` (their session fixture downloads every preset's model from Hugging Face)
  does nothing, and `wget` (their `download_file`) refuses: nothing is ever downloaded.

Tests on tests/peer_server/exclusions.py are skipped or run as expected failures (xfail: a pending
feature, so one that starts passing shows up as XPASS), each with its reason; their `slow` tests
(multi-GB models from Hugging Face) are skipped. Each test's outcome goes to $SPECEE_PEER_RESULTS (JSON).

Environment: SPECEE_PEER_SUITE (the copied tests folder), SPECEE_PEER_MODEL (a GGUF path),
SPECEE_PEER_TOOL_MODEL (for test_tool_call.py), SPECEE_PEER_MODE (default vanilla), SPECEE_PEER_RESULTS.
"""

from __future__ import annotations

import json
import os
import sys
import types
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from engine.serve.launcher import ServerProcess as SpeceeServe
from tests.peer_server import exclusions

SUITE = Path(os.environ["SPECEE_PEER_SUITE"])
MODEL = os.environ.get("SPECEE_PEER_MODEL") or None  # None: the default model
# a model whose chat template takes tools, for test_tool_call.py (exclusions.TOOL_CALLS_LANDED)
MODEL_BY_FILE = {"test_tool_call.py": os.environ.get("SPECEE_PEER_TOOL_MODEL") or MODEL}
MODE = os.environ.get("SPECEE_PEER_MODE", "vanilla")
RESULTS = os.environ.get("SPECEE_PEER_RESULTS")
DEFAULT_CTX = 4096  # `specee serve`'s own default, for a test that sets no n_ctx
KEEP_SERVERS = 2  # servers kept running at once (each holds the model and its worker)
START_TIMEOUT_S = 180


def _no_download(url: str, out: str | None = None) -> str:
    raise RuntimeError(f"the peer suite never downloads (asked for {url})")


# their utils.py imports wget (for download_file) at the top; it is not a dependency of ours
sys.modules.setdefault("wget", types.SimpleNamespace(download=_no_download))
sys.path.insert(0, str(SUITE))
import utils  # noqa: E402  (theirs: tools/server/tests/utils.py)

# llama-server's OpenAI routes without /v1, as their tests call them -> ours
_UNPREFIXED = ("/chat/completions", "/completions", "/models", "/responses", "/embeddings")


def v1_path(path: str) -> str:
    if any(path == r or path.startswith((r + "/", r + "?")) for r in _UNPREFIXED):
        return "/v1" + path
    return path


class _Pool:
    """Running `specee serve` processes by (model, context size, API key), the least recently used
    stopped beyond KEEP_SERVERS."""

    def __init__(self) -> None:
        self.servers: OrderedDict[tuple[str | None, int, str | None], SpeceeServe] = OrderedDict()
        self.started = 0
        self.model = MODEL  # the running test file's (pytest_runtest_setup)

    def get(self, n_ctx: int, api_key: str | None) -> SpeceeServe:
        model = self.model
        key = (model, n_ctx, api_key)
        server = self.servers.pop(key, None)
        if server is None or not server.alive:
            if server is not None:
                server.stop()
            while len(self.servers) >= KEEP_SERVERS:
                self.servers.popitem(last=False)[1].stop()
            server = SpeceeServe(model=model, mode=MODE, api_key=api_key, extra_args=["--ctx", str(n_ctx)])
            server.start(timeout=START_TIMEOUT_S)
            self.started += 1
            print(f"[peer suite] specee serve of {model} on {server.url} (ctx {n_ctx}{', keyed' if api_key else ''})")
        self.servers[key] = server
        return server

    def close(self) -> None:
        while self.servers:
            self.servers.popitem()[1].stop()


POOL = _Pool()


class ServerProcess(utils.ServerProcess):
    """Their ServerProcess, started as `specee serve` (shared: stop() leaves it running for the next test)."""

    def start(self, timeout_seconds: int = utils.DEFAULT_HTTP_TIMEOUT) -> None:
        served = POOL.get(int(self.n_ctx or DEFAULT_CTX), self.api_key)
        self.server_port = served.port
        self.process = None
        self.ready = True
        utils.server_instances.add(self)

    def stop(self) -> None:
        utils.server_instances.discard(self)

    def make_url(self, path: str, host: str | None = None) -> str:
        return super().make_url(v1_path(path), host)


utils.ServerProcess = ServerProcess
utils.ServerPreset.load_all = staticmethod(lambda: None)


# -- the exclusion list and the results ---------------------------------------------------------

_results: dict[str, dict[str, Any]] = {}


def _key(item: pytest.Item) -> tuple[str, str, str]:
    """(file, file::function, file::test id) as exclusions.py names them."""
    file = item.path.name
    func = getattr(item, "originalname", item.name)
    return file, f"{file}::{func}", f"{file}::{item.name}"


_unmatched = set(exclusions.EXCLUDED)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = _key(item)[2]
        _unmatched.difference_update(_key(item))
        reason = exclusions.reason_for(*_key(item), slow=item.get_closest_marker("slow") is not None)
        _results[name] = {"nodeid": item.nodeid, "exclusion": reason, "outcome": "not run", "message": ""}
        if reason is None:
            continue
        text = f"excluded ({reason}): {exclusions.REASONS[reason].text}"
        if exclusions.REASONS[reason].run:
            item.add_marker(pytest.mark.xfail(reason=text, strict=False))
        else:
            item.add_marker(pytest.mark.skip(reason=text))


def pytest_runtest_setup(item: pytest.Item) -> None:
    POOL.model = MODEL_BY_FILE.get(item.path.name, MODEL)


def _name(report: pytest.TestReport) -> str:
    file, _, rest = report.nodeid.partition("::")
    return f"{Path(file).name}::{rest}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _results.get(_name(report))
    if entry is None:
        return
    xfail = hasattr(report, "wasxfail")
    if report.when == "call" or report.outcome != "passed":
        if report.skipped:
            outcome = "xfailed" if xfail else "skipped"
        elif report.passed:
            outcome = "xpassed" if xfail else "passed"
        else:
            outcome = "error" if report.when != "call" else "failed"
        if entry["outcome"] in ("not run", "passed") or outcome in ("failed", "error"):
            entry["outcome"] = outcome
            if report.failed or report.skipped:
                entry["message"] = _message(report)


def _message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)[:500]
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        return str(report.longrepr[2])[:500]
    return str(report.longrepr)[-500:]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    POOL.close()
    if RESULTS:
        Path(RESULTS).write_text(
            json.dumps({"servers_started": POOL.started, "unmatched_exclusions": sorted(_unmatched), "tests": _results}, indent=1)
        )
