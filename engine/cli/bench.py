"""`specee bench`: decode and prefill speed per acceleration mode, or the cost curve."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine import protocol as p
from engine.cli.resolve import resolve_model
from engine.paths import REPO_ROOT, RESOURCES_DIR


def cmd_bench(args: argparse.Namespace) -> int:
    from engine.bench.runner import print_report, run_bench, write_report
    from engine.prompts import load_prompts

    if args.cost_curve:
        from engine.atomic import write_text_atomic
        from engine.bench.cost_curve import report as cost_report
        from engine.hardware import physical_cores

        text, data = cost_report(resolve_model(args.model), args.threads or physical_cores())
        print(text)
        if args.json:
            write_text_atomic(Path(args.json), json.dumps(data, indent=1))
        return 0
    if args.long:
        return _long(args)
    prompts = load_prompts(args.prompts)
    if args.limit:
        prompts = prompts[: args.limit]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if "vanilla" not in modes:
        modes.insert(0, "vanilla")  # every ratio is to vanilla measured in the same run
    if args.layout != "auto" and args.gpu_layers is None:
        print("specee bench: --layout first|last needs --gpu-layers N", file=sys.stderr)
        return 2
    layout = "last" if args.gpu_layers is not None and args.layout == "auto" else args.layout

    def bench() -> dict:
        return run_bench(
            str(resolve_model(args.model)), prompts, modes, args.max_tokens, args.warmup, args.ctx, args.threads,
            args.upstream_python, n_gpu_layers=args.gpu_layers, layout=layout, peer_server=_peer_server(args, modes),
            repeat=args.repeat,
        )  # fmt: skip

    report = bench()
    print_report(report)
    if args.hog:
        from engine.bench.contention import busy_neighbour, compare

        with busy_neighbour():
            busy = bench()
        print("\nthe same with a busy-loop process beside it:")
        print_report(busy)
        print(compare(report, busy))
        report = {**report, "with_busy_neighbour": busy}
    if args.json:
        write_report(report, args.json)
        print(f"report written to {args.json}", file=sys.stderr)
    return 0


def _long(args: argparse.Namespace) -> int:
    """`specee bench --long`: long documents read cold, ours beside plain llama-server (engine/bench/long_prompts.py)."""
    from engine.bench.long_prompts import LONG_SIDES, print_long, run_long

    sides = [m.strip() for m in (args.modes if args.modes != "vanilla" else LONG_SIDES).split(",") if m.strip()]
    lengths = None
    if args.long_lengths:
        try:
            lengths = [int(n) for n in args.long_lengths.split(",")]
        except ValueError:
            print(f"specee bench: --long-lengths takes token counts like 1024,4096, got {args.long_lengths!r}", file=sys.stderr)
            return 2
        if any(n < 32 for n in lengths):
            print("specee bench: --long-lengths: a document needs 32 tokens at least (template, question)", file=sys.stderr)
            return 2
    report = run_long(resolve_model(args.model), sides, lengths, args.repeat, args.threads, _peer_server(args, sides),
                      warmup=args.warmup > 0)  # fmt: skip
    print_long(report)
    if args.json:
        from engine.atomic import write_text_atomic

        write_text_atomic(Path(args.json), json.dumps(report, indent=1))
        print(f"report written to {args.json}", file=sys.stderr)
    return 0


def _peer_server(args: argparse.Namespace, modes: list[str]) -> str | None:
    """llama-server for peer modes: --peer-server, else the one `native/build.py --server` builds (once)."""
    if not any(m == "peer" or m.startswith("peer:") for m in modes):
        return None
    if args.peer_server:
        return args.peer_server
    import subprocess

    build = REPO_ROOT / "native" / "build.py"
    out = subprocess.run([sys.executable, str(build), "--server"], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise SystemExit("could not build llama-server for the peer modes (see the message above)")
    return out.stdout.strip().splitlines()[-1]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`specee bench` and its flags."""
    bench = sub.add_parser("bench", help="measure decode/prefill speed per acceleration mode")
    bench.add_argument("--model", help="GGUF path or registered model id (default: the default model)")
    bench.add_argument(
        "--modes",
        default="vanilla",
        help="comma-separated: vanilla, eagle, eagle:N, specee, specee:check, specee:nofill, specee:noexit, ngram, "
        "ngram:<llama.cpp n-gram type>, draft, draft:N, auto, upstream, peer (upstream llama-server), "
        "peer:<llama.cpp drafter>, peer:draft, peer:eagle3",
    )
    bench.add_argument("--prompts", default=str(RESOURCES_DIR / "prompts/dev.jsonl"))
    bench.add_argument("--max-tokens", type=int, default=64)
    bench.add_argument("--warmup", type=int, default=2)
    bench.add_argument("--repeat", type=int, default=1,
                       help="run each prompt N times per mode (modes taking turns); keep each mode's median run")  # fmt: skip
    bench.add_argument("--limit", type=int, default=0, help="use only the first N prompts")
    bench.add_argument("--ctx", type=int, default=4096)
    bench.add_argument("--threads", type=int, default=0)
    bench.add_argument("--gpu-layers", type=int, help="override the planner: this many layers on the GPU (-1: all)")
    bench.add_argument("--layout", choices=list(p.LAYOUTS), default="auto",
                       help="with --gpu-layers: the first (SpecEE) or last (upstream) layers on the GPU")  # fmt: skip
    bench.add_argument("--peer-server", help="llama-server binary for peer modes (default: built by native/build.py --server)")
    bench.add_argument("--upstream-python", help="interpreter with plain upstream llama-cpp-python (for mode 'upstream')")
    bench.add_argument("--cost-curve", action="store_true", help="instead: the cost of one decode call of n rows, and the floor")
    bench.add_argument("--long", action="store_true",
                       help="instead: time to the first token of long documents (1k, 4k, 16k tokens, or up to the model's "
                            "context less 1k) read cold, ours beside plain llama-server; --modes then names the sides: "
                            "vanilla[:threads=N][+batch=N], serve[:parallel=N][+threads=N][+batch=N], peer[:LLAMA-SERVER FLAGS] "
                            "(default: vanilla,peer); --repeat: documents per length and side")  # fmt: skip
    bench.add_argument("--long-lengths", help="with --long: these prompt lengths in tokens instead, e.g. 1024,4096")
    bench.add_argument("--hog", action="store_true", help="run again beside a busy-loop process: slowdown per mode")
    bench.add_argument("--json", help="write the full report here")
    bench.set_defaults(func=cmd_bench)
