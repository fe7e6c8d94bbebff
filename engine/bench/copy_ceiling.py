"""The most any prompt-lookup drafter could give on this machine, from one bench run's answers.

`python -m engine.bench.copy_ceiling bench.json` replays each vanilla answer of a `specee bench
--json` report (greedy answers are what every lossless mode emits too) with perfect foresight: at
every step it looks up the longest earlier match of the context's last two or more tokens, as the
copy drafter does, drafts exactly as many of the following tokens as the answer goes on to confirm,
and drafts nothing where a verify of those rows would cost more than it emits. The cost of a decode
of n rows is this machine's, measured now (`specee bench --cost-curve`). A real drafter cannot know
which drafts will be confirmed, so it stays below this ceiling: the distance between the two is
what better guessing could still win; the ceiling itself is what copying can win at all. It also
prints how often the drafter's proposal came true by match length and by whether the earlier
occurrences of the context's last two tokens went on alike: the evidence a drafter has before it drafts.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from engine.sequences import CopyLookup

MAX_DRAFT = 16


def ceiling(prompt: list[int], answer: list[int], cost: dict[int, float]) -> float:
    """Answer tokens per unit of one-row decode cost under perfect-foresight copying (1.0: no gain)."""
    look = CopyLookup(prompt)
    t, spent = 1, 0.0  # answer[0] comes with the prompt's prefill, like every mode's first token
    while t < len(answer):
        look.push(answer[t - 1])  # the token this step's batch starts with
        pos = look.longest_match()[0]
        k = 0
        if pos >= 0:
            ahead = look.ctx[pos + 1 : pos + 1 + MAX_DRAFT]
            while k < len(ahead) and t + k < len(answer) and ahead[k] == answer[t + k]:
                k += 1
            if k and cost[k + 1] >= k + 1:
                k = 0  # confirmed, yet dearer than decoding them one by one
        spent += cost[k + 1]
        for j in range(k):
            look.push(answer[t + j])
        t += k + 1
    return (len(answer) - 1) / spent if spent else 1.0


def hit_rates(prompt: list[int], answer: list[int]) -> dict[tuple[str, str], list[int]]:
    """How often the copy drafter's proposal for the next token would come true, stepping through the
    answer one token at a time: [hits, tries] per (match length, whether the earlier occurrences of
    the context's last two tokens all went on alike: "one" occurrence, "agree", "disagree"). The
    evidence a drafter can have before it drafts, and what it is worth."""
    look = CopyLookup(prompt)
    ctx = look.ctx
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for t in range(1, len(answer)):
        look.push(answer[t - 1])
        pos, length = look.longest_match()
        if pos < 0:
            continue
        seen = look.earlier()
        alike = "one" if len(seen) == 1 else "agree" if all(ctx[i + 1] == ctx[pos + 1] for i in seen) else "disagree"
        bucket = str(length) if length <= 4 else "5-7" if length < 8 else "8-15" if length < 16 else "16+"
        row = out[(bucket, alike)]
        row[0] += int(ctx[pos + 1] == answer[t])
        row[1] += 1
    return out


def relative_costs(ms: dict[int, float]) -> dict[int, float]:
    """Decode cost of 1..MAX_DRAFT+1 rows relative to one row, interpolated between measured sizes."""
    sizes = sorted(ms)
    out = {}
    for n in range(1, MAX_DRAFT + 2):
        lo = max((s for s in sizes if s <= n), default=sizes[0])
        hi = min((s for s in sizes if s >= n), default=sizes[-1])
        v = ms[lo] if hi == lo else ms[lo] + (ms[hi] - ms[lo]) * (n - lo) / (hi - lo)
        if n > sizes[-1]:
            v = ms[sizes[-1]] * n / sizes[-1]
        out[n] = v / ms[1]
    return out


def cost_arg(text: str) -> dict[int, float]:
    """`--cost 2:1.72,4:3.05`: rows -> cost relative to one row (one row is 1.0)."""
    try:
        pairs = {int(n): float(x) for n, x in (kv.split(":") for kv in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want ROWS:COST pairs, e.g. 2:1.72,4:3.05,8:6.0") from None
    if not pairs or min(pairs) < 2 or min(pairs.values()) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: row counts of 2 or more, positive costs")
    return {1: 1.0, **pairs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", type=Path, help="a `specee bench --json` report with a vanilla mode")
    ap.add_argument("--model", help="GGUF path or model id (default: the report's model)")
    ap.add_argument("--prompts", help="the prompt file of that run (default: the dev prompts)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--cost", type=cost_arg, help="decode cost of n rows relative to one, e.g. 2:1.72,4:3.05,8:6.0,16:8.71 "
                                   "(default: measured now, as the worker loads the model)")  # fmt: skip
    args = ap.parse_args()

    from engine.llm.chat_prompt import ChatPrompt
    from engine.llm.decode_cost import SIZES, measure
    from engine.llm.decoders import COPY_ALIKE, COPY_MATCH_BUCKETS
    from engine.llm.load import vocab_only
    from engine.models.gguf_file import inspect_gguf
    from engine.models.registry import ModelRegistry
    from engine.placement.weights_layout import repack_is_exact
    from engine.prompts import DEV_PROMPTS, load_prompts

    rep = json.loads(args.report.read_text(encoding="utf-8"))
    model = ModelRegistry().path_for(args.model or rep["model"])
    threads = args.threads or rep.get("threads") or 2
    if args.cost:
        cost = relative_costs(args.cost)
    else:  # the kernels the worker decodes this model with (a Q4_K model: repacked)
        repack = repack_is_exact(inspect_gguf(model))
        curve = next(c for c in measure(model, repack, threads, ["repacked" if repack else "multi-column"], SIZES))
        cost = relative_costs(curve.ms)
    llm = vocab_only(model)
    chat = ChatPrompt.for_model(llm, inspect_gguf(model).chat_template)
    prompts = {q.id: q for q in load_prompts(args.prompts or DEV_PROMPTS)}
    by_cat: dict[str, list[float]] = defaultdict(list)
    hits: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for s in rep["samples"]["vanilla"]:
        q = prompts[s["prompt_id"]]
        tokens = chat.fit([{"role": "user", "content": q.text}], 1 << 30).tokens
        by_cat[q.category or "-"].append(ceiling(tokens, s["tokens"], cost))
        for key, (h, n) in hit_rates(tokens, s["tokens"]).items():
            hits[key][0] += h
            hits[key][1] += n
    got: dict[str, list[float]] = defaultdict(list)
    if "ngram" in rep["samples"]:
        speed = {s["prompt_id"]: s["decode_tok_s"] for s in rep["samples"]["vanilla"]}
        for s in rep["samples"]["ngram"]:
            if speed.get(s["prompt_id"]):
                got[prompts[s["prompt_id"]].category or "-"].append(s["decode_tok_s"] / speed[s["prompt_id"]])
    print("the next token the copy drafter would propose came true, by match length and earlier occurrences:")
    for bucket in COPY_MATCH_BUCKETS:
        cells = [f"{alike} {hits[(bucket, alike)][0] / hits[(bucket, alike)][1]:.2f} of {hits[(bucket, alike)][1]}"
                 for alike in COPY_ALIKE if hits[(bucket, alike)][1]]  # fmt: skip
        print(f"  match {bucket:>5}: " + ", ".join(cells))
    print("cost of n rows / one row here: " + ", ".join(f"{n}: {cost[n]:.2f}" for n in (2, 3, 4, 8, 16)))
    print(f"{'category':<16} {'prompts':>7} {'ceiling':>8} {'ngram':>7}   (medians of per-prompt ratios to vanilla)")
    everything = [v for vs in by_cat.values() for v in vs]
    for cat, vs in [*sorted(by_cat.items()), ("all", everything)]:
        mine = got.get(cat) or ([v for g in got.values() for v in g] if cat == "all" else [])
        seen = f"{statistics.median(mine):7.3f}" if mine else f"{'-':>7}"
        print(f"{cat:<16} {len(vs):7d} {statistics.median(vs):8.3f} {seen}")


if __name__ == "__main__":
    main()
