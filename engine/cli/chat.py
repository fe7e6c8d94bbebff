"""`specee chat`: the terminal chat, with the local worker or a remote endpoint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine import protocol as p
from engine.chats.generation import SYSTEM_PRESETS
from engine.cli.resolve import resolve_model
from engine.stats_text import accel_summary

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.chats.session import ChatSession
    from engine.client import EngineClient
    from engine.remote.client import RemoteClient


CHAT_COMMANDS = ("/help", "/?", "/new", "/clear", "/continue", "/quit", "/exit", "/set", "/attach")
CHAT_HELP = """commands (never sent to the model):
  /new, /clear   start a new conversation (forget the history)
  /continue      write more of the last answer (after the length limit or an interruption)
  /set           show the generation controls; /set NAME VALUE changes one (temperature, top_p, top_k,
                 min_p, repeat_penalty, max_tokens: 0 = the context's room)
  /attach FILE   give a text, Markdown, code or PDF file to the model with your next message
  /quit, /exit   quit (also Ctrl+D, or Ctrl+C twice at the prompt)
  /help          this list
Ctrl+C while an answer streams stops that answer; the engine keeps the model loaded."""


def cmd_chat(args: argparse.Namespace) -> int:
    """The terminal chat: drives the same Qt-free ChatSession as the window (in memory here), with
    the local worker or (--endpoint) a remote OpenAI-compatible server."""
    from engine.chats.generation import Generation
    from engine.chats.session import ChatSession
    from engine.client import EngineError, WorkerClient

    system = args.system or SYSTEM_PRESETS.get(args.preset or "None", "")
    chat = ChatSession(None, p.Sampling(seed=args.seed), system_prompt=system)
    try:  # the window's Generation controls, checked by the same rules
        controls = Generation(args.temperature, args.top_p, args.top_k, args.min_p, args.repeat_penalty, args.max_tokens)
        chat.set_generation(controls)
    except p.SettingsError as exc:
        print(f"specee chat: {exc}", file=sys.stderr)
        return 2
    client: EngineClient
    if args.last_engine and not args.endpoint:
        _last_engine(args)
    if args.endpoint:
        remote = _remote_engine(args.endpoint, args.model)
        if remote is None:
            return 2
        client, load = remote
    else:
        model = resolve_model(args.model)
        placement = p.Placement(n_ctx=args.ctx, n_threads=args.threads)
        client = worker = WorkerClient()

        def load() -> p.Loaded:
            return worker.load(model, placement, mode=args.mode)

    with client:

        def answer(gen: p.Generate | None) -> None:
            if gen is None:
                return
            client.send(gen)
            stats, shown, reading = p.Stats(), len(chat.notices), False
            try:
                try:
                    for ev in client.events_of(gen.request_id):
                        kind = chat.on_event(ev)
                        if kind == "progress":
                            done, total = chat.messages[-1]["reading"]
                            print(f"\r[reading the prompt: {done:,} of {total:,} tokens]", end="", file=sys.stderr, flush=True)
                            reading = True
                        elif kind == "token":
                            if reading:  # the progress line goes: the answer starts on a clean line
                                print("\r\033[K", end="", file=sys.stderr, flush=True)
                                reading = False
                            print(ev.text, end="", flush=True)  # type: ignore[attr-defined]  # a Token: on_event said so
                        elif kind == "stats":
                            stats = ev  # type: ignore[assignment]  # a Stats: on_event said so
                        elif kind == "notice":
                            print(f"\n[{chat.notices[-1]}]", file=sys.stderr)
                except KeyboardInterrupt:
                    cancel = chat.cancel()
                    if cancel:
                        client.send(cancel)
                    for ev in iter(lambda: client.next_event(30), None):
                        chat.on_event(ev)
                        if isinstance(ev, p.Done | p.Error):
                            break
            except EngineError as exc:
                chat.fail(exc.kind, str(exc))
                print(f"\n[{chat.notices[-1].replace('**', '')}]", file=sys.stderr)
                if chat.restored_question:
                    print("[your question was not answered; send it again]", file=sys.stderr)
                if exc.kind == "worker_died":
                    client.start()
                    chat.on_event(load())
                return
            for note in chat.notices[shown:]:
                print(f" {note}" if note.startswith("[") else f"\n[{note}]", file=sys.stderr)
            extra = accel_summary(stats.mode, stats.accel)
            print(
                f"\n[{stats.decode_tok_s:.1f} tok/s, first token {stats.ttft_ms:.0f} ms{', ' + extra if extra else ''}]",
                file=sys.stderr,
            )
            if chat.can_continue:
                print("[/continue writes more of this answer]", file=sys.stderr)

        loaded = load()
        chat.on_event(loaded)
        what = loaded.model_path if args.endpoint else f"{loaded.n_layer} layers, ctx {loaded.n_ctx}, {loaded.mode}"
        print(f"{loaded.name} ({what}) - Ctrl+C stops an answer, Ctrl+D or /quit quits, /help lists commands.", file=sys.stderr)
        if loaded.mode_reason:
            print(f"[{loaded.mode_reason}]", file=sys.stderr)
        if loaded.chat_format_note:
            print(f"[{loaded.chat_format_note}]", file=sys.stderr)
        interrupted = False  # the last prompt was left with Ctrl+C: a second one quits
        while True:
            try:
                text = input("\n> ")
            except EOFError:
                print(file=sys.stderr)
                return 0
            except KeyboardInterrupt:
                if interrupted:
                    print(file=sys.stderr)
                    return 0
                interrupted = True
                print("\n[Ctrl+C again or Ctrl+D to quit]", file=sys.stderr)
                continue
            interrupted = False
            if not text.strip():
                continue
            command = text.strip().lower()
            word, _, rest = text.strip().partition(" ")
            if word.lower() == "/set":
                print(f"[{_chat_set(chat, rest)}]", file=sys.stderr)
                continue
            if word.lower() == "/attach":
                print(f"[{_chat_attach(chat, client, rest)}]", file=sys.stderr)
                continue
            if command in CHAT_COMMANDS:
                if command in ("/quit", "/exit"):
                    return 0
                if command in ("/new", "/clear"):
                    kept = chat.generation
                    chat.new()
                    chat.set_generation(kept)  # this terminal's controls hold for every chat in it
                    chat.system_prompt = system
                    print("[new conversation]", file=sys.stderr)
                elif command == "/continue":
                    gen = chat.continue_answer()
                    if gen is None:
                        print("[no answer to continue]", file=sys.stderr)
                    answer(gen)
                else:
                    print(CHAT_HELP, file=sys.stderr)
                continue
            if chat.attachment_problem:
                print(f"[{chat.attachment_problem}]", file=sys.stderr)
                continue
            answer(chat.send(text))


def _chat_set(chat: ChatSession, spec: str) -> str:
    """`/set NAME VALUE` in the terminal chat: the chat's generation controls, by its rules."""
    from dataclasses import asdict, replace

    gen = chat.generation
    name, _, value = spec.strip().partition(" ")
    if not name:
        return ", ".join(f"{k} {v}" for k, v in asdict(gen).items() if k != "n_ctx")
    if name not in asdict(gen) or name == "n_ctx":
        return f"no control {name!r}; /set alone lists them"
    try:
        new = replace(gen, **{name: (int if name in ("top_k", "max_tokens") else float)(value)})  # type: ignore[arg-type]  # the named control's type
        chat.set_generation(new)
    except ValueError as exc:  # SettingsError too: the limits in words
        return str(exc) if isinstance(exc, p.SettingsError) else f"{name} needs a number, got {value!r}"
    return f"{name} {getattr(new, name)}"


def _chat_attach(chat: ChatSession, client: EngineClient, path: str) -> str:
    """`/attach FILE`: read it, ask the engine whether it fits, keep it for the next message."""
    from engine.chats.attachments import AttachmentError, read_attachment

    try:
        chat.attach(read_attachment(Path(path.strip().strip("'\"")).expanduser()))
    except AttachmentError as exc:
        return str(exc)
    ask = chat.count_request("")
    if ask is not None:
        client.send(ask)
        chat.on_event(client.wait_for(p.TokenCount, timeout=60))
    if chat.attachment_problem:
        problem = chat.attachment_problem
        chat.detach(len(chat.attachments) - 1)
        return problem
    return f"attached {chat.attachments[-1].label}; it goes with your next message"


def _remote_engine(name: str, model: str | None) -> tuple[RemoteClient, Callable[[], p.Loaded]] | None:
    """`specee chat --endpoint NAME`: the remote client and its load(), or None (said why)."""
    from engine.remote.endpoints import EndpointError
    from engine.remote.engine_choice import remote_client

    try:
        client = remote_client(name)  # as the window builds it: the endpoint saved, its key from the keyring
    except EndpointError as exc:
        print(f"specee chat: {exc}", file=sys.stderr)
        return None
    return client, lambda: client.load(model or "")


def _last_engine(args: argparse.Namespace) -> None:
    """`specee chat --last-engine`: the engine the app used last, by the rule the window restores it
    with at start (engine/remote/engine_choice.py): an endpoint's model when it still lists it (into
    args.endpoint and args.model), else the local model, saying why."""
    from engine.remote.engine_choice import restore_now
    from engine.settings import load_settings

    target, why = restore_now(load_settings().engine)
    if target is not None:
        args.endpoint, args.model = target
    elif why is not None:
        print(f"[specee] {why[0]}: chatting with the local model.", file=sys.stderr)
        if why[1]:
            print(f"[specee] {why[1]}", file=sys.stderr)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`specee chat` and its flags."""
    chat = sub.add_parser("chat", help="chat in the terminal")
    chat.add_argument("--model", help="GGUF path or registered model id (default: the embedded default model); "
                      "with --endpoint, the server's model id (default: the endpoint's)")  # fmt: skip
    chat.add_argument("--endpoint", help="chat with this remote OpenAI-compatible server (see `specee endpoints`)")
    chat.add_argument("--last-engine", action="store_true", help="chat with the engine the app used last (a remote "
                      "endpoint's model while it still lists it, else the local model: --model)")  # fmt: skip
    chat.add_argument("--system", default="", help="system prompt")
    chat.add_argument("--preset", choices=list(SYSTEM_PRESETS), help="a system prompt preset (--system wins)")
    chat.add_argument("--temperature", type=float, default=0.7)
    chat.add_argument("--top-p", type=float, default=0.95)
    chat.add_argument("--top-k", type=int, default=40)
    chat.add_argument("--min-p", type=float, default=0.05)
    chat.add_argument("--repeat-penalty", type=float, default=1.1)
    chat.add_argument("--max-tokens", type=int, default=0, help="the answer's length limit (0: the context's room)")
    chat.add_argument("--seed", type=int, default=-1)
    chat.add_argument("--ctx", type=int, default=4096)
    chat.add_argument("--threads", type=int, default=0)
    chat.add_argument("--mode", default="auto", choices=list(p.MODES), help="acceleration mode")
    chat.set_defaults(func=cmd_chat)
