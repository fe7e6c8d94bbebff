"""Model downloads against a local server speaking the hub API, serving the real default GGUF."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from engine.models.download import (
    DownloadError,
    HubFile,
    Progress,
    download,
    list_gguf_files,
    partial_path,
    search_gguf_repos,
)
from engine.models.registry import ModelRegistry
from tests.hf_server import HubServer

REPO = "someone/SmolLM2-135M-Instruct-GGUF"


@pytest.fixture
def hub(model_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_data: Path, tmp_path: Path):
    small = tmp_path / "served" / "tiny.gguf"
    small.parent.mkdir()
    small.write_bytes(model_path.read_bytes()[: 3 << 20])  # a real file's first 3 MB
    with HubServer() as server:
        server.add_repo(REPO, {"SmolLM2-135M-Instruct.Q4_1.gguf": model_path, "README.md": small})
        server.add_repo("someone/tiny-GGUF", {"tiny.gguf": small})
        server.add_repo("meta/gated-GGUF", {"tiny.gguf": small}, gated=True)
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
        monkeypatch.setattr("engine.models.download._token", lambda: None)
        yield server


def test_search_and_list_through_huggingface_hub(hub: HubServer, model_path: Path) -> None:
    assert search_gguf_repos("smollm2") == [REPO]
    files = list_gguf_files(REPO)
    assert [f.filename for f in files] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]  # GGUF files only
    assert files[0].size == model_path.stat().st_size and len(files[0].sha256 or "") == 64
    with pytest.raises(DownloadError) as err:
        list_gguf_files("nobody/nothing")
    assert err.value.kind == "not_found"


def test_download_with_progress_is_verified_registered_and_atomic(hub: HubServer, tmp_path: Path, model_path: Path) -> None:
    f = list_gguf_files(REPO)[0]
    seen: list[Progress] = []
    out = download(f, tmp_path / "models", progress=seen.append)
    assert out.read_bytes() == model_path.read_bytes()
    assert not partial_path(out).exists()
    assert seen[-1].done == f.size and all(a.done < b.done for a, b in itertools.pairwise(seen))
    assert seen[-1].bytes_per_s > 0
    rec = ModelRegistry().get(out.stem)
    assert rec is not None and rec.sha256 == f.sha256 and rec.source == f"hf:{REPO}/{f.filename}"


def test_a_dropped_connection_resumes_where_it_stopped(hub: HubServer, tmp_path: Path, model_path: Path) -> None:
    f = list_gguf_files(REPO)[0]
    hub.drop_after = 5 << 20
    with pytest.raises(DownloadError) as err:
        download(f, tmp_path)
    assert err.value.kind == "network"
    part = partial_path(tmp_path / f.filename)
    assert part.stat().st_size == 5 << 20 and not (tmp_path / f.filename).exists()
    out = download(f, tmp_path)
    assert hub.requests[-1][1] == f"bytes={5 << 20}-"  # only the rest was fetched
    assert out.read_bytes() == model_path.read_bytes()


def test_cancel_pauses_and_a_later_call_resumes(hub: HubServer, tmp_path: Path) -> None:
    f = list_gguf_files(REPO)[0]
    cancel = threading.Event()

    def progress(pr) -> None:
        if pr.done >= 8 << 20:
            cancel.set()

    with pytest.raises(DownloadError) as err:
        download(f, tmp_path, progress=progress, cancel=cancel)
    assert err.value.kind == "cancelled"
    assert partial_path(tmp_path / f.filename).stat().st_size >= 8 << 20
    assert download(f, tmp_path).stat().st_size == f.size


def test_a_corrupted_byte_is_caught_by_the_hash_and_nothing_is_kept(hub: HubServer, tmp_path: Path) -> None:
    f = list_gguf_files("someone/tiny-GGUF")[0]
    hub.corrupt_at = 12345
    with pytest.raises(DownloadError) as err:
        download(f, tmp_path)
    assert err.value.kind == "hash"
    assert not (tmp_path / "tiny.gguf").exists() and not partial_path(tmp_path / "tiny.gguf").exists()


def test_gated_and_missing_files_explain_what_to_do(hub: HubServer, tmp_path: Path) -> None:
    f = list_gguf_files("meta/gated-GGUF")[0]
    with pytest.raises(DownloadError) as err:
        download(f, tmp_path)
    assert err.value.kind == "auth" and "HF_TOKEN" in str(err.value)
    with pytest.raises(DownloadError) as err:
        download(HubFile("someone/tiny-GGUF", "gone.gguf", 10, None), tmp_path)
    assert err.value.kind == "not_found"


def test_not_enough_disk_space_is_refused_before_starting(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10**12, 10**12 - (50 << 20), 50 << 20))
    f = list_gguf_files(REPO)[0]
    with pytest.raises(DownloadError) as err:
        download(f, tmp_path)
    assert err.value.kind == "disk" and "GB needed" in str(err.value)
    assert not partial_path(tmp_path / f.filename).exists()


def test_disk_full_while_writing_keeps_the_partial_file_and_says_why(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    f = list_gguf_files(REPO)[0]
    real_open = Path.open

    class Full:
        def __init__(self, fh) -> None:
            self.fh, self.written = fh, 0

        def write(self, b: bytes) -> int:
            if self.written + len(b) > 4 << 20:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(b)
            return self.fh.write(b)

        def __enter__(self):
            return self

        def __exit__(self, *a) -> None:
            self.fh.close()

    def fake_open(self, mode="r", *a, **k):
        fh = real_open(self, mode, *a, **k)
        return Full(fh) if (self.name.endswith(".partial") and "a" in mode) or "w" in mode else fh

    monkeypatch.setattr(Path, "open", fake_open)
    with pytest.raises(DownloadError) as err:
        download(f, tmp_path)
    assert err.value.kind == "disk" and "No space left" in str(err.value)
    assert not (tmp_path / f.filename).exists()
    monkeypatch.setattr(Path, "open", real_open)
    assert download(f, tmp_path).stat().st_size == f.size  # after freeing space, it resumes


def test_the_model_manager_downloads_with_progress(qtbot, hub: HubServer, isolated_data: Path) -> None:
    from app.model_manager import ModelManager

    dialog = ModelManager()
    qtbot.addWidget(dialog)
    assert dialog.repos.count() >= 3  # the catalog, before any search
    dialog.search.setText("tiny")
    dialog.run_search()
    qtbot.waitUntil(lambda: dialog.repos.count() == 1 and dialog.repos.item(0).text() == "someone/tiny-GGUF", timeout=10_000)
    dialog.repos.setCurrentRow(0)
    qtbot.waitUntil(lambda: dialog.files.count() == 1, timeout=10_000)
    assert "fits on this machine" in dialog.files.item(0).text()
    dialog.files.setCurrentRow(0)
    dialog.start_download()
    qtbot.waitUntil(lambda: dialog.use_button.isEnabled(), timeout=30_000)
    assert dialog.bar.value() == dialog.bar.maximum() and "sha256 verified" in dialog.status.text()
    assert dialog.downloaded and Path(dialog.downloaded).parent == isolated_data / "models"
