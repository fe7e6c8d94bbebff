"""ServerProcess: start `specee serve` as a child process, wait until it answers, stop it (Qt-free).

The app's "serve" switch and the tests use it; it imports no web framework, so the GUI stays light.
The API key goes through the environment, never the command line (which others on the machine can
read).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from threading import Thread

from engine import knobs
from engine.paths import REPO_ROOT, cache_dir
from engine.ports import free_port


def base_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host  # what we print for a wildcard bind
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


class ServerError(RuntimeError):
    pass


# A frozen installer has no separate Python: the app's own executable serves (specee_entry.py), like the worker.
FROZEN_SERVE_FLAG = "--specee-serve"


def serve_command(python: str | None = None) -> list[str]:
    if python is None and getattr(sys, "frozen", False):
        return [sys.executable, FROZEN_SERVE_FLAG]
    return [python or sys.executable, "-m", "engine.cli", "serve"]


class ServerProcess:
    def __init__(
        self,
        model: str | Path | None = None,
        mode: str = "auto",
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        allow_remote: bool = False,
        extra_args: list[str] | None = None,
    ) -> None:
        """model: a GGUF path or registered id (None: the default model); port 0: a free one."""
        self.model, self.mode, self.host, self.port = model, mode, host, port
        self.api_key, self.allow_remote = api_key, allow_remote
        self.extra_args = list(extra_args or [])
        self.log_path = cache_dir() / "logs" / "serve.log"
        self._proc: subprocess.Popen[str] | None = None
        self._tail: deque[str] = deque(maxlen=20)

    @property
    def url(self) -> str:
        """The server's address, e.g. http://127.0.0.1:8080 (the OpenAI base URL is url + "/v1")."""
        return base_url(self.host, self.port)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def health(self, timeout: float = 2.0) -> dict:
        """/health's JSON (status ok | loading | error), or {} when nothing answers."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=timeout) as r:
                return json.load(r)
        except urllib.error.HTTPError as exc:  # 503 while loading: the body still says why
            with contextlib.suppress(ValueError):
                return json.load(exc)
        except (OSError, ValueError):
            pass
        return {}

    def start(self, timeout: float = 300.0) -> str:
        """Start the server and wait until its model is loaded; returns url. Raises ServerError."""
        self.stop()
        if not self.port:
            self.port = free_port(self.host)
        cmd = [*serve_command(), "--host", self.host, "--port", str(self.port), "--mode", self.mode, "--exit-with-stdin"]
        cmd += self.extra_args
        if self.model:
            cmd += ["--model", str(self.model)]
        if self.allow_remote:
            cmd.append("--allow-remote")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
        env["PYTHONUNBUFFERED"] = "1"
        if self.api_key:
            env[knobs.API_KEY.name] = self.api_key
        else:
            env.pop(knobs.API_KEY.name, None)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._tail.clear()
        self._proc = subprocess.Popen(
            # stdin: a pipe we never write to; it closes when this process ends, however it ends, and the
            # server then stops (--exit-with-stdin), so it never outlives the app that started it
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        Thread(target=self._log_stderr, args=(self._proc,), name="serve-log", daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise ServerError(f"specee serve exited ({self._proc.returncode}): {self.last_lines()}")
            state = self.health()
            if state.get("status") == "ok":
                return self.url
            if state.get("status") == "error":
                self.stop()
                raise ServerError(f"specee serve could not load the model: {state.get('error', '')}")
            time.sleep(0.2)
        self.stop()
        raise ServerError(f"specee serve did not become ready within {timeout:.0f} s: {self.last_lines()}")

    def last_lines(self, n: int = 5) -> str:
        return "\n".join(list(self._tail)[-n:]) or f"(see {self.log_path})"

    def _log_stderr(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in proc.stderr:
                log.write(line)
                log.flush()
                self._tail.append(line.rstrip())

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful (SIGTERM: uvicorn finishes, the worker shuts down), then a kill if needed."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        if proc.stdin:
            proc.stdin.close()
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
