"""What `specee bench` measured, per mode: each answer (Sample) and the mode's summary (medians,
ratios to vanilla with their intervals, per category, fidelity and SpecEE's exit figures)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from engine import protocol as p
from engine.bench.fidelity import TIE_GAP, ended_early, first_divergence
from engine.sequences import common_prefix


@dataclass
class Sample:
    prompt_id: str
    n_prompt: int
    n_generated: int
    ttft_ms: float
    prefill_tok_s: float
    decode_tok_s: float
    finish: str
    tokens: list[int] = field(default_factory=list)
    accel: dict[str, Any] = field(default_factory=dict)
    margins: list[float] = field(default_factory=list)  # vanilla: top-2 logit gap per token (fidelity pass)


@dataclass
class ModeReport:
    mode: str
    native: dict
    samples: list[Sample] = field(default_factory=list)
    head_eval: dict = field(default_factory=dict)  # the shipped head's offline hit rates (manifest)
    loaded: p.Loaded = field(default_factory=p.Loaded)
    unrepeatable: list[str] = field(default_factory=list)  # vanilla: prompts whose re-run differed
    # with repeat >= 2: each prompt's decode tok/s of its 2nd run over its 1st (the mode against itself:
    # what this machine's run-to-run noise alone makes of a ratio)
    self_ratios: dict[str, float] = field(default_factory=dict)
    failed: str = ""  # why the mode stopped answering (a crashed peer server, a dead worker)

    def summary(self, reference: ModeReport | None, categories: dict[str, str] | None = None) -> dict:
        """categories: each prompt's task category (prompt id -> name), for the ratios per category."""
        decode = [s.decode_tok_s for s in self.samples if s.decode_tok_s > 0]
        pl = self.loaded.placement
        out = {
            "mode": self.mode,
            "build_key": self.native.get("build_key", "upstream"),
            "placement": f"{pl.n_gpu_layers} GPU layers ({pl.layout}), {self.loaded.n_threads} threads",
            # where the layers ran: exit precision is measured per backend (predictors are trained on CPU numerics)
            "backend": "cpu" if pl.n_gpu_layers == 0 else "gpu" if not 0 <= pl.n_gpu_layers < self.loaded.n_layer else "split",
            "plan": self.loaded.plan,
            "planner_predicted_tok_s": self.loaded.predicted_tok_s.get(self.mode.partition(":")[0], 0.0),
            "prompts": len(self.samples),
            "tokens_generated": sum(s.n_generated for s in self.samples),
            "decode_tok_s_median": _median(decode),
            "prefill_tok_s_median": _median([s.prefill_tok_s for s in self.samples]),
            "ttft_ms_median": _median([s.ttft_ms for s in self.samples]),
        }
        for key in ("acceptance_length", "accept_rate", "draft_ms_per_step", "verify_ms_per_step", "feed_ms_per_step",
                    "verify_ms_per_verify_step"):  # fmt: skip
            values = [s.accel[key] for s in self.samples if key in s.accel]
            if values:
                out[f"{key}_median"] = _median(values)
        if learnt := [s.accel["copy_acceptance"] for s in self.samples if "copy_acceptance" in s.accel]:
            out["copy_acceptance_at_end"] = learnt[-1]  # per match length, after the whole run
        if gates := [s.accel["eagle_gate"] for s in self.samples if "eagle_gate" in s.accel]:
            out["eagle_gate_at_end"] = gates[-1]  # the gated eagle's calibration and costs after the run
        if self.unrepeatable:
            out["vanilla_unrepeatable"] = self.unrepeatable
        if self.self_ratios:
            out["self_ratio_median"] = _median(list(self.self_ratios.values()))
            if by_cat := _medians_by_category(self.self_ratios, categories):
                out["self_ratio_by_category"] = by_cat
        if self.failed:
            out["failed"] = self.failed
        if self.mode.startswith(("specee", "combined")):
            out.update(_specee_summary(self.samples))
        if self.head_eval:
            out["head_dev_eval"] = self.head_eval
        if reference is not None:
            ref = {s.prompt_id: s for s in reference.samples}
            ratios = {s.prompt_id: s.decode_tok_s / ref[s.prompt_id].decode_tok_s for s in self.samples
                      if s.prompt_id in ref and s.decode_tok_s > 0 and ref[s.prompt_id].decode_tok_s > 0}  # fmt: skip
            same = [s.tokens == ref[s.prompt_id].tokens for s in self.samples if s.prompt_id in ref]
            mismatched = [s.prompt_id for s in self.samples if s.prompt_id in ref and s.tokens != ref[s.prompt_id].tokens]
            out["decode_speedup_vs_vanilla_median"] = _median(list(ratios.values()))
            out["decode_speedup_vs_vanilla_interval"] = median_interval(list(ratios.values()))
            if by_cat := _medians_by_category(ratios, categories):  # medians of per-prompt ratios, as the overall figure
                out["speedup_by_category"] = by_cat
                out["speedup_interval_by_category"] = _intervals_by_category(ratios, categories)
            out["identical_to_vanilla"] = f"{sum(same)}/{len(same)}"
            out["mismatched_prompts"] = mismatched
            pairs = [(s.tokens, ref[s.prompt_id].tokens) for s in self.samples if s.prompt_id in ref]
            prefixes = [common_prefix(a, b) for a, b in pairs]
            out["common_prefix_tokens_mean"] = round(statistics.mean(prefixes), 1) if prefixes else 0.0
            n_pos = sum(max(len(a), len(b)) for a, b in pairs)
            out["token_agreement"] = round(sum(x == y for a, b in pairs for x, y in zip(a, b, strict=False)) / max(n_pos, 1), 4)
            out.update(_fidelity_summary(self.samples, ref))
        return out


def _by_category(per_prompt: dict[str, float], categories: dict[str, str] | None) -> dict[str, list[float]]:
    """Per-prompt values grouped by task category (prompts without one left out)."""
    by_cat: dict[str, list[float]] = {}
    for pid, value in per_prompt.items():
        if cat := (categories or {}).get(pid, ""):
            by_cat.setdefault(cat, []).append(value)
    return by_cat


def _medians_by_category(per_prompt: dict[str, float], categories: dict[str, str] | None) -> dict[str, float]:
    return {cat: _median(v) for cat, v in _by_category(per_prompt, categories).items()}


# How sure a ratio is: a distribution-free 90% interval of the median per-prompt ratio, from order
# statistics (the sign test's), so it assumes nothing about how a machine's noise is shaped. Fewer
# than 5 prompts cannot give one: a category of 3 prompts spreads several percent here and its
# [min, max] covers the median only 75% of the time. A category is slower or faster only when its
# whole interval is.
INTERVAL_LEVEL = 0.90


def median_interval(values: list[float]) -> list[float]:
    """[low, high] holding the median with probability >= INTERVAL_LEVEL ([] for too few values)."""
    x, n = sorted(values), len(values)
    below = 0.0  # P(Binomial(n, 1/2) < k): the chance that the median lies under the k-th smallest value
    k = 0
    while k < n // 2:
        below += math.comb(n, k) / 2**n
        if below > (1 - INTERVAL_LEVEL) / 2:
            break
        k += 1
    return [round(x[k - 1], 4), round(x[n - k], 4)] if k else []


def _intervals_by_category(per_prompt: dict[str, float], categories: dict[str, str] | None) -> dict[str, list[float]]:
    return {cat: median_interval(v) for cat, v in _by_category(per_prompt, categories).items()}


def _fidelity_summary(samples: list[Sample], ref: dict[str, Sample]) -> dict:
    """Early endings and, at each prompt's first divergence, vanilla's top-2 logit gap there."""
    early: list[str] = []
    ties: list[dict[str, Any]] = []
    real: list[dict[str, Any]] = []
    for s in samples:
        v = ref.get(s.prompt_id)
        if v is None:
            continue
        if ended_early(s.tokens, s.finish, v.tokens):
            early.append(s.prompt_id)
        d = first_divergence(s.tokens, v.tokens, v.margins)
        if d is not None:
            (ties if d.is_tie else real).append({"prompt": s.prompt_id, "position": d.position, "gap": round(d.gap, 4)})
    return {
        "early_endings": len(early),
        "early_ending_prompts": early,
        "tie_divergences": len(ties),
        "non_tie_divergences": len(real),  # gap >= TIE_GAP (or unknown): 0 for a lossless mode
        "non_tie_divergence_detail": real,
        "tie_gap": TIE_GAP,
    }


def _specee_summary(samples: list[Sample]) -> dict:
    """Totals over all prompts, weighted by steps (a per-prompt median would hide short answers)."""
    acc = [s.accel for s in samples if s.accel.get("steps")]
    steps = sum(a["steps"] for a in acc)
    if not steps:
        return {}

    def total(key: str) -> float:
        return sum(a.get(key, 0.0) * a["steps"] for a in acc)

    n_layer = acc[0]["n_layer"]
    hist = [sum(a["exit_hist"][i] for a in acc) for i in range(n_layer + 1)]
    out = {
        "specee_steps": steps,
        "exit_rate": round(total("exit_rate") / steps, 4),
        "mean_layers": round(total("mean_layers") / steps, 2),
        "n_layer": n_layer,
        "cand_hit_rate": round(total("cand_hit_rate") / steps, 4),
        "vocab_head_steps": round(total("vocab_head_rate")),
        "target_ms_per_step": round(total("target_ms_per_step") / steps, 3),
        "draft_ms_per_step": round(total("draft_ms_per_step") / steps, 3),
        "exit_hist": hist,
        "confirmed_endings": sum(a.get("confirmed_endings", 0) for a in acc),
        "uses_head": all(a.get("uses_head", True) for a in acc),
    }
    shadow_exits = sum(a.get("shadow_exits", 0) for a in acc)
    if shadow_exits:
        correct = sum(a.get("exit_precision", 0.0) * a.get("shadow_exits", 0) for a in acc)
        out["exit_precision"] = round(correct / shadow_exits, 4)
        out["exit_precision_checked_exits"] = shadow_exits
    return out


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else 0.0
