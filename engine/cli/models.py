"""`specee models`: the local models (list, add, remove, default), reference models, EAGLE heads."""

from __future__ import annotations

import argparse
import sys

from engine.cli.resolve import resolve_model
from engine.models.gguf_file import inspect_gguf
from engine.models.library import file_problem, import_gguf
from engine.models.registry import ModelRegistry


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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`specee models` and its flags."""
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
