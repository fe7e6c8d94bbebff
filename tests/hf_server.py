"""A local server speaking enough of the Hugging Face hub API for huggingface_hub and our
downloader (HF_ENDPOINT points at it), serving real files, with switches for the failures a
download must survive: a dropped connection, a corrupted byte, a gated repo, a missing file."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class Repo:
    files: dict[str, Path]
    gated: bool = False
    sha: dict[str, str] = field(default_factory=dict)
    commit: str = "0" * 40  # the revision every file is served at


class HubServer:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.drop_after: int | None = None  # close the next file response after this many bytes
        self.corrupt_at: int | None = None  # flip this byte offset in served file data
        self.requests: list[tuple[str, str]] = []  # (path, Range header)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _json(self, obj, status: int = 200) -> None:
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                path = unquote(url.path)
                server.requests.append((path, self.headers.get("Range", "")))
                parts = path.strip("/").split("/")
                if path == "/api/models":
                    q = parse_qs(url.query).get("search", [""])[0].lower()
                    return self._json([{"id": r, "modelId": r, "tags": ["gguf"]} for r in server.repos if q in r.lower()])
                if parts[:2] == ["api", "models"] and len(parts) >= 4:
                    repo = server.repos.get(f"{parts[2]}/{parts[3]}")
                    if repo is None:
                        return self._json({"error": "Repository not found"}, 404)
                    siblings = [
                        {"rfilename": name, "size": p.stat().st_size,
                         "lfs": {"sha256": repo.sha[name], "size": p.stat().st_size, "pointerSize": 134}}
                        for name, p in repo.files.items()
                    ]  # fmt: skip
                    return self._json({"id": f"{parts[2]}/{parts[3]}", "modelId": f"{parts[2]}/{parts[3]}", "sha": repo.commit,
                                       "private": False, "siblings": siblings})  # fmt: skip
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo = server.repos.get(f"{parts[0]}/{parts[1]}")
                    name = "/".join(parts[4:])
                    if repo is None or name not in repo.files:
                        return self._json({"error": "Entry not found"}, 404)
                    if repo.gated and "Authorization" not in self.headers:
                        return self._json({"error": "Access to this model is restricted"}, 401)
                    return self._file(repo.files[name])
                return self._json({"error": "unknown route"}, 404)

            def do_HEAD(self) -> None:
                """File metadata, as huggingface_hub's hf_hub_download asks for it before a download."""
                path = unquote(urlparse(self.path).path)
                server.requests.append((f"HEAD {path}", ""))
                parts = path.strip("/").split("/")
                repo = server.repos.get(f"{parts[0]}/{parts[1]}") if len(parts) >= 5 and parts[2] == "resolve" else None
                name = "/".join(parts[4:])
                if repo is None or name not in repo.files or (repo.gated and "Authorization" not in self.headers):
                    self.send_response(404 if repo is None or name not in repo.files else 401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(repo.files[name].stat().st_size))
                self.send_header("ETag", f'"{repo.sha[name]}"')
                self.send_header("X-Repo-Commit", repo.commit)
                self.end_headers()

            def _file(self, p: Path) -> None:
                size = p.stat().st_size
                start = 0
                rng = self.headers.get("Range", "")
                if rng.startswith("bytes="):
                    start = int(rng[6:].split("-")[0])
                    if start >= size:
                        self.send_response(416)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(size - start))
                self.end_headers()
                limit = server.drop_after
                server.drop_after = None
                sent = 0
                with p.open("rb") as fh:
                    fh.seek(start)
                    offset = start
                    while block := fh.read(1 << 20):
                        if server.corrupt_at is not None and offset <= server.corrupt_at < offset + len(block):
                            i = server.corrupt_at - offset
                            block = block[:i] + bytes([block[i] ^ 0xFF]) + block[i + 1 :]
                        if limit is not None and sent + len(block) > limit:
                            self.wfile.write(block[: limit - sent])
                            self.wfile.flush()
                            self.close_connection = True
                            return
                        self.wfile.write(block)
                        sent += len(block)
                        offset += len(block)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def add_repo(self, repo_id: str, files: dict[str, Path], gated: bool = False) -> None:
        sha = {}
        for name, p in files.items():
            h = hashlib.sha256()
            with p.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            sha[name] = h.hexdigest()
        commit = hashlib.sha1("".join(sha[n] for n in sorted(sha)).encode()).hexdigest()
        self.repos[repo_id] = Repo(files, gated, sha, commit)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
