"""`specee models import-head MODEL REPO`: an EAGLE-3 head published on the Hugging Face hub, made usable
for an installed GGUF model.

Download (huggingface_hub, every file checked against the hub's sha256) -> check the checkpoint fits
the model (engine.models.head_checkpoint) -> rebuild the model's HF tokenizer from its GGUF
(engine.models.hf_tokenizer) -> llama.cpp's converter -> bind to the model's sha256
(engine.models.head_convert) -> install as <data dir>/acceleration/<model>/eagle.gguf with a
manifest naming the source. `specee models import-head` then measures eagle against vanilla on
development prompts with the real engine (engine.bench.head_measure). `auto` considers an imported
head only once the manifest holds that measurement (AccelerationPack.eagle_measured), so a head that
loads but drafts badly is never chosen unseen.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from engine.atomic import write_text_atomic
from engine.hashing import sha256_file
from engine.models import download as hub
from engine.models.acceleration import (
    ACCELERATED_ARCHS,
    AccelerationPack,
    acceleration_folder,
    find_pack,
    model_sha256,
    user_weights_dir,
)
from engine.models.download import DownloadError
from engine.models.gguf_fields import read_header
from engine.models.gguf_file import inspect_gguf
from engine.models.head_checkpoint import CheckpointError, check_fits, read_checkpoint
from engine.models.head_convert import ConvertError, bind, run_converter
from engine.models.hf_tokenizer import TokenizerExportError, write_hf_tokenizer
from engine.paths import cache_dir

HEAD_FILE = "eagle.gguf"
N_DRAFT = 3  # draft chain length the engine starts with, as for our own heads
# What a head checkpoint consists of; READMEs, training states and optimizer files are not fetched.
WANTED = (
    "config.json",
    "model*.safetensors",
    "model.safetensors.index.json",
    "pytorch_model*.bin",
    "pytorch_model.bin.index.json",
)

Progress = Callable[[str], None]


class HeadImportError(Exception):
    """kind: a DownloadError's, a CheckpointError's or a ConvertError's kind, or unsupported_model |
    exists | does_not_load"""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _quiet(_msg: str) -> None:
    pass


def download_checkpoint(repo: str, revision: str | None, dest: Path, progress: Progress = _quiet) -> tuple[str, dict[str, str]]:
    """Fetch the checkpoint files of `repo` at `revision` into `dest`; returns the commit and each file's sha256."""
    from huggingface_hub import hf_hub_download

    try:
        info = hub._api().model_info(repo, revision=revision, files_metadata=True)
    except Exception as exc:
        raise hub._hub_error(exc, repo + (f" at revision {revision}" if revision else "")) from None
    siblings = [s for s in info.siblings or [] if any(fnmatch.fnmatch(s.rfilename, pat) for pat in WANTED)]
    if not any(s.rfilename == "config.json" for s in siblings):
        raise CheckpointError("not_a_head", f"{repo} has no config.json: it is not a Hugging Face model checkpoint.")
    commit = info.sha or revision or "main"
    hashes = {}
    for s in siblings:
        size = s.size or (s.lfs.size if s.lfs else 0) or 0
        progress(f"downloading {s.rfilename} ({size / 1e6:.1f} MB)")
        try:
            path = Path(
                hf_hub_download(repo, s.rfilename, revision=commit, local_dir=dest, endpoint=hub.endpoint(), token=hub._token())
            )
        except Exception as exc:
            raise hub._hub_error(exc, f"{repo}/{s.rfilename}") from None
        sha = sha256_file(path)
        want = s.lfs.sha256 if s.lfs else None
        if want and sha != want:
            path.unlink()
            raise DownloadError("hash", f"{s.rfilename} arrived damaged (sha256 {sha[:12]}… instead of {want[:12]}…); retry.")
        hashes[s.rfilename] = sha
    return commit, hashes


def pack_folder(model: Path, sha: str, repo: str, force: bool) -> tuple[Path, dict]:
    """Where the head goes and the manifest it joins: the model's existing user pack, else a new folder.
    An existing head is replaced only with `force` or when it came from the same repository."""
    user_root = user_weights_dir()
    pack = find_pack(model)
    if pack is not None and pack.eagle_head is not None and pack.eagle_head.exists():
        if pack.folder.parent.resolve() != user_root.resolve():
            raise HeadImportError(
                "exists",
                f"{model.name} already has an EAGLE head shipped with the app ({pack.folder}); it would hide an imported one.",
            )
        same = pack.manifest.get("eagle", {}).get("source", {}).get("repo") == repo
        if not (force or same):
            raise HeadImportError(
                "exists",
                f"{model.name} already has an EAGLE head ({pack.eagle_head}); pass --force to replace it with {repo}'s.",
            )
    folder = acceleration_folder(model, sha)
    return folder, dict(pack.manifest) if pack is not None and pack.folder == folder else {}


def import_head(
    model: Path,
    repo: str,
    revision: str | None = None,
    *,
    force: bool = False,
    work: Path | None = None,
    progress: Progress = _quiet,
) -> dict:
    """Import `repo`'s head for `model`; returns the manifest written. Raises HeadImportError. Not yet
    measured: engine.bench.head_measure.measure_pack runs it in the engine and lets `auto` consider it."""
    try:
        return _import(model, repo, revision, force, work, progress)
    except (DownloadError, CheckpointError, ConvertError) as exc:
        raise HeadImportError(exc.kind, str(exc)) from None
    except TokenizerExportError as exc:
        raise HeadImportError("unsupported_model", f"{model.name}: {exc}") from None


def _import(model: Path, repo: str, revision: str | None, force: bool, work: Path | None, progress: Progress) -> dict:
    info = inspect_gguf(model)  # ModelFileError: a clear message for a damaged model file
    if info.architecture not in ACCELERATED_ARCHS:
        raise HeadImportError(
            "unsupported_model",
            f"{model.name} is a {info.architecture!r} model; EAGLE heads run on {', '.join(ACCELERATED_ARCHS)} models only.",
        )
    sha = model_sha256(model)
    folder, previous = pack_folder(model, sha, repo, force)
    tokenizer = read_header(model, keep=lambda key: key.startswith("tokenizer.")).fields
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"].value) if "tokenizer.ggml.tokens" in tokenizer else 0
    owned = work is None
    work = Path(tempfile.mkdtemp(prefix="head-import-", dir=cache_dir())) if work is None else work
    try:
        hparams = {
            "architectures": [f"{info.architecture}-gguf"],  # informative only: the converter reads the numbers
            "hidden_size": info.n_embd,
            "num_hidden_layers": info.n_layer,
            "num_attention_heads": int(info.arch_value("attention.head_count", 0)),
        }
        write_hf_tokenizer(tokenizer, hparams, work / "target")  # first: a tokenizer we cannot rebuild fails before any download
        commit, files = download_checkpoint(repo, revision, work / "checkpoint", progress)
        ckpt = read_checkpoint(work / "checkpoint", repo)
        check_fits(ckpt, repo, model.name, info.n_embd, n_vocab, info.n_layer)
        progress(f"{repo}: {ckpt.layout}, draft vocabulary {ckpt.draft_vocab_size}")
        progress("converting with llama.cpp's convert_hf_to_gguf.py")
        converted = run_converter(work / "checkpoint", work / "target", work / "converted.gguf", repo, progress)
        source = {
            "repo": repo,
            "revision": commit,
            "requested_revision": revision or "main",
            "architecture": ckpt.architecture,
            "layout": ckpt.layout,
            "files": files,
            "converter": "llama.cpp convert_hf_to_gguf.py (pinned llama-cpp-python sources), --outtype q8_0",
            "imported": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        folder.mkdir(parents=True, exist_ok=True)
        facts = bind(converted, list(tokenizer.values()), sha, json.dumps(source), folder / HEAD_FILE)
    finally:
        if owned:
            shutil.rmtree(work, ignore_errors=True)
    previous.pop("exits", None)  # predictors belong to the old head's candidates
    manifest = {
        **previous,
        "target_model": model.name,
        "target_sha256": sha,
        "eagle": {
            "file": HEAD_FILE,
            "n_draft": N_DRAFT,
            "draft_vocab": ckpt.draft_vocab_size,
            "layers": [int(x) for x in facts.get("target_layers", [])],
            "source": source,
        },
    }
    write_text_atomic(folder / "manifest.json", json.dumps(manifest, indent=1))
    progress(f"installed {folder / HEAD_FILE}")
    return manifest


def uninstall_head(pack: AccelerationPack) -> None:
    """Remove an imported head the engine refused (and the predictors that belonged to it)."""
    if pack.eagle_head is not None:
        pack.eagle_head.unlink(missing_ok=True)
    manifest = {k: v for k, v in pack.manifest.items() if k not in ("eagle", "exits")}
    write_text_atomic(pack.folder / "manifest.json", json.dumps(manifest, indent=1))
