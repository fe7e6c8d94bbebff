"""`specee train`: acceleration weights for a model (EAGLE heads, SpecEE exit predictors, their data).
The trainers sit behind the optional `train` extra: imported by name, when a command runs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.cli.resolve import resolve_model
from engine.paths import RESOURCES_DIR


def _trainer(module: str, name: str) -> Callable[..., Any] | None:
    """A trainer entry point, or None (with how to get it) when the `train` extra is missing."""
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        print(
            f"specee train needs the optional training extra ({exc.name} is missing): pip install -e '.[train]'", file=sys.stderr
        )
        return None


def cmd_train_eagle(args: argparse.Namespace) -> int:
    train_eagle = _trainer("engine.train.pipeline", "train_eagle")
    if train_eagle is None:
        return 2
    manifest = train_eagle(
        resolve_model(args.model), Path(args.out), Path(args.prompts), args.n_prompts, args.eval_prompts, args.max_new,
        args.epochs, args.draft_vocab, args.steps, Path(args.work) if args.work else None, args.time_budget,
        args.head_ff, args.dtype,
    )  # fmt: skip
    ev = manifest["eagle"]["dev_eval"]
    print(json.dumps({"head": str(args.out), **ev}, indent=1))
    return 0


def _train_folder(model: Path, work: str | None) -> Path:
    """--work, else the model's training folder (the one `specee train eagle` uses by default)."""
    if work:
        return Path(work)
    from engine.models.acceleration import model_sha256
    from engine.paths import cache_dir

    return cache_dir() / "train" / model_sha256(model)[:16]


def cmd_train_prompts(args: argparse.Namespace) -> int:
    make_prompts = _trainer("engine.train.magpie", "make_prompts")
    if make_prompts is None:
        return 2
    model = resolve_model(args.model)
    work = _train_folder(model, args.work)
    result = make_prompts(
        model, Path(args.out), args.n, work, Path(args.mix) if args.mix else None, args.mix_first, args.seed, args.threads,
        Path(args.exclude) if args.exclude else None,
    )  # fmt: skip
    print(json.dumps(result, indent=1))
    return 0


def cmd_train_requantize(args: argparse.Namespace) -> int:
    requantize_head = _trainer("engine.train.eagle_export", "requantize_head")
    if requantize_head is None:
        return 2
    from gguf import GGMLQuantizationType

    src = Path(args.head)
    out = Path(args.out) if args.out else src
    before = src.stat().st_size
    requantize_head(src, out, GGMLQuantizationType[args.type.upper()])
    print(f"{out}: {before / 1e6:.1f} MB -> {out.stat().st_size / 1e6:.1f} MB ({args.type.upper()} matrices)")
    return 0


def cmd_train_eval_head(args: argparse.Namespace) -> int:
    evaluate_heads = _trainer("engine.train.pipeline", "evaluate_heads")
    if evaluate_heads is None:
        return 2
    from engine.models.acceleration import AccelerationError, check_eagle_head

    model = resolve_model(args.model)
    try:
        for head in args.heads:
            check_eagle_head(Path(head), model)  # a damaged head or one for another model: as the engine says
    except AccelerationError as exc:
        print(f"specee train eval-head: {exc}", file=sys.stderr)
        return 1
    work = _train_folder(model, args.work)
    result = evaluate_heads(model, [Path(h) for h in args.heads], work, args.eval_prompts, args.max_new, args.steps)
    print(json.dumps(result, indent=1))
    return 0


def cmd_train_status(args: argparse.Namespace) -> int:
    from engine.train.status import folder_status

    work = Path(args.work) if args.work else _train_folder(resolve_model(args.model), None)
    if not work.is_dir():
        print(f"specee train status: no training folder at {work}", file=sys.stderr)
        return 1
    print(f"{work}:")
    for line in folder_status(work):
        print(f"  {line}")
    return 0


def cmd_train_exits(args: argparse.Namespace) -> int:
    train_exits = _trainer("engine.train.exits", "train_exits")
    if train_exits is None:
        return 2
    from engine.models.acceleration import AccelerationError, find_pack

    model = resolve_model(args.model)
    head = Path(args.head) if args.head else None
    if head is None:
        pack = find_pack(model)
        head = pack.eagle_head if pack else None
    if head is None:
        print(f"specee: {model.name} has no EAGLE head; train one first: specee train eagle --model {model}", file=sys.stderr)
        return 2
    try:
        entry = train_exits(
            model, head, Path(args.out), Path(args.prompts), args.first_prompt, args.n_prompts, args.max_new,
            args.precision, Path(args.work) if args.work else None, args.threads, args.epochs,
            **({"check_cost": args.check_cost} if args.check_cost is not None else {}),
            **({"max_skip": args.max_skip} if args.max_skip is not None else {}),
        )  # fmt: skip
    except AccelerationError as exc:
        print(f"specee: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in entry.items() if k != "command"}, indent=1))
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`specee train` and its subcommands."""
    train = sub.add_parser("train", help="train acceleration weights for a model (needs the `train` extra)")
    train_sub = train.add_subparsers(dest="what", required=True)
    eagle = train_sub.add_parser("eagle", help="teacher data + EAGLE-3 head training + GGUF export + evaluation")
    eagle.add_argument("--model", help="target GGUF (default: the default model)")
    eagle.add_argument("--out", required=True, help="head GGUF to write; manifest.json is written beside it")
    eagle.add_argument("--prompts", default=str(RESOURCES_DIR / "prompts/train.jsonl"))
    eagle.add_argument("--n-prompts", type=int, default=0, help="use only N training prompts (0 = all)")
    eagle.add_argument("--eval-prompts", type=int, default=40, help="development prompts for the quick evaluation")
    eagle.add_argument("--max-new", type=int, default=96, help="answer tokens the target writes per prompt")
    eagle.add_argument("--epochs", type=int, default=6)
    eagle.add_argument("--draft-vocab", type=int, default=4096, help="0 = the smallest size that covers the dev data")
    eagle.add_argument("--head-ff", type=int, default=0, help="the head's feed-forward size (0 = the target's)")
    eagle.add_argument("--steps", type=int, default=3, help="unrolled draft steps in training = chain length at inference")
    eagle.add_argument("--work", help="folder for data shards and checkpoints (resumable)")
    eagle.add_argument("--time-budget", type=float, default=0.0, help="stop training after this many seconds")
    eagle.add_argument(
        "--dtype",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="the training matmuls' dtype (auto: bf16 where the CPU has it natively, else fp32)",
    )
    eagle.set_defaults(func=cmd_train_eagle)
    prompts = train_sub.add_parser("prompts", help="training prompts the model writes itself (Magpie), resumable")
    prompts.add_argument("--model", help="target GGUF (default: the default model)")
    prompts.add_argument("--out", required=True, help="prompt file (JSONL) to write")
    prompts.add_argument("--n", type=int, default=4000, help="questions of the model's own to keep")
    prompts.add_argument("--mix", help="a prompt file whose prompts come first in the output")
    prompts.add_argument("--mix-first", type=int, default=0,
                         help="only the first N of --mix in the trainers' shuffled order (0 = all)")  # fmt: skip
    prompts.add_argument("--seed", type=int, default=0)
    prompts.add_argument("--exclude", help="leave out prompts, mixed-in or written, that open like one of this file "
                                           "(the head's training prompts: the exit predictors' own)")  # fmt: skip
    prompts.add_argument("--threads", type=int, default=0)
    prompts.add_argument("--work", help="folder for the question shards (default: the model's training folder)")
    prompts.set_defaults(func=cmd_train_prompts)
    requant = train_sub.add_parser("requantize", help="store an exported EAGLE head's matrices in another type")
    requant.add_argument("head", help="head GGUF (from specee train eagle)")
    requant.add_argument("--out", help="where to write it (default: in place)")
    requant.add_argument("--type", default="q4_0", choices=["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"])
    requant.set_defaults(func=cmd_train_requantize)
    ev = train_sub.add_parser("eval-head", help="exported EAGLE heads' top-1/top-4 and acceptance on the same dev data")
    ev.add_argument("heads", nargs="+", help="head GGUFs for the model")
    ev.add_argument("--model", help="target GGUF (default: the default model)")
    ev.add_argument("--eval-prompts", type=int, default=102, help="development prompts to evaluate on")
    ev.add_argument("--max-new", type=int, default=96, help="answer tokens the target writes per prompt")
    ev.add_argument("--steps", type=int, default=3, help="draft chain length evaluated")
    ev.add_argument("--work", help="folder of the dev teacher data (a training run's --work reuses its own)")
    ev.set_defaults(func=cmd_train_eval_head)
    status = train_sub.add_parser("status", help="where a training folder stands (questions, teacher data, epochs, exit data)")
    status.add_argument("--work", help="the folder (default: the model's training folder)")
    status.add_argument("--model", help="target GGUF, to find its default folder (default: the default model)")
    status.set_defaults(func=cmd_train_status)
    exits = train_sub.add_parser("exits", help="SpecEE exit predictors: data from the engine, training, calibration, export")
    exits.add_argument("--model", help="target GGUF (default: the default model)")
    exits.add_argument("--head", help="EAGLE head GGUF (default: the one installed for the model)")
    exits.add_argument("--out", required=True, help="predictor GGUF to write; its entry goes into manifest.json beside it")
    exits.add_argument("--prompts", default=str(RESOURCES_DIR / "prompts/train.jsonl"))
    exits.add_argument("--first-prompt", type=int, default=0, help="skip the first N (shuffled) prompts, e.g. the head's")
    exits.add_argument("--n-prompts", type=int, default=0, help="use only N prompts (0 = all after --first-prompt)")
    exits.add_argument("--max-new", type=int, default=96, help="answer tokens recorded per prompt")
    exits.add_argument("--precision", type=float, default=0.995, help="exit precision the thresholds are calibrated for")
    exits.add_argument("--epochs", type=int, default=30)
    exits.add_argument("--check-cost", type=float, default=None,
                       help="what checking one layer costs, in layers (default: measured on the default model)")  # fmt: skip
    exits.add_argument(
        "--max-skip",
        type=int,
        default=None,
        help="layers an exit may skip at most; K/V beyond the first skipped are approximated (default: what kept fidelity)",
    )
    exits.add_argument("--threads", type=int, default=0)
    exits.add_argument("--work", help="folder for the recorded data (resumable)")
    exits.set_defaults(func=cmd_train_exits)
