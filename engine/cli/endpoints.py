"""`specee endpoints`: the remote OpenAI-compatible servers `specee chat --endpoint` talks to."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.remote.endpoints import Endpoint


def cmd_endpoints(args: argparse.Namespace) -> int:
    """`specee endpoints add|list|remove`: remote OpenAI-compatible servers (keys in the OS keyring)."""
    from engine.remote.endpoints import API_KEY_ENV, Endpoint, EndpointError, EndpointRegistry, api_key_source, store_api_key

    registry = EndpointRegistry()
    try:
        if args.action == "add":
            if not args.name or not args.url:
                print("specee endpoints add: give a NAME and the server's URL (e.g. http://127.0.0.1:8080)", file=sys.stderr)
                return 2
            key = sys.stdin.readline().strip() if args.api_key_stdin else ""
            if args.api_key_stdin and not key:
                print("specee endpoints add: --api-key-stdin, but standard input had no key on its first line", file=sys.stderr)
                return 2
            endpoint = registry.add(Endpoint(args.name, args.url, args.model or ""))
            print(f"added {endpoint.name}: {endpoint.base_url}")
            why = store_api_key(endpoint.name, key) if key else ""
            if why:
                print(f"[specee] the API key was NOT saved: {why}. Give it when you chat: "
                      f"{API_KEY_ENV}=... specee chat --endpoint {endpoint.name}", file=sys.stderr)  # fmt: skip
            elif key:
                print("API key saved in the OS keyring")
            _print_models(endpoint, api_key_source(endpoint.name)[0])
            return 0
        if args.action == "remove":
            if not args.name:
                print("specee endpoints remove: give the endpoint's NAME", file=sys.stderr)
                return 2
            registry.remove(args.name)
            print(f"removed {args.name} (and its API key)")
            return 0
    except EndpointError as exc:
        print(f"specee endpoints {args.action}: {exc}", file=sys.stderr)
        return 2
    endpoints = registry.all()
    if not endpoints:
        print("no endpoints yet; add one: specee endpoints add NAME URL [--api-key-stdin] [--model M]")
    for e in endpoints:
        key, where = api_key_source(e.name)
        print(f"{e.name:<20} {e.base_url}  model: {e.model or '(first listed)'}  API key: {where or 'none'}")
        _print_models(e, key)
    return 0


def _print_models(endpoint: Endpoint, key: str | None) -> None:
    """The server's models, or why it cannot say (the endpoint is kept either way)."""
    from engine.remote.openai_api import RemoteError, Timeouts, list_models

    try:
        ids = [m.id for m in list_models(endpoint, key, Timeouts(connect=5.0, read=15.0))]
    except RemoteError as exc:
        print(f"    models: not available now: {exc}", file=sys.stderr)
        return
    print(f"    models: {', '.join(ids) or '(none listed)'}")
    if endpoint.model and ids and endpoint.model not in ids:
        print(f"    [model '{endpoint.model}' is not among them; chat asks for it all the same]", file=sys.stderr)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`specee endpoints` and its flags."""
    endpoints = sub.add_parser("endpoints", help="remote OpenAI-compatible servers to chat with (specee chat --endpoint)")
    endpoints.add_argument("action", nargs="?", default="list", choices=["list", "add", "remove"])
    endpoints.add_argument("name", nargs="?", help="the endpoint's name (add, remove)")
    endpoints.add_argument("url", nargs="?", help="add: the server's address, e.g. http://127.0.0.1:8080 or https://host/v1")
    endpoints.add_argument("--api-key-stdin", action="store_true", help="add: read the API key from standard input's "
                           "first line (kept in the OS keyring, never on the command line or in a file)")  # fmt: skip
    endpoints.add_argument("--model", help="add: the model id to chat with (default: the first the server lists)")
    endpoints.set_defaults(func=cmd_endpoints)
