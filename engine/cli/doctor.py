"""`specee doctor`: hardware, native build and model status, and the placement plan."""

from __future__ import annotations

import argparse
import json
import sys

from engine import __version__
from engine.cli.resolve import resolve_model
from engine.models.registry import ModelRegistry


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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`specee doctor` and its flags."""
    doctor = sub.add_parser("doctor", help="print hardware, native build and model status")
    doctor.add_argument("--json", action="store_true")
    doctor.add_argument("--plan", nargs="?", const=True, default=None, metavar="MODEL",
                        help="print the placement plan for MODEL (default: the default model) on this machine")  # fmt: skip
    doctor.add_argument("--profile", help="also plan for hardware profiles whose name contains this ('all': every profile, "
                        "plus 1B/3B/7B/8B model classes)")  # fmt: skip
    doctor.add_argument("--ctx", type=int, default=4096, help="context length to plan for")
    doctor.set_defaults(func=cmd_doctor)
