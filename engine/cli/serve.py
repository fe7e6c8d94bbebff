"""`specee serve`: the OpenAI-compatible HTTP server (engine/serve/)."""

from __future__ import annotations

import argparse
import sys

from engine import protocol as p
from engine.cli.resolve import resolve_model
from engine.models.registry import ModelRegistry


def cmd_serve(args: argparse.Namespace) -> int:
    """`specee serve`: the OpenAI-compatible HTTP server (engine/serve/)."""

    from engine import knobs
    from engine.serve.security import allowed_origin, bind_problem
    from engine.serve.server import default_parallel, parallel_problem, serve

    api_key = args.api_key or knobs.API_KEY.text()
    problem = bind_problem(args.host, args.allow_remote, api_key)  # before any model work
    if problem:
        print(f"specee serve: {problem}", file=sys.stderr)
        return 2
    parallel = default_parallel() if args.parallel is None else args.parallel
    if problem := parallel_problem(parallel):
        print(f"specee serve: {problem}", file=sys.stderr)
        return 2
    try:
        origins = tuple(allowed_origin(o) for o in args.allow_origin)
    except ValueError as exc:
        print(f"specee serve: {exc}", file=sys.stderr)
        return 2
    model = resolve_model(args.model)
    if not model.is_file():
        print(f"specee serve: no model file at {model} (give a GGUF path or a registered id: specee models)", file=sys.stderr)
        return 2
    record = ModelRegistry().get(args.model) if args.model else None
    model_id = record.id if record else model.stem
    placement = p.Placement(n_ctx=args.ctx, n_threads=args.threads)
    placement.validate()
    return serve(
        model, model_id, args.mode, placement, args.host, args.port, api_key, args.allow_remote, args.max_queue, args.verbose,
        args.exit_with_stdin, origins, parallel,
    )  # fmt: skip


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`specee serve` and its flags."""
    serve = sub.add_parser("serve", help="OpenAI-compatible HTTP server (chat/completions, completions, models)")
    serve.add_argument("--model", help="GGUF path or registered model id (default: the default model)")
    serve.add_argument("--mode", default="auto", choices=list(p.MODES), help="acceleration mode")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--allow-remote", action="store_true", help="allow listening beyond localhost (needs an API key)")
    serve.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on /v1 (default: $SPECEE_API_KEY)")
    serve.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                       help="let browser clients of this origin use the API (CORS), e.g. app://obsidian.md, "
                            "vscode-webview://ID, chrome-extension://ID; repeatable. Pages on localhost need none")  # fmt: skip
    serve.add_argument("--ctx", type=int, default=4096)
    serve.add_argument("--threads", type=int, default=0)
    serve.add_argument("--max-queue", type=int, default=32, help="requests that may wait for their turn (more get 429)")
    serve.add_argument("--parallel", type=int, help="requests decoded together in vanilla and ngram modes (default: "
                       "2 per physical core, 2..8; 1: one at a time); eagle, specee and draft answer one at a time")  # fmt: skip
    serve.add_argument("--verbose", action="store_true", help="log every request")
    serve.add_argument("--exit-with-stdin", action="store_true", help="stop when standard input closes (a launcher's child)")
    serve.set_defaults(func=cmd_serve)
