"""Model downloads from the Hugging Face hub (or anything speaking its API: HF_ENDPOINT).

Metadata (search, file lists with LFS sha256) goes through huggingface_hub; the file itself is
streamed by us so that it can be paused, resumed after a cancel or a killed app (HTTP Range onto
`<file>.partial`), hashed while it arrives, checked against the hub's sha256, and renamed into
place only when complete (GPT4All's recipe). A `.partial` file never looks like a model.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.models.registry import ModelRecord, ModelRegistry
from engine.paths import data_dir

CHUNK = 1 << 20
DISK_MARGIN = 256 << 20  # keep this much free after the download


class DownloadError(Exception):
    """kind: auth | not_found | network | disk | hash | cancelled | bad_request"""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class HubFile:
    repo_id: str
    filename: str
    size: int
    sha256: str | None  # LFS sha256 from the hub


@dataclass
class Progress:
    done: int
    total: int
    bytes_per_s: float

    @property
    def eta_s(self) -> float:
        return (self.total - self.done) / self.bytes_per_s if self.bytes_per_s > 0 else float("inf")


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _token() -> str | None:
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception:
        return None


def _api():  # type: ignore[no-untyped-def]
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint(), token=_token())


def _hub_error(exc: Exception, what: str) -> DownloadError:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status in (401, 403):
        return _auth_error(what)
    if status == 404:
        return DownloadError("not_found", f"{what} was not found on the hub (check the name).")
    return DownloadError("network", f"could not reach the model hub for {what} ({exc}). Check your connection and retry.")


def _auth_error(what: str) -> DownloadError:
    return DownloadError(
        "auth",
        f"{what} is gated or private. Accept its licence on huggingface.co, then add an access token: "
        "run `huggingface-cli login` or set HF_TOKEN, and retry.",
    )


def search_gguf_repos(query: str, limit: int = 20) -> list[str]:
    try:
        return [m.id for m in _api().list_models(search=query, filter="gguf", limit=limit)]
    except Exception as exc:
        raise _hub_error(exc, f"search {query!r}") from None


def list_gguf_files(repo_id: str) -> list[HubFile]:
    try:
        info = _api().model_info(repo_id, files_metadata=True)
    except Exception as exc:
        raise _hub_error(exc, repo_id) from None
    out = []
    for s in info.siblings or []:
        if s.rfilename.lower().endswith(".gguf"):
            sha = s.lfs.sha256 if s.lfs else None
            out.append(HubFile(repo_id, s.rfilename, int(s.size or (s.lfs.size if s.lfs else 0) or 0), sha))
    return out


def models_dir() -> Path:
    return data_dir() / "models"


def partial_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".partial")


def download(
    f: HubFile,
    dest_dir: Path | None = None,
    progress: Callable[[Progress], None] | None = None,
    cancel: threading.Event | None = None,
    register: bool = True,
) -> Path:
    """Download (or resume) f into dest_dir; returns the final path. Raises DownloadError."""
    dest_dir = dest_dir or models_dir()
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / Path(f.filename).name
    part = partial_path(dest)
    have = part.stat().st_size if part.exists() else 0
    if have > f.size > 0:
        part.unlink()  # not this file's beginning
        have = 0
    free = shutil.disk_usage(dest_dir).free
    if f.size and free - (f.size - have) < DISK_MARGIN:
        need = (f.size - have + DISK_MARGIN) / 1e9
        raise DownloadError("disk", f"not enough disk space in {dest_dir}: {need:.1f} GB needed, {free / 1e9:.1f} GB free.")
    digest = hashlib.sha256()
    if have:
        with part.open("rb") as fh:  # hash what is already there, so the final check covers all of it
            for block in iter(lambda: fh.read(CHUNK), b""):
                digest.update(block)
    url = f"{endpoint()}/{f.repo_id}/resolve/main/{urllib.parse.quote(f.filename)}"
    headers = {"User-Agent": "specee-chat"}
    token = _token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise _auth_error(f"{f.repo_id}/{f.filename}") from None
        if exc.code == 404:
            raise DownloadError("not_found", f"{f.repo_id}/{f.filename} was not found on the hub.") from None
        if exc.code == 416 and have == f.size:
            resp = None
        else:
            raise DownloadError("network", f"the hub answered {exc.code} for {f.filename}; retry later.") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DownloadError("network", f"could not reach the hub ({exc}); the download resumes when you retry.") from None
    if resp is not None and have and resp.status != 206:
        digest, have = hashlib.sha256(), 0  # the server ignored Range: start over
    t0, done0 = time.monotonic(), have
    done = have
    try:
        with part.open("ab" if have else "wb") as out:
            while resp is not None:
                if cancel is not None and cancel.is_set():
                    raise DownloadError("cancelled", f"download of {f.filename} paused; it resumes where it stopped.")
                try:
                    block = resp.read(CHUNK)
                except (OSError, urllib.error.URLError) as exc:
                    raise DownloadError(
                        "network", f"the connection dropped ({exc}); the download resumes when you retry."
                    ) from None
                if not block:
                    break
                try:
                    out.write(block)
                except OSError as exc:
                    raise DownloadError(
                        "disk", f"writing {part.name} failed ({exc.strerror}); free some disk space and retry."
                    ) from None
                digest.update(block)
                done += len(block)
                if progress:
                    elapsed = time.monotonic() - t0
                    progress(Progress(done, f.size, (done - done0) / elapsed if elapsed > 0 else 0.0))
    finally:
        if resp is not None:
            resp.close()
    if f.size and done != f.size:
        raise DownloadError("network", f"the download stopped at {done} of {f.size} bytes; it resumes when you retry.")
    sha = digest.hexdigest()
    if f.sha256 and sha != f.sha256:
        part.unlink()
        raise DownloadError(
            "hash", f"{f.filename} arrived damaged (sha256 {sha[:12]}… instead of {f.sha256[:12]}…); it was deleted, retry."
        )
    os.replace(part, dest)
    if register:
        ModelRegistry().add(ModelRecord(dest.stem, str(dest), sha, done, f"hf:{f.repo_id}/{f.filename}"))
    return dest
