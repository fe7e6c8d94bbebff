"""An imported EAGLE-3 head measured in the real engine: eagle against vanilla on development prompts
(`specee models import-head` runs it after the import, engine.models.head_import). `auto` considers an
imported head only once the manifest holds this measurement (AccelerationPack.eagle_measured)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from engine.atomic import write_text_atomic
from engine.bench.runner import run_bench
from engine.client import WorkerError
from engine.models.acceleration import find_pack
from engine.models.head_import import HeadImportError, uninstall_head
from engine.prompts import DEV_PROMPTS, load_prompts

MEASURE_PROMPTS = 8
MEASURE_TOKENS = 64


def _quiet(_msg: str) -> None:
    pass


def measure_pack(
    model: Path, n_prompts: int = MEASURE_PROMPTS, max_tokens: int = MEASURE_TOKENS, progress: Callable[[str], None] = _quiet
) -> dict:
    """Run eagle against vanilla on development prompts with the real engine and record the result in
    the manifest (`eagle.measured`), which lets `auto` consider the head. A head the engine refuses
    is uninstalled: the error says why."""
    pack = find_pack(model)
    if pack is None or pack.eagle_head is None:
        raise HeadImportError("does_not_load", f"{model.name} has no EAGLE head to measure.")
    prompts = load_prompts(DEV_PROMPTS)
    prompts = prompts[:: max(1, len(prompts) // max(n_prompts, 1))][:n_prompts]  # spread over the categories
    progress(f"measuring eagle against vanilla on {len(prompts)} development prompts, {max_tokens} tokens each")
    try:
        report = run_bench(str(model), prompts, ["vanilla", "eagle"], max_tokens=max_tokens, warmup=1, layout="auto")
    except WorkerError as exc:
        uninstall_head(pack)
        raise HeadImportError("does_not_load", f"the engine could not use the imported head, so it was removed: {exc}") from None
    eagle = next(m for m in report["modes"] if m["mode"] == "eagle")
    vanilla = next(m for m in report["modes"] if m["mode"] == "vanilla")
    samples = report["samples"]["eagle"]
    drafted = sum(int(s["accel"].get("drafted", 0)) for s in samples)
    accepted = sum(int(s["accel"].get("accepted", 0)) for s in samples)
    measured = {
        "prompts": len(prompts),
        "max_tokens": max_tokens,
        "acceptance_length_median": eagle.get("acceptance_length_median", 0.0),
        "accept_rate": round(accepted / max(drafted, 1), 4),
        "drafted": drafted,
        "accepted": accepted,
        "decode_tok_s_median": eagle["decode_tok_s_median"],
        "vanilla_decode_tok_s_median": vanilla["decode_tok_s_median"],
        "speedup_vs_vanilla_median": eagle.get("decode_speedup_vs_vanilla_median", 0.0),
        "identical_to_vanilla": eagle.get("identical_to_vanilla", ""),
        # lossless: 0 and 0 (on a GPU an answer may still differ where vanilla's top two logits tie)
        "non_tie_divergences": eagle.get("non_tie_divergences", 0),
        "early_endings": eagle.get("early_endings", 0),
        "placement": eagle["placement"],
        "build_key": eagle["build_key"],
        "measured": report["time"],
    }
    manifest = dict(pack.manifest)
    manifest["eagle"] = {**manifest["eagle"], "measured": measured}
    write_text_atomic(pack.folder / "manifest.json", json.dumps(manifest, indent=1))
    return manifest
