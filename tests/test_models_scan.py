"""The user's models on disk, Qt-free (engine/models/library.py): the models folder scanned, damaged
files told apart with why, deletion with the acceleration folder, repair from where the file came
from, the catalog's files recognised on disk; and the hub that cannot be reached said at once, in
words (engine/models/download.py). No test reaches the internet: an unreachable hub is a closed
local port or a resolver that fails or hangs."""

from __future__ import annotations

import json
import shutil
import socket
import threading
from pathlib import Path

import pytest

from engine.models.download import PROBE_TIMEOUT, DownloadError, HubFile, list_gguf_files, search_gguf_repos
from engine.models.library import (
    delete_model,
    import_gguf,
    in_models_folder,
    installed_models,
    on_disk,
    remove_from_list,
    repair_source,
    scan_models_folder,
    weights_to_delete,
)
from engine.models.registry import ModelRecord, ModelRegistry
from engine.paths import models_dir
from tests.remote_servers import free_port


@pytest.fixture
def no_shipped_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECEE_TEST_SHIPPED_ACCEL_DIR", str(tmp_path / "no-shipped-weights"))


def test_gguf_files_copied_into_the_models_folder_are_registered(model_path: Path, isolated_data: Path) -> None:
    """Issue 23 item 7: GGUF files copied into the models folder were ignored."""
    folder = models_dir()
    shutil.copyfile(model_path, folder / "mine.gguf")
    (folder / "lmstudio-community" / "repo").mkdir(parents=True)
    shutil.copyfile(model_path, folder / "lmstudio-community" / "repo" / "mine.gguf")  # same name, another folder
    (folder / "half.gguf").write_bytes(model_path.read_bytes()[: 5 << 20])
    (folder / "busy.gguf.partial").write_bytes(b"GGUF" + b"\0" * 100)  # a download in progress
    (folder / "notes.gguf").write_text("not a model\n" * 50)
    found = scan_models_folder()
    assert sorted(Path(r.path).parent.name for r in found.added) == ["models", "repo"]
    assert len({r.id for r in found.added}) == 2  # two files of the same name keep two ids
    skipped = {p.name: why for p, why in found.skipped}
    assert set(skipped) == {"half.gguf", "notes.gguf"}
    assert "truncated" in skipped["half.gguf"] and "not a GGUF" in skipped["notes.gguf"]
    assert "Found 2 new models" in found.summary() and "skipped half.gguf" in found.summary()
    assert {r.path for r in ModelRegistry().all()} == {r.path for r in found.added}
    again = scan_models_folder()  # registered files are not read again
    assert again.added == [] and len(again.skipped) == 2


def test_a_truncated_model_is_listed_as_damaged_saying_why(model_path: Path, isolated_data: Path, tmp_path: Path) -> None:
    """Issue 23 item 7: a registered file truncated later vanished without a word."""
    copy = tmp_path / "qwen2.5-0.5b-instruct-q4_k_m.gguf"  # the catalog's file name: repaired from the hub
    shutil.copyfile(model_path, copy)
    record = import_gguf(copy)
    other = tmp_path / "gone.gguf"
    shutil.copyfile(model_path, other)
    gone = import_gguf(other)
    other.unlink()
    [ok_before, _] = installed_models()
    assert ok_before.state == "ok" and ok_before.architecture == "llama" and ok_before.n_ctx_train == 8192
    assert ok_before.n_layer == 30 and ok_before.weights
    with copy.open("r+b") as fh:
        fh.truncate(model_path.stat().st_size // 3)
    damaged, missing = installed_models()
    assert damaged.state == "damaged" and damaged.why.startswith("truncated: 33 MB of 98 MB present")
    assert damaged.repair == HubFile("Qwen/Qwen2.5-0.5B-Instruct-GGUF", copy.name, record.size, record.sha256)
    assert missing.state == "missing" and "gone" in missing.why and missing.record.id == gone.id
    assert missing.repair is None  # a file of the user's own: only removal is offered


def test_a_gguf_in_the_models_folder_that_cannot_be_added_is_listed_as_damaged(
    model_path: Path, isolated_data: Path, tmp_path: Path
) -> None:
    """Issue 45 item 2: a truncated GGUF in the models folder was left out of the installed models
    (only the scan's summary named it, ending "download it again.."), so it could not be deleted."""
    elsewhere = tmp_path / "half.gguf"  # a registered file of the same name elsewhere keeps its entry
    shutil.copyfile(model_path, elsewhere)
    namesake = import_gguf(elsewhere)
    half = models_dir() / "half.gguf"
    half.write_bytes(model_path.read_bytes()[:40_000_000])
    (models_dir() / "notes.gguf").write_text("not a model\n" * 50)
    found = scan_models_folder()
    assert "download it again; skipped notes.gguf" in found.summary() and ".." not in found.summary()
    ok, *broken = installed_models()
    assert ok.record == namesake and ok.state == "ok"
    assert [(m.record.id, m.state, m.registered) for m in broken] == [("half", "damaged", False), ("notes", "damaged", False)]
    assert broken[0].why.startswith("half.gguf is truncated: 40.0 MB present of") and broken[0].repair is None
    assert "not a GGUF" in broken[1].why and broken[0].record.size == 40_000_000
    assert delete_model(broken[0].record) == [half] and not half.exists()
    assert ModelRegistry().get("half") == namesake  # the namesake's entry stays
    assert [m.record.id for m in installed_models()] == ["half", "notes"]
    assert in_models_folder(models_dir() / "sub" / "x.gguf") and not in_models_folder(elsewhere)
    remove_from_list(namesake)
    assert elsewhere.is_file() and ModelRegistry().all() == []


def test_repair_downloads_from_where_the_file_came_from() -> None:
    hf = ModelRecord("m", "/x/m.gguf", "ab" * 32, 10, "hf:owner/repo/sub/m.gguf")
    assert repair_source(hf) == HubFile("owner/repo", "sub/m.gguf", 10, "ab" * 32)
    assert repair_source(ModelRecord("n", "/x/n.gguf", "", 5, "local")) is None


def test_delete_removes_the_file_its_entry_and_its_acceleration_folder(
    model_path: Path, isolated_data: Path, tmp_path: Path, no_shipped_weights: None
) -> None:
    from engine.models.acceleration import user_weights_dir

    copy = models_dir() / "doomed.gguf"
    shutil.copyfile(model_path, copy)
    record = import_gguf(copy)
    weights = user_weights_dir() / "doomed"
    weights.mkdir(parents=True)
    (weights / "manifest.json").write_text(json.dumps({"target_sha256": record.sha256, "eagle": {"file": "h.gguf"}}))
    (weights / "h.gguf").write_bytes(b"head")
    neighbour = user_weights_dir() / "other"  # another model's weights stay
    neighbour.mkdir()
    (neighbour / "manifest.json").write_text(json.dumps({"target_sha256": "0" * 64}))
    [listed] = installed_models()
    assert listed.acceleration_dir == weights and listed.weights.startswith("EAGLE")
    twin = models_dir() / "twin.gguf"  # another copy of the same file uses the same weights
    shutil.copyfile(model_path, twin)
    twin_record = import_gguf(twin)
    assert weights_to_delete(record) is None
    assert delete_model(twin_record) == [twin] and weights.is_dir()
    assert weights_to_delete(record) == weights
    removed = delete_model(record)
    assert copy in removed and weights in removed
    assert not copy.exists() and not weights.exists() and neighbour.is_dir()
    assert ModelRegistry().all() == []


def test_a_catalog_file_on_disk_is_known_as_installed(model_path: Path, isolated_data: Path) -> None:
    """Issue 23 item 8: a file already on disk was not recognised by the model manager."""
    name = "smollm2-360m-instruct-q8_0.gguf"
    assert on_disk(name) is None
    shutil.copyfile(model_path, models_dir() / name)
    scan_models_folder()
    found = on_disk(name.upper())
    assert found is not None and Path(found.path) == models_dir() / name


# -- the hub out of reach --------------------------------------------------------------------------


def _fails_in_words(call, monkeypatch: pytest.MonkeyPatch) -> DownloadError:
    """The call fails at once: from the reachability probe, before the hub library (whose retries
    took the 15-45 s) is asked at all; checked by what is called, not by a wall clock."""
    monkeypatch.setattr("engine.models.download._api", lambda: pytest.fail("the hub library was asked"))
    with pytest.raises(DownloadError) as err:
        call()
    text = str(err.value)
    assert err.value.kind == "offline" and "offline" in text.lower(), text
    assert "Errno" not in text and "Import GGUF" in text and "installed models" in text, text
    return err.value


def _count_lookups(monkeypatch: pytest.MonkeyPatch, look_up) -> list[str]:
    """Replace the resolver with `look_up`; the hosts it was asked for, in order."""
    asked: list[str] = []

    def counted(host, *a, **k):
        asked.append(host)
        return look_up(host, *a, **k)

    monkeypatch.setattr(socket, "getaddrinfo", counted)
    return asked


def test_search_with_the_hub_unreachable_fails_at_once_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23 item 8: search failed after 15-45 s with a raw "[Errno -2]"."""
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nobody listens there
    monkeypatch.setattr("engine.models.download._token", lambda: None)
    asked = _count_lookups(monkeypatch, socket.getaddrinfo)
    err = _fails_in_words(lambda: search_gguf_repos("qwen"), monkeypatch)
    assert "refused" in str(err) and asked == ["127.0.0.1"]  # one probe, no retries
    _fails_in_words(lambda: list_gguf_files("Qwen/Qwen2.5-0.5B-Instruct-GGUF"), monkeypatch)


def test_no_dns_is_said_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "https://huggingface.co")
    monkeypatch.setattr("engine.models.download._token", lambda: None)

    def no_dns(*_a, **_k):
        raise socket.gaierror(-2, "Name or service not known")

    asked = _count_lookups(monkeypatch, no_dns)
    err = _fails_in_words(lambda: search_gguf_repos("qwen"), monkeypatch)
    assert "looked up" in str(err) and asked == ["huggingface.co"]


def test_a_resolver_that_hangs_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline with a configured name server, the lookup itself hangs (the 15-45 s). The probe gives
    up after PROBE_TIMEOUT: had it waited for the resolver, the lookup would fail only when released
    (far later) and be told as a failed lookup, not as one that did not answer."""
    monkeypatch.setenv("HF_ENDPOINT", "https://huggingface.co")
    monkeypatch.setattr("engine.models.download._token", lambda: None)
    released = threading.Event()

    def hanging(*_a, **_k):
        released.wait(10 * PROBE_TIMEOUT)
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    asked = _count_lookups(monkeypatch, hanging)
    try:
        err = _fails_in_words(lambda: search_gguf_repos("qwen"), monkeypatch)
        assert f"cannot be looked up (no answer in {PROBE_TIMEOUT:.0f} s)" in str(err), str(err)
        assert asked == ["huggingface.co"]
    finally:
        released.set()


def test_hf_hub_offline_is_honoured_without_asking_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket, "getaddrinfo", lambda *_a, **_k: pytest.fail("the network was asked"))
    _fails_in_words(lambda: search_gguf_repos("qwen"), monkeypatch)


def test_the_cli_says_why_a_model_is_damaged_and_a_moved_file_keeps_its_entry(
    model_path: Path, isolated_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main as cli

    copy = tmp_path / "mine.gguf"
    shutil.copyfile(model_path, copy)
    assert cli(["models", "add", str(copy)]) == 0
    with copy.open("r+b") as fh:
        fh.truncate(10_000_000)
    capsys.readouterr()
    assert cli(["models"]) == 0
    out = capsys.readouterr().out
    assert "DAMAGED" in out and "truncated: 10 MB of 98 MB present" in out
    moved = tmp_path / "elsewhere" / "mine.gguf"  # the same model, moved: one entry, at its new place
    moved.parent.mkdir()
    shutil.copyfile(model_path, moved)
    copy.unlink()
    assert cli(["models", "add", str(moved)]) == 0
    assert [(m.id, m.path) for m in ModelRegistry().all()] == [("mine", str(moved))]
