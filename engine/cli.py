"""`specee`: the command-line tool (terminal chat, bench, models, doctor)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine import __version__
from engine import protocol as p
from engine.chats.generation import SYSTEM_PRESETS
from engine.models.default_model import DefaultModelError, ensure_default_model
from engine.models.gguf_file import ModelFileError, inspect_gguf
from engine.models.library import file_problem, import_gguf
from engine.models.registry import ModelRegistry
from engine.stats_text import accel_summary

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.chats.session import ChatSession
    from engine.client import EngineClient
    from engine.remote.client import RemoteClient
    from engine.remote.endpoints import Endpoint


def resolve_model(spec: str | None) -> Path:
    """A path, a registered model id, or (None) the default model, installed on first use."""
    if not spec:
        return ensure_default_model(lambda msg: print(f"[specee] {msg}", file=sys.stderr))
    return ModelRegistry().path_for(spec)


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
        gen = Generation(args.temperature, args.top_p, args.top_k, args.min_p, args.repeat_penalty, args.max_tokens)
        chat.set_generation(gen)
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
                            print(ev.text, end="", flush=True)  # type: ignore[union-attr]
                        elif kind == "stats":
                            stats = ev  # type: ignore[assignment]
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
        new = replace(gen, **{name: (int if name in ("top_k", "max_tokens") else float)(value)})
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


def _peer_server(args: argparse.Namespace, modes: list[str]) -> str | None:
    """llama-server for peer modes: --peer-server, else the one `native/build.py --server` builds (once)."""
    if not any(m == "peer" or m.startswith("peer:") for m in modes):
        return None
    if args.peer_server:
        return args.peer_server
    import subprocess

    build = Path(__file__).resolve().parent.parent / "native" / "build.py"
    out = subprocess.run([sys.executable, str(build), "--server"], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise SystemExit("could not build llama-server for the peer modes (see the message above)")
    return out.stdout.strip().splitlines()[-1]


def cmd_models(args: argparse.Namespace) -> int:
    registry = ModelRegistry()
    if args.action in ("add", "remove") and not args.path:
        print(f"specee models {args.action}: give a {'GGUF path' if args.action == 'add' else 'model id'}", file=sys.stderr)
        return 2
    if args.action == "default":
        print(resolve_model(None))
        return 0
    if args.action == "fetch":
        return _fetch_reference(args.path)
    if args.action == "import-head":
        return _import_head(args)
    if args.action == "add":  # the app's Import GGUF… too: the switcher lists it when next opened
        record = import_gguf(args.path, registry)
        info = inspect_gguf(record.path)
        print(f"added {record.id}: {info.name}, {info.architecture}, {info.n_layer} layers")
        return 0
    if args.action == "remove":
        known = [m.id for m in registry.all()]
        if args.path not in known:
            listed = ", ".join(known) or "none yet"
            print(f"specee models remove: no model with id '{args.path}' (registered: {listed})", file=sys.stderr)
            return 1
        registry.remove(args.path)
        print(f"removed {args.path} from the list (the file itself is left where it is)")
        return 0
    records = registry.all()
    if not records:
        print("no models yet; `specee models default` installs the default model")
    for m in records:
        problem = file_problem(m)  # damaged or gone: said, as in the app's My models
        print(f"{m.id:<40} {m.size / 1e6:>8.1f} MB  {'ok' if not problem else 'DAMAGED':<8} {m.path}")
        if problem:
            print(f"{'':<40} {problem}")
    return 0


def _import_head(args: argparse.Namespace) -> int:
    """`specee models import-head MODEL [REPO]`: a published EAGLE-3 head, converted, bound and measured."""
    from engine.bench.head_measure import measure_pack
    from engine.models.catalog import heads_for
    from engine.models.head_import import HeadImportError, import_head

    def progress(msg: str) -> None:
        print(f"[import-head] {msg}", file=sys.stderr)

    if not args.path:
        print("specee models import-head: give a model (GGUF path or id) and the head's Hugging Face repo", file=sys.stderr)
        return 2
    model = resolve_model(args.path)
    repo = args.repo
    if not repo:
        known = heads_for(inspect_gguf(model).name, model.name)
        if not known:
            print(f"specee models import-head: the catalog knows no head for {model.name}; give the head's Hugging Face repo",
                  file=sys.stderr)  # fmt: skip
            return 2
        repo = known[0].head
        print(f"[import-head] the catalog's head for {model.name}: {repo} (trained on {known[0].model})", file=sys.stderr)
    try:
        manifest = import_head(model, repo, args.revision, force=args.force, progress=progress)
        if not args.no_measure:
            manifest = measure_pack(model, args.measure_prompts, args.max_tokens, progress)
    except HeadImportError as exc:
        print(f"specee models import-head: {exc}", file=sys.stderr)
        return 1
    eagle = manifest["eagle"]
    m = eagle.get("measured")
    print(f"{repo} -> {eagle['file']} for {model.name} ({eagle['source']['layout']})")
    if m:
        print(f"measured on {m['prompts']} development prompts: acceptance length {m['acceptance_length_median']:.2f} tok/step, "
              f"{m['accept_rate']:.0%} of drafts accepted, {m['speedup_vs_vanilla_median']:.2f}x vanilla, "
              f"identical to vanilla {m['identical_to_vanilla']}")  # fmt: skip
    else:
        print("not measured: auto will not use it until `specee models import-head` runs again without --no-measure")
    return 0


def _fetch_reference(model_id: str | None) -> int:
    from tqdm import tqdm

    from engine.models.reference import REFERENCE_MODELS, ReferenceModelError, fetch_reference_model

    if model_id not in REFERENCE_MODELS:
        print(f"specee models fetch: give one of {', '.join(REFERENCE_MODELS)}", file=sys.stderr)
        return 2
    bars: dict[str, tqdm] = {}

    def progress(what: str, done: int, total: int) -> None:
        bar = bars.get(what) or bars.setdefault(what, tqdm(total=total, desc=what, unit="part", file=sys.stderr))
        bar.update(done - bar.n)

    try:
        path = fetch_reference_model(model_id, progress)
    except ReferenceModelError as exc:
        print(f"specee models fetch: {exc}", file=sys.stderr)
        return 1
    finally:
        for bar in bars.values():
            bar.close()
    print(path)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """`specee doctor --plan [MODEL]`: the placement plan here and, with --profile, elsewhere."""
    from engine.models.acceleration import find_pack
    from engine.placement.machine import this_machine
    from engine.placement.model_facts import MODEL_CLASSES, facts_from_gguf
    from engine.placement.planner import exits_from_manifest, load_profiles, plan

    model_path = resolve_model(args.plan if isinstance(args.plan, str) else None)
    facts = facts_from_gguf(model_path)
    pack = find_pack(model_path)
    exits = exits_from_manifest(pack.manifest, facts.n_layer) if pack else None
    profiles = [this_machine(measure=True)]
    if args.profile:
        profiles += [pr for pr in load_profiles() if args.profile == "all" or args.profile.lower() in pr.name.lower()]
    models = [(facts, exits)]
    if args.profile == "all":
        # larger classes: same exit distribution shape (by depth fraction) as the shipped one
        for make in MODEL_CLASSES.values():
            m = make()
            ex = None
            if exits:
                scaled = [0.0] * m.n_layer
                for layer, pr in enumerate(exits.p):
                    scaled[min(m.n_layer - 1, round((layer + 1) / facts.n_layer * m.n_layer) - 1)] += pr
                ex = type(exits)(scaled, int(m.layer_bytes[0] * 1.5))
            models.append((m, ex))
    from engine.placement.machine import measure_memory

    here = measure_memory(model_path, args.ctx)
    if not args.json:
        h = here["host"]
        print(f"measured here by llama.cpp's dry run at {args.ctx} tokens: model {h['model'] / 1e6:.0f} MB, "
              f"KV cache {h['context'] / 1e6:.0f} MB, compute buffers {h['compute'] / 1e6:.0f} MB (host)")  # fmt: skip
    out = []
    for hw in profiles:
        for m, ex in models:
            pl = plan(m, hw, ex, args.ctx)
            out.append(pl.as_dict())
            if not args.json:
                print(f"{hw.name} · {m.name}:\n  {pl.explanation}")
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


def _backend_state(b: dict) -> str:
    if not b["loaded"]:
        return "shipped, not loaded"
    return f"{b['devices']} device{'s' if b['devices'] != 1 else ''}"


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.plan:
        return cmd_plan(args)
    from engine import hardware
    from engine.models.default_model import DEFAULT_MODEL, default_model_path

    report: dict = {"specee_chat": __version__, "python": sys.version.split()[0]}
    report["hardware"] = hardware.detect().as_dict()
    try:
        from engine.native import build_info

        report["native"] = build_info()
        from engine.placement.machine import backend_report

        report["gpu"] = backend_report()
    except Exception as exc:
        report["native"] = {"error": str(exc)}
    path = default_model_path()
    report["default_model"] = {"path": str(path), "installed": path.is_file() and path.stat().st_size == DEFAULT_MODEL.size}
    report["models"] = [{"id": m.id, "path": m.path, "present": m.exists} for m in ModelRegistry().all()]
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    hw, nat = report["hardware"], report["native"]
    print(f"SpecEE Chat {__version__} (Python {report['python']})")
    print(f"CPU      {hw['cpu_model']} - {hw['physical_cores']} cores / {hw['logical_cores']} threads")
    print(f"ISA      {' '.join(hw['isa']) or '-'}")
    power = {True: "on battery", False: "on mains power", None: "no battery"}[hw["on_battery"]]
    print(f"RAM      {hw['ram_available_gb']} GB free of {hw['ram_total_gb']} GB; power: {power}")
    if "error" in nat:
        print(f"native   NOT AVAILABLE: {nat['error']}")
    else:
        patched = "patched" if nat.get("patched") else "UPSTREAM (unpatched)"
        print(f"native   llama-cpp-python {nat['llama_cpp_python']}, {patched}, build {nat.get('build_key', '-')}")
        print(f"         patches: {nat.get('patches', '-')}; features: {', '.join(nat.get('features', [])) or '-'}")
        print(f"         {nat.get('system_info', '')}")
        gpu = report["gpu"]
        shipped = ", ".join(f"{b['name']} ({_backend_state(b)})" for b in gpu["backends"])
        print(f"backends {shipped}")
        for d in gpu["devices"]:
            print(f"device   {d['backend']}: {d['description'] or d['name']} ({d['type']}, "
                  f"{d['memory_free'] / 1e9:.1f} of {d['memory_total'] / 1e9:.1f} GB free)")  # fmt: skip
        if gpu["gpu"]:
            print(f"GPU      models go on {gpu['gpu']['description'] or gpu['gpu']['name']} ({gpu['gpu']['backend']}); "
                  "`specee doctor --plan` shows how many layers")  # fmt: skip
        for why in gpu["why_no_gpu"]:
            print(f"GPU      not used: {why}")
    dm = report["default_model"]
    print(f"default  {'installed' if dm['installed'] else 'not installed yet (installed on first run)'}: {dm['path']}")
    for m in report["models"]:
        print(f"model    {m['id']}: {'ok' if m['present'] else 'MISSING'} {m['path']}")
    return 0


def _trainer(module: str, name: str):  # type: ignore[no-untyped-def]
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


def cmd_serve(args: argparse.Namespace) -> int:
    """`specee serve`: the OpenAI-compatible HTTP server (engine/serve/)."""
    import os

    from engine.serve.security import allowed_origin, bind_problem
    from engine.serve.server import default_parallel, parallel_problem, serve

    api_key = args.api_key or os.environ.get("SPECEE_API_KEY") or None
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specee", description="SpecEE Chat command-line tool")
    parser.add_argument("--version", action="version", version=f"specee-chat {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

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

    endpoints = sub.add_parser("endpoints", help="remote OpenAI-compatible servers to chat with (specee chat --endpoint)")
    endpoints.add_argument("action", nargs="?", default="list", choices=["list", "add", "remove"])
    endpoints.add_argument("name", nargs="?", help="the endpoint's name (add, remove)")
    endpoints.add_argument("url", nargs="?", help="add: the server's address, e.g. http://127.0.0.1:8080 or https://host/v1")
    endpoints.add_argument("--api-key-stdin", action="store_true", help="add: read the API key from standard input's "
                           "first line (kept in the OS keyring, never on the command line or in a file)")  # fmt: skip
    endpoints.add_argument("--model", help="add: the model id to chat with (default: the first the server lists)")
    endpoints.set_defaults(func=cmd_endpoints)

    bench = sub.add_parser("bench", help="measure decode/prefill speed per acceleration mode")
    bench.add_argument("--model", help="GGUF path or registered model id (default: the default model)")
    bench.add_argument(
        "--modes",
        default="vanilla",
        help="comma-separated: vanilla, eagle, eagle:N, specee, specee:check, specee:nofill, specee:noexit, ngram, "
        "ngram:<llama.cpp n-gram type>, draft, draft:N, auto, upstream, peer (upstream llama-server), "
        "peer:<llama.cpp drafter>, peer:draft, peer:eagle3",
    )
    bench.add_argument("--prompts", default=str(Path(__file__).resolve().parent.parent / "resources/prompts/dev.jsonl"))
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
    bench.add_argument("--hog", action="store_true", help="run again beside a busy-loop process: slowdown per mode")
    bench.add_argument("--json", help="write the full report here")
    bench.set_defaults(func=cmd_bench)

    models = sub.add_parser("models", help="list, add or remove local models; fetch the reference models; import EAGLE heads")
    models.add_argument("action", nargs="?", default="list", choices=["list", "add", "remove", "default", "fetch", "import-head"])
    models.add_argument("path", nargs="?", help="GGUF path (add), model id (remove), reference model (fetch), model")
    models.add_argument("repo", nargs="?", help="import-head: the head's Hugging Face repo (default: the catalog's)")
    models.add_argument("--revision", help="import-head: branch, tag or commit of the head's repo (default: main)")
    models.add_argument("--force", action="store_true", help="import-head: replace the model's existing EAGLE head")
    models.add_argument("--no-measure", action="store_true", help="import-head: skip measuring (auto then ignores the head)")
    models.add_argument("--measure-prompts", type=int, default=8, help="import-head: development prompts to measure on")
    models.add_argument("--max-tokens", type=int, default=64, help="import-head: tokens per prompt when measuring")
    models.set_defaults(func=cmd_models)

    train = sub.add_parser("train", help="train acceleration weights for a model (needs the `train` extra)")
    train_sub = train.add_subparsers(dest="what", required=True)
    eagle = train_sub.add_parser("eagle", help="teacher data + EAGLE-3 head training + GGUF export + evaluation")
    eagle.add_argument("--model", help="target GGUF (default: the default model)")
    eagle.add_argument("--out", required=True, help="head GGUF to write; manifest.json is written beside it")
    eagle.add_argument("--prompts", default=str(Path(__file__).resolve().parent.parent / "resources/prompts/train.jsonl"))
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
    exits.add_argument("--prompts", default=str(Path(__file__).resolve().parent.parent / "resources/prompts/train.jsonl"))
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

    doctor = sub.add_parser("doctor", help="print hardware, native build and model status")
    doctor.add_argument("--json", action="store_true")
    doctor.add_argument("--plan", nargs="?", const=True, default=None, metavar="MODEL",
                        help="print the placement plan for MODEL (default: the default model) on this machine")  # fmt: skip
    doctor.add_argument("--profile", help="also plan for hardware profiles whose name contains this ('all': every profile, "
                        "plus 1B/3B/7B/8B model classes)")  # fmt: skip
    doctor.add_argument("--ctx", type=int, default=4096, help="context length to plan for")
    doctor.set_defaults(func=cmd_doctor)
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


if __name__ == "__main__":
    sys.exit(main())
