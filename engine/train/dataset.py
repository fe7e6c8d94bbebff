"""Self-distillation data on disk: memory-mapped fp16 shards plus a manifest, resumable.

Layout of a data folder:
  manifest.json            target sha256, feature layers, shard list, prompt ids done
  shard-00000/tokens.npy   int32 [n]           prompt + answer tokens of every sequence, concatenated
              features.npy float16 [n, 3, d]   target layer inputs per position
              top.npy      int32 [n, 4]        target top-4 next tokens per position
              seqs.npy     int32 [s, 3]        (start, length, n_prompt) per sequence
A shard is written under a temporary name and renamed when complete, so an interrupted run
resumes at the first prompt not yet in a finished shard.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from engine.atomic import write_text_atomic
from engine.hashing import sha256_file
from engine.llm.teacher import Sequence, Teacher
from engine.prompts import BenchPrompt

MANIFEST = "manifest.json"


class DatasetError(RuntimeError):
    pass


@dataclass
class Shard:
    tokens: np.ndarray
    features: np.ndarray
    top: np.ndarray
    seqs: np.ndarray


def read_manifest(folder: Path) -> dict:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return {}


def generate_dataset(
    model_path: str,
    prompts: list[BenchPrompt],
    folder: Path,
    max_new: int = 128,
    shard_size: int = 64,
    n_ctx: int = 1024,
    n_seq: int = 16,
) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    model_sha = sha256_file(Path(model_path))
    manifest = read_manifest(folder)
    if manifest and manifest.get("model_sha256") != model_sha:
        raise DatasetError(f"{folder} holds data for another model (sha256 {manifest['model_sha256'][:12]}); use a new folder")
    teacher = Teacher(model_path, layers=manifest.get("layers"), n_ctx=n_ctx)
    manifest = manifest or {
        "model_sha256": model_sha,
        "model": Path(model_path).name,
        "layers": teacher.layers,
        "n_embd": teacher.n_embd,
        "n_vocab": teacher.n_vocab,
        "max_new": max_new,
        "shards": [],
        "done": [],
    }
    manifest["planned"] = len(prompts)  # for `specee train status`; a resumed run has the same list
    done = set(manifest["done"])
    todo = [p for p in prompts if p.id not in done]
    for tmp in folder.glob(".shard-*"):
        shutil.rmtree(tmp)  # leftovers of an interrupted run
    bar = tqdm(total=len(prompts), initial=len(prompts) - len(todo), desc="teacher data", unit="prompt")
    for start in range(0, len(todo), shard_size):
        group = todo[start : start + shard_size]
        seqs: list[Sequence] = []
        for sub in range(0, len(group), n_seq):
            part = group[sub : sub + n_seq]
            seqs += teacher.sequences([p.text for p in part], max_new, n_seq)
            bar.update(len(part))
        name = f"shard-{len(manifest['shards']):05d}"
        _write_shard(folder, name, seqs)
        manifest["shards"].append({"name": name, "n_seqs": len(seqs), "n_tokens": int(sum(len(s.tokens) for s in seqs))})
        manifest["done"] += [p.id for p in group]
        write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=1))
    bar.close()
    teacher.close_generation()
    return manifest


def _write_shard(folder: Path, name: str, seqs: list[Sequence]) -> None:
    tmp = folder / f".{name}"
    tmp.mkdir()
    lengths = [len(s.tokens) for s in seqs]
    starts = np.cumsum([0, *lengths[:-1]])
    np.save(tmp / "tokens.npy", np.concatenate([s.tokens for s in seqs]))
    np.save(tmp / "features.npy", np.concatenate([s.features for s in seqs]))
    np.save(tmp / "top.npy", np.concatenate([s.target_top for s in seqs]))
    rows = [[st, ln, s.n_prompt] for st, ln, s in zip(starts, lengths, seqs, strict=True)]
    np.save(tmp / "seqs.npy", np.array(rows, dtype=np.int32))
    tmp.rename(folder / name)


def iter_shards(folder: Path) -> Iterator[Shard]:
    manifest = read_manifest(folder)
    if not manifest:
        raise DatasetError(f"{folder} has no {MANIFEST}; generate the data first")
    for entry in manifest["shards"]:
        d = folder / entry["name"]
        yield Shard(
            np.load(d / "tokens.npy", mmap_mode="r"),
            np.load(d / "features.npy", mmap_mode="r"),
            np.load(d / "top.npy", mmap_mode="r"),
            np.load(d / "seqs.npy"),
        )
