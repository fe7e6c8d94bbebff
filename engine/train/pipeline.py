"""`specee train eagle`: teacher data -> training -> GGUF export -> evaluation -> manifest, for any
llama-architecture GGUF. Every stage is resumable: data shards and checkpoints are kept in --work."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import torch

from engine.atomic import write_text_atomic
from engine.models.acceleration import ACCELERATED_ARCHS, model_sha256
from engine.models.gguf_file import inspect_gguf
from engine.paths import RESOURCES_DIR, cache_dir
from engine.prompts import DEV_PROMPTS, load_prompts
from engine.train.dataset import generate_dataset, read_manifest
from engine.train.eagle_export import export_head, import_head
from engine.train.eagle_train import evaluate, load_sequences, target_tensors, train_head
from engine.train.magpie import mixed_prompts

TRAIN_PROMPTS = RESOURCES_DIR / "prompts" / "train.jsonl"


def train_eagle(
    model: Path,
    out: Path,
    prompts_file: Path = TRAIN_PROMPTS,
    n_prompts: int = 0,
    eval_prompts: int = 40,
    max_new: int = 96,
    epochs: int = 6,
    draft_vocab: int = 4096,
    steps: int = 3,
    work: Path | None = None,
    time_budget_s: float = 0.0,
    head_ff: int = 0,
    train_dtype: str = "auto",
) -> dict:
    info = inspect_gguf(model)
    if info.architecture not in ACCELERATED_ARCHS:
        raise SystemExit(
            f"{model.name} is a {info.architecture!r} model; acceleration training supports {', '.join(ACCELERATED_ARCHS)} GGUFs"
        )
    sha = model_sha256(model)
    work = work or cache_dir() / "train" / sha[:16]
    t0 = time.monotonic()
    prompts = mixed_prompts(prompts_file, n_prompts)  # the trainers' shuffled order
    generate_dataset(str(model), prompts, work / "train-data", max_new=max_new)
    dev = load_prompts(DEV_PROMPTS)[:eval_prompts] if eval_prompts else []
    if dev:
        generate_dataset(str(model), dev, work / "dev-data", max_new=max_new)
    t_data = time.monotonic() - t0
    result = train_head(
        str(model),
        work / "train-data",
        work / "head",
        eval_dir=work / "dev-data" if dev else None,
        epochs=epochs,
        draft_vocab=draft_vocab,
        steps=steps,
        time_budget_s=time_budget_s,
        n_ff=head_ff,
        train_dtype=train_dtype,
    )
    head = result["head"]
    metrics: dict = {}
    if dev:
        t2d = torch.full((head.embed.shape[0],), -1, dtype=torch.long)  # target vocab -> draft id
        t2d[head.d2t] = torch.arange(len(head.d2t))
        metrics = evaluate(head, load_sequences(work / "dev-data"), steps, t2d)
    command = "specee " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else ""
    manifest_path = out.parent / "manifest.json"
    previous = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    if previous.get("target_sha256") != sha:
        previous = {}
    previous.pop("exits", None)  # predictors belong to the old head's candidates: retrain them
    manifest = {
        **previous,
        "target_model": model.name,
        "target_sha256": sha,
        "eagle": {
            "file": out.name,
            "n_draft": steps,
            "draft_vocab": head.cfg.draft_vocab,
            "draft_vocab_coverage": round(result["coverage"], 4),
            **(
                {"draft_vocab_heldout_coverage": {str(k): round(v, 4) for k, v in result["draft_vocab_heldout_coverage"].items()}}
                if result["draft_vocab_heldout_coverage"]
                else {}
            ),
            "n_ff": head.cfg.n_ff,
            "layers": list(head.cfg.layers),
            "train_tokens": result["train_tokens"],
            "train_sequences": result["train_seqs"],
            "epochs": len(result["history"]),
            "best_epoch": result["best_epoch"],
            "data_wall_s": round(t_data, 1),
            "train_wall_s": round(result["wall_s"], 1),
            "train_dtype": result["dtype"],
            "dev_eval": {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()},
            "history": result["history"],
            "command": command,
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    export_head(
        head, str(model), sha, out, training_json=json.dumps({k: v for k, v in manifest["eagle"].items() if k != "history"})
    )
    write_text_atomic(manifest_path, json.dumps(manifest, indent=1))
    return manifest


def evaluate_heads(
    model: Path, heads: list[Path], work: Path, eval_prompts: int = 102, max_new: int = 96, steps: int = 3
) -> dict[str, dict]:
    """Exported heads for `model` evaluated on the same teacher data of the development prompts (made
    in work/dev-data if missing, resumable; a training run's --work reuses its own): top-1/top-4 and
    the expected acceptance, each with the weights the engine runs (quantized matrices as stored)."""
    dev = load_prompts(DEV_PROMPTS)[:eval_prompts]
    generate_dataset(str(model), dev, work / "dev-data", max_new=max_new)
    layers = read_manifest(work / "dev-data")["layers"]
    seqs = load_sequences(work / "dev-data")
    embed = torch.from_numpy(target_tensors(str(model))["token_embd.weight"].astype("float32"))
    out = {}
    for path in heads:
        head = import_head(path, embed)
        if list(head.cfg.layers) != list(layers):
            raise SystemExit(f"{path} reads target layers {list(head.cfg.layers)}; the data in {work} has {layers}")
        t2d = torch.full((embed.shape[0],), -1, dtype=torch.long)  # target vocab -> draft id
        t2d[head.d2t] = torch.arange(len(head.d2t))
        metrics = evaluate(head, seqs, steps, t2d)
        out[str(path)] = {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}
    return out
