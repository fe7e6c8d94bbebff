"""`specee bench`'s report: the table and notes it prints, and the JSON file it writes."""

from __future__ import annotations

import json
from pathlib import Path

from engine.bench.summary import INTERVAL_LEVEL


def print_report(report: dict) -> None:
    print(f"model: {report['model']}  prompts: {report['prompts']}  max_tokens: {report['max_tokens']}")
    placements = {m["placement"] for m in report["modes"]}
    for m in report["modes"][:1] if len(placements) == 1 else report["modes"]:
        print(f"placement{'' if len(placements) == 1 else ' (' + m['mode'] + ')'}: {m['placement']}; {m['plan']}")
    vanilla = [m for m in report["modes"] if m["mode"] == "vanilla" and m["decode_tok_s_median"]]
    vanilla_ms = 1000 / vanilla[0]["decode_tok_s_median"] if vanilla else 0.0
    floor = report.get("floor")
    if floor:
        print(f"physical floor of one token: {floor['bytes_per_token'] / 1e6:.0f} MB of weights read at"
              f" {floor['bandwidth_gbs']:.1f} GB/s = {floor['ms_per_token']:.2f} ms ({1000 / floor['ms_per_token']:.0f} tok/s);"
              " 'x floor': a mode's ms per token over it")  # fmt: skip
    header = f"{'mode':<12}{'decode tok/s':>14}{'prefill tok/s':>15}{'TTFT ms':>10}{'vs vanilla':>12}{'identical':>11}"
    header += f"{'x floor':>9}" if floor else ""
    print(header)
    print("-" * len(header))
    for m in report["modes"]:
        ratio = m.get("decode_speedup_vs_vanilla_median")
        tok_s = m["decode_tok_s_median"]
        to_floor = f"{1000 / tok_s / floor['ms_per_token']:>8.2f}x" if floor and tok_s else ""
        print(f"{m['mode']:<12}{tok_s:>14.1f}{m['prefill_tok_s_median']:>15.1f}{m['ttft_ms_median']:>10.1f}"
              f"{(f'{ratio:.3f}x' if ratio else '1.000x'):>12}{m.get('identical_to_vanilla', '-'):>11}{to_floor}")  # fmt: skip
        if m.get("failed"):
            print(f"  FAILED, dropped from the run: {m['failed'][:300]}")
        if m.get("speedup_by_category"):
            cats, ivs = m["speedup_by_category"], m.get("speedup_interval_by_category", {})
            print("  vs vanilla by category: " + ", ".join(f"{c} {r:.3f}x" for c, r in cats.items())
                  + f" (lowest {min(cats.values()):.3f}x)")  # fmt: skip
            if ivs:
                overall = _span(m["decode_speedup_vs_vanilla_interval"])
                print(f"  {INTERVAL_LEVEL:.0%} intervals of the median (sign test): overall {overall}; "
                      + ", ".join(f"{c} {_span(iv)}" for c, iv in ivs.items()))  # fmt: skip
                below = [c for c, iv in ivs.items() if iv and iv[1] < 1]
                above = [c for c, iv in ivs.items() if iv and iv[0] > 1]
                print(f"  faster (whole interval above 1): {', '.join(above) or 'none'}; slower: {', '.join(below) or 'none'};"
                      " the rest cannot be told apart from vanilla in this run (under 5 prompts: no interval)")  # fmt: skip
        if m.get("self_ratio_by_category"):
            cats = m["self_ratio_by_category"]
            print(f"  against itself (2nd run / 1st, noise alone): {m['self_ratio_median']:.3f}x; by category: "
                  + ", ".join(f"{c} {r:.3f}x" for c, r in cats.items())
                  + f" (range {min(cats.values()):.3f}-{max(cats.values()):.3f}x)")  # fmt: skip
        if m.get("vanilla_unrepeatable"):
            n = len(m["vanilla_unrepeatable"])
            print(f"  vanilla itself gave another answer on {n} re-run prompts (batch-shape-dependent kernels):"
                  f" {', '.join(m['vanilla_unrepeatable'][:8])}")  # fmt: skip
        if m.get("planner_predicted_tok_s"):
            pred = m["planner_predicted_tok_s"]
            print(f"  planner predicted {pred:.1f} tok/s (measured {m['decode_tok_s_median'] / pred:.2f}x of it)")
        if "verify_ms_per_verify_step_median" in m:  # combined: copy drafts verified, exit steps elsewhere
            verify = m["verify_ms_per_verify_step_median"]
            print(f"  copy drafts: {m['acceptance_length_median']:.2f} tokens per target pass,"
                  f" accept {m['accept_rate_median']:.2f}; a verify step {verify:.1f} ms")  # fmt: skip
        elif "acceptance_length_median" in m:
            feed = f", feed {m['feed_ms_per_step_median']:.1f} ms" if "feed_ms_per_step_median" in m else ""
            print(f"  acceptance length {m['acceptance_length_median']:.2f} tok/step, accept {m['accept_rate_median']:.2f};"
                  f" per step: draft {m['draft_ms_per_step_median']:.1f} ms,"
                  f" verify {m['verify_ms_per_step_median']:.1f} ms{feed}")  # fmt: skip
        if gate := m.get("eagle_gate_at_end"):
            ms = ", ".join(f"{r} row{'s' if r > 1 else ''} {v:.1f}" for r, v in enumerate(gate["verify_ms"], 1) if v)
            print(f"  gate after the run: first drafts confirmed per tenth of the head's p {gate['first']};"
                  f" verify ms: {ms}; head step {gate['step_ms']:.2f} ms, chained draft {gate['draft_ms']:.2f} ms")  # fmt: skip
        if "early_endings" in m:
            n = m["prompts"]
            print(f"  fidelity: {m['early_endings']}/{n} early endings, divergences at ties (vanilla top-2 gap < {m['tie_gap']}):"
                  f" {m['tie_divergences']}, elsewhere: {m['non_tie_divergences']}")  # fmt: skip
            for d in m["non_tie_divergence_detail"][:5]:
                print(f"    prompt {d['prompt']}: token {d['position']}, vanilla's top-2 gap {d['gap']}")
        if "exit_rate" in m:
            _print_specee(m)
            if m["mode"] == "specee:noexit" and vanilla_ms:
                t = m["target_ms_per_step"]
                print(f"  exit graph with exits off: target step {t:.2f} ms vs vanilla {vanilla_ms:.2f} ms per token"
                      f" ({t / vanilla_ms:.3f}x)")  # fmt: skip
        if "token_agreement" in m and m["mode"].startswith(("specee", "combined")):
            agree, prefix = m["token_agreement"], m["common_prefix_tokens_mean"]
            print(f"  agreement with vanilla: {agree:.1%} of tokens, common prefix {prefix:.1f} tokens")
        if m.get("head_dev_eval"):
            ev = m["head_dev_eval"]
            print(f"  head (offline, dev prompts): top-1 {ev.get('top1', 0):.3f}, top-4 {ev.get('top4', 0):.3f}")
        if m.get("mismatched_prompts"):
            print(f"  output differs from vanilla on: {', '.join(m['mismatched_prompts'])}")


def _span(iv: list[float]) -> str:
    return f"{iv[0]:.3f}-{iv[1]:.3f}x" if iv else "-"


def _print_specee(m: dict) -> None:  # m: one mode's summary
    # no layer predictors: no EAGLE head ran, so there are no candidates (only the shortlist's exits)
    hit = f", candidate hit {m['cand_hit_rate']:.1%}" if m.get("uses_head", True) else ", no EAGLE head (shortlist exits only)"
    print(f"  exits {m['exit_rate']:.1%} of steps, mean layers {m['mean_layers']:.1f}/{m['n_layer']}{hit}")
    print(f"  per exit step: target {m['target_ms_per_step']:.2f} ms, head {m['draft_ms_per_step']:.2f} ms")
    hist = m.get("exit_hist", [])
    exits = ", ".join(f"L{i}: {n}" for i, n in enumerate(hist[:-1]) if n)
    if exits:
        vocab = m.get("vocab_head_steps", 0)
        print(f"  exits by layer: {exits} (last layer: {vocab} by the shortlist); full lm_head: {hist[-1]}")
    if "exit_precision" in m:
        n = m["exit_precision_checked_exits"]
        print(f"  exit precision {m['exit_precision']:.2%} over {n} exits checked at full depth ({m['backend']} backend)")
    if m.get("confirmed_endings"):
        print(f"  exits declined onto an end-of-generation or stop token: {m['confirmed_endings']}")


def write_report(report: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report, indent=1))
