"""Where a training folder stands, for jobs stopped and resumed across days: `specee train status`.

Reads only what the stages leave on disk (question shards, teacher-data manifests, the training
checkpoint, exit recordings), so it answers while a job runs, after it was killed, and without
the model.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.train.dataset import read_manifest

CHECKPOINT = Path("head") / "checkpoint.pt"  # engine.train.pipeline: train_head(..., work / "head")


def folder_status(work: Path) -> list[str]:
    """One line per stage found in `work`, in the order a run goes through them."""
    lines: list[str] = []
    shards = sorted((work / "magpie").glob("shard-*.jsonl"))
    if shards:
        written = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in shards)
        lines.append(f"questions: {len(shards)} shards, {written} written (before deduplication)")
    for name in ("train-data", "dev-data"):
        try:
            m = read_manifest(work / name)
        except (OSError, ValueError) as err:
            lines.append(f"teacher data ({name}): unreadable manifest ({err})")
            continue
        if m:
            done, tokens = len(m.get("done", [])), sum(s["n_tokens"] for s in m.get("shards", []))
            of = f" of {m['planned']}" if m.get("planned") else ""
            lines.append(f"teacher data ({name}): {done}{of} prompts, {tokens:,} tokens in {len(m.get('shards', []))} shards")
    ckpt = work / CHECKPOINT
    if ckpt.exists():
        lines.append(_training_line(ckpt))
    for rec in sorted([*work.glob("exit-data.npz"), *work.glob("*/exit-data.npz")]):
        lines.append(_exits_line(rec))
    return lines or [f"{work}: no training stage has written anything here yet"]


def _training_line(ckpt: Path) -> str:
    try:
        import torch
    except ImportError:
        return f"training: a checkpoint ({ckpt}); reading it needs the `train` extra"
    try:
        c = torch.load(ckpt, weights_only=False, map_location="cpu")
    except Exception as err:  # a torn or foreign file: say so, the trainer says the rest
        return f"training: {ckpt} is unreadable ({type(err).__name__}: {err})"
    epochs = f" of {c['epochs']}" if c.get("epochs") else ""
    of_batches = f" of {c['per_epoch']}" if c.get("per_epoch") else ""
    into = f", {c['batch']}{of_batches} batches into the next" if c.get("batch") else ""
    evals = ", ".join(f"{h['epoch']}: {h['eval']['top1']:.3f}" for h in c.get("history", []) if h.get("eval"))
    return f"training: {c['epoch']}{epochs} epochs done{into}; {c.get('elapsed', 0.0) / 3600:.2f} h trained" + (
        f"; dev top-1 by epoch {evals}" if evals else ""
    )


def _exits_line(rec: Path) -> str:
    import numpy as np

    try:
        with np.load(rec) as z:
            steps, prompts = len(z["token"]), len(json.loads(str(z["done"])))
    except Exception as err:
        return f"exit data ({rec.parent.name}): unreadable ({type(err).__name__}); `specee train exits` records it again"
    return f"exit data ({rec.parent.name}): {prompts} prompts, {steps:,} steps recorded"
