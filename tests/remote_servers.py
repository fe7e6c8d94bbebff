"""Real OpenAI-compatible servers for the remote-engine tests (tests/test_remote.py, the window's
tests, the screenshots): upstream llama-server built from our pinned llama.cpp source, small HTTP
servers that misbehave on purpose, and an in-memory keyring for tests that opt into one (conftest
gives every test the failing backend, never the user's keyring)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import keyring.backend
import keyring.errors

from engine.paths import REPO_ROOT
from engine.ports import free_port


class MemoryKeyring(keyring.backend.KeyringBackend):
    priority = 1

    def __init__(self) -> None:
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.passwords.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.passwords[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.passwords.pop((service, username), None) is None:
            raise keyring.errors.PasswordDeleteError("no such password")


# -- small real servers that misbehave -------------------------------------------------------------


def piece(text: str, finish: str | None = None) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}) + "\n\n"


Script = Callable[[Callable[[str], None], threading.Event], None]


@contextmanager
def scripted_server(script: Script) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 whose /v1/models lists "stub-model" and whose chat completions
    stream whatever `script` writes (it gets write() and an event set when the test is over)."""
    over = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = json.dumps({"object": "list", "data": [{"id": "stub-model", "object": "model", "owned_by": "t"}]})
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()

            def write(raw: str) -> None:
                self.wfile.write(raw.encode())
                self.wfile.flush()

            try:
                script(write, over)
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        over.set()
        server.shutdown()
        server.server_close()


@contextmanager
def silent_server() -> Iterator[str]:
    """Listens (the kernel completes connections) but never reads or answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


# -- the real llama-server ---------------------------------------------------------------------------


def build_llama_server() -> Path:
    """Upstream llama-server from the same pinned source, built once per machine (cached by content
    hash in the native build cache, outside the clone)."""
    out = subprocess.run([sys.executable, str(REPO_ROOT / "native" / "build.py"), "--server"], stdout=subprocess.PIPE, text=True)
    assert out.returncode == 0, "native/build.py --server failed (its message is above)"
    return Path(out.stdout.strip().splitlines()[-1])


@contextmanager
def running_llama_server(binary: Path, model: Path, log: Path, *extra: str) -> Iterator[str]:
    """llama-server on 127.0.0.1 and a free port; yields its base URL once /health says ready."""
    import httpx2

    port = free_port()
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "2048", "-np", "1",
           "-t", "2", "-ngl", "0", *extra]  # fmt: skip
    with log.open("w") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, f"llama-server exited with {proc.returncode}: {log.read_text()[-2000:]}"
                assert time.monotonic() < deadline, f"llama-server not ready in 120 s: {log.read_text()[-2000:]}"
                try:
                    if httpx2.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        break
                except httpx2.HTTPError:
                    pass
                time.sleep(0.3)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
