"""`specee`: the command-line tool (terminal chat, bench, models, doctor). One module per command
group, each adding its own subcommand and flags; here the parser is assembled and main() runs."""

from __future__ import annotations

import argparse
import sys

from engine import __version__
from engine import protocol as p
from engine.cli import bench, chat, doctor, endpoints, models, serve, train
from engine.cli.chat import _last_engine
from engine.cli.resolve import resolve_model
from engine.models.default_model import DefaultModelError
from engine.models.gguf_file import ModelFileError

__all__ = ["_last_engine", "build_parser", "main", "resolve_model"]

# `specee --help` lists the commands in this order
COMMAND_GROUPS = (chat, endpoints, bench, models, train, serve, doctor)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specee", description="SpecEE Chat command-line tool")
    parser.add_argument("--version", action="version", version=f"specee-chat {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in COMMAND_GROUPS:
        group.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ModelFileError, DefaultModelError, p.SettingsError) as exc:
        print(f"specee: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        from engine.client import EngineError
        from engine.prompts import PromptFileError

        if isinstance(exc, EngineError | PromptFileError):
            print(f"specee: {exc}", file=sys.stderr)
            return 2
        raise
