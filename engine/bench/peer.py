"""The peer in the same run: llama.cpp's own llama-server, built from the same pinned source
(`python native/build.py --server`), on the same model, prompts and threads, plain or with its own
speculative decoding, so a report shows ours against the tool a user would pick instead.

Prompts go in as token ids formatted by our own chat code, so both sides see the very same prompt."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from engine.ports import free_port


class PeerError(RuntimeError):
    pass


@dataclass
class PeerResult:
    tokens: list[int]
    decode_tok_s: float
    prefill_tok_s: float
    ttft_ms: float
    stopped: bool  # ended on an end-of-generation token, not on n_predict
    n_prompt_read: int = 0  # prompt tokens it read for this request (not taken from its cache)


class PeerServer:
    """One llama-server process on 127.0.0.1; `spec` are its speculative flags (empty: plain)."""

    def __init__(self, binary: Path, model: Path, n_threads: int, n_ctx: int, spec: list[str], log: Path) -> None:
        self.port = free_port()
        cmd = [str(binary), "-m", str(model), "-t", str(n_threads), "-tb", str(n_threads), "-c", str(n_ctx),
               "-np", "1", "-ngl", "0", "--host", "127.0.0.1", "--port", str(self.port), *spec]  # fmt: skip
        self._log = log.open("w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PeerError(f"llama-server exited with {self.proc.returncode}; see {log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        self.stop()
        raise PeerError(f"llama-server did not become ready in 300 s; see {log}")

    def complete(self, prompt: list[int], n_predict: int, cache_prompt: bool = True, timeout: float = 600) -> PeerResult:
        """cache_prompt False: the whole prompt is read again (a cold prefill, as a new document's)."""
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1, "cache_prompt": cache_prompt,
                "return_tokens": True, "stream": False}  # fmt: skip
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                out = json.loads(r.read())
        except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
            raise PeerError(f"llama-server request failed: {exc}") from exc
        t = out.get("timings", {})
        return PeerResult(
            list(out.get("tokens", [])),
            float(t.get("predicted_per_second", 0.0)),
            float(t.get("prompt_per_second", 0.0)),
            float(t.get("prompt_ms", 0.0)),
            bool(out.get("stopped_eos", False)),
            int(t.get("prompt_n", 0)),
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
