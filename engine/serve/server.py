"""Run the app under uvicorn, with the console lines `specee serve` prints."""

from __future__ import annotations

import contextlib
import sys
import threading
from pathlib import Path

import uvicorn

from engine import protocol as p
from engine.serve.app import create_app
from engine.serve.bridge import EngineBridge
from engine.serve.launcher import base_url
from engine.serve.request_log import RequestLog, log_path
from engine.serve.security import bind_problem, is_local

DEFAULT_PORT = 8080


def default_parallel() -> int:
    """Requests decoded together when --parallel is not given: two per physical core, 2..8. On 2
    cores a step of 4 rows costs ~2.4x one (each weight row is unpacked once for up to 4 rows), so
    4 clients get their first token about as soon as one; each place also holds a context's KV cache."""
    from engine.hardware import physical_cores

    return max(2, min(8, 2 * physical_cores()))


def parallel_problem(parallel: int) -> str:
    """Why --parallel is refused ("" when it is fine)."""
    if 1 <= parallel <= p.N_PARALLEL_MAX:
        return ""
    return (f"--parallel must be 1 (one request at a time) to {p.N_PARALLEL_MAX} requests decoded together, got "
            f"{parallel}; each one holds a whole context's KV cache in memory")  # fmt: skip


def log(msg: str) -> None:
    with contextlib.suppress(OSError):  # a launcher that died took the reading end of our stderr with it
        print(f"[specee serve] {msg}", file=sys.stderr, flush=True)


def example_curl(url: str, model_id: str, keyed: bool) -> str:
    auth = ' -H "Authorization: Bearer $SPECEE_API_KEY"' if keyed else ""
    body = f'{{"model": "{model_id}", "messages": [{{"role": "user", "content": "Hello!"}}]}}'
    return f"curl {url}/v1/chat/completions{auth} -H 'Content-Type: application/json' -d '{body}'"


def serve(
    model_path: Path,
    model_id: str,
    mode: str = "auto",
    placement: p.Placement | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    api_key: str | None = None,
    allow_remote: bool = False,
    max_queue: int = 32,
    verbose: bool = False,
    exit_with_stdin: bool = False,
    allow_origins: tuple[str, ...] = (),
    parallel: int = 1,
) -> int:
    """exit_with_stdin: stop when standard input closes, i.e. when the process that started us is
    gone, even by kill -9 (engine/serve/launcher.py): a launched server never outlives its launcher."""
    problem = bind_problem(host, allow_remote, api_key)
    if problem:
        log(problem)
        return 2
    if problem := parallel_problem(parallel):
        log(problem)
        return 2
    bridge = EngineBridge(model_path, mode, placement, max_queue=max_queue, log=log, parallel=parallel)
    requests = RequestLog(log_path())
    app = create_app(bridge, model_id, api_key, local_only=is_local(host), allow_origins=allow_origins, request_log=requests)
    url = base_url(host, port)
    log(f"OpenAI-compatible API on {url}/v1 (model id {model_id!r}){'; API key required' if api_key else ''}")
    log(f"try: {example_curl(url, model_id, bool(api_key))}")
    if allow_origins:
        log(f"browser clients of these origins may use it too: {', '.join(allow_origins)}")
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info" if verbose else "warning",
        access_log=verbose,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    if exit_with_stdin:

        def watch() -> None:
            while sys.stdin.buffer.read(4096):
                pass
            server.should_exit = True
            log("the app that started this server is gone: stopping")

        threading.Thread(target=watch, name="stdin-watch", daemon=True).start()
    server.run()
    return 0
