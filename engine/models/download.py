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
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.models.registry import ModelRecord, ModelRegistry
from engine.paths import data_dir

if TYPE_CHECKING:
    from huggingface_hub import HfApi

CHUNK = 1 << 20
DISK_MARGIN = 256 << 20  # keep this much free after the download


class DownloadError(Exception):
    """kind: auth | not_found | network | offline | disk | hash | cancelled | bad_request"""

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


def _api() -> HfApi:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint(), token=_token())


def _hub_error(exc: Exception, what: str) -> DownloadError:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status in (401, 403):
        return _auth_error(what)
    if status == 404:
        return DownloadError("not_found", f"{what} was not found on the hub (check the name).")
    why = unreachable()
    if why:
        return offline_error(why)
    reason = plain_reason(exc)
    return DownloadError("network", f"the model hub did not answer for {what} ({reason}). Check your connection and retry.")


# What the app can do without the hub: said wherever the hub cannot be reached
OFFLINE_HELP = (
    "What still works: your installed models (My models), GGUF files in the models folder (Scan models "
    "folder), Import GGUF… for a file elsewhere, and catalog models already on disk."
)
PROBE_TIMEOUT = 3.0  # seconds for the hub's address and a connection to it


def plain_reason(exc: BaseException) -> str:
    """An OS or network error in words, without "[Errno -2]"."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:  # the root cause of a wrapped error
        seen.add(id(exc))
        if isinstance(exc, socket.gaierror):
            return "its address cannot be looked up (no internet connection or no DNS)"
        if isinstance(exc, ConnectionRefusedError):
            return "the connection was refused"
        if isinstance(exc, TimeoutError):
            return "it did not answer in time"
        if isinstance(exc, OSError) and exc.strerror:
            return exc.strerror[0].lower() + exc.strerror[1:]
        if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
            exc = exc.reason
            continue
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return "the network failed"


def unreachable(timeout: float = PROBE_TIMEOUT) -> str:
    """Why the hub (HF_ENDPOINT) cannot be reached now, in words, within `timeout` seconds for its
    address and as long again for a connection; "" when it can. HF_HUB_OFFLINE=1 means offline."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    url = urllib.parse.urlsplit(endpoint())
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    found: list[object] = []

    def look_up() -> None:  # a resolver with no network can take 20 s or more: not waited for
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            found.append(exc)

    t = threading.Thread(target=look_up, name="hub-lookup", daemon=True)
    t.start()
    t.join(timeout)
    if not found:
        return f"{host} cannot be looked up (no answer in {timeout:.0f} s)"
    if isinstance(found[0], OSError):
        return f"{host} cannot be reached: {plain_reason(found[0])}"
    family, kind, proto, _name, address = found[0][0]  # type: ignore[index]
    try:
        with socket.socket(family, kind, proto) as s:
            s.settimeout(timeout)
            s.connect(address)
    except OSError as exc:
        return f"{host} cannot be reached: {plain_reason(exc)}"
    return ""


def offline_error(why: str) -> DownloadError:
    return DownloadError(
        "offline", f"You seem to be offline: {why}. Hugging Face search and downloads need the internet. {OFFLINE_HELP}"
    )


def _require_hub() -> None:
    """At once, in words, when the hub cannot be reached (instead of a library's retries)."""
    why = unreachable()
    if why:
        raise offline_error(why)


def _auth_error(what: str) -> DownloadError:
    return DownloadError(
        "auth",
        f"{what} is gated or private. Accept its licence on huggingface.co, then add an access token: "
        "run `huggingface-cli login` or set HF_TOKEN, and retry.",
    )


def search_gguf_repos(query: str, limit: int = 20) -> list[str]:
    _require_hub()
    try:
        return [m.id for m in _api().list_models(search=query, filter="gguf", limit=limit)]
    except Exception as exc:
        raise _hub_error(exc, f"search {query!r}") from None


def list_gguf_files(repo_id: str) -> list[HubFile]:
    _require_hub()
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
        why = unreachable()
        if why:
            raise offline_error(why) from None
        raise DownloadError(
            "network", f"could not reach the hub ({plain_reason(exc)}); the download resumes when you retry."
        ) from None
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
                        "network", f"the connection dropped ({plain_reason(exc)}); the download resumes when you retry."
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
