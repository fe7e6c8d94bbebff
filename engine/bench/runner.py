"""`specee bench`: every mode gets its own worker; prompts run interleaved across modes so that
machine drift (thermal, background load) hits all modes alike; ratios are to `vanilla` of the same run."""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from engine import protocol as p
from engine.bench.fidelity import TIE_GAP, ended_early, first_divergence
from engine.client import WorkerClient, WorkerError
from engine.models.acceleration import find_pack
from engine.prompts import BenchPrompt
from engine.sequences import common_prefix

# A mode name -> (worker acceleration mode, which interpreter). `upstream` is vanilla decoding on
# plain upstream llama-cpp-python, for checking that our build costs nothing.
UPSTREAM = "upstream"


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
    accel: dict[str, float] = field(default_factory=dict)
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
        for key in ("acceptance_length", "accept_rate", "draft_ms_per_step", "verify_ms_per_step", "feed_ms_per_step"):
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
        if self.mode.startswith("specee"):
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
    early, ties, real = [], [], []
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
    }
    shadow_exits = sum(a.get("shadow_exits", 0) for a in acc)
    if shadow_exits:
        correct = sum(a.get("exit_precision", 0.0) * a.get("shadow_exits", 0) for a in acc)
        out["exit_precision"] = round(correct / shadow_exits, 4)
        out["exit_precision_checked_exits"] = shadow_exits
    return out


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else 0.0


def run_bench(
    model_path: str,
    prompts: list[BenchPrompt],
    modes: list[str],
    max_tokens: int = 64,
    warmup: int = 2,
    n_ctx: int = 4096,
    n_threads: int = 0,
    upstream_python: str | None = None,
    n_gpu_layers: int | None = None,
    layout: str = "auto",
    peer_server: str | None = None,
    repeat: int = 1,
) -> dict:
    """layout "auto": every mode loads the planner's placement, as the app does; "first"/"last"
    with n_gpu_layers override it (the EAGLE head follows the target's last layer either way).
    Modes "peer" and "peer:<llama.cpp drafter>" run upstream llama-server (peer_server) instead.
    repeat: each prompt runs that many times in every mode, the modes taking turns, and the run of
    median speed is kept (greedy answers are the same every time): one run on this 2-core machine
    varies by ±5%, more than the few percent a target is about."""
    clients: dict[str, WorkerClient] = {}
    peers: dict[str, _Peer] = {}
    reports: dict[str, ModeReport] = {}
    try:
        for mode in modes:
            if mode == "peer" or mode.startswith("peer:"):
                if not peer_server:
                    raise SystemExit("peer modes need llama-server: `python native/build.py --server` builds it")
                peers[mode] = _Peer(Path(peer_server), Path(model_path), mode.partition(":")[2], n_ctx, n_threads, max_tokens)
                reports[mode] = ModeReport(mode, {"build_key": "upstream llama-server"}, loaded=peers[mode].loaded)
                continue
            python = upstream_python if mode == UPSTREAM else None
            if mode == UPSTREAM and not python:
                raise SystemExit("mode 'upstream' needs --upstream-python (make upstream builds .venv-upstream)")
            client = WorkerClient(python=python)
            ready = client.start()
            # "eagle:2" = eagle with a 2-token draft chain; "specee:check" = specee that also runs
            # full depth on every step to measure exit precision (same text, slower);
            # "specee:nofill" = skipped layers' K/V left unwritten (what the fill is worth);
            # "specee:noexit" = every step at full depth through the exit graph (its overhead)
            # "ngram:ngram-mod" = another of llama.cpp's n-gram drafters; "draft:4" = a 4-token draft chain
            worker_mode, _, opt = ("vanilla" if mode == UPSTREAM else mode).partition(":")
            n_draft = int(opt) if worker_mode in ("eagle", "draft") and opt else 0
            specee_opt = opt if worker_mode == "specee" else ""
            drafter = opt if worker_mode == "ngram" else ""
            placement = p.Placement(n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers or 0, layout=layout)
            loaded = client.load(
                model_path, placement, mode=worker_mode, n_draft=n_draft, exit_check_every=int(specee_opt == "check"),
                exit_fill=specee_opt != "nofill", exits=specee_opt != "noexit", drafter=drafter,
                keep_kv=False,  # every prompt prefills from scratch, as the peer's does (no former run's caches)
                measure_reference=False,  # no worker measures in the background while another is timed
            )  # fmt: skip
            clients[mode], reports[mode] = client, ModeReport(mode, ready.native, loaded=loaded)
            if mode.startswith(("eagle", "specee")):
                pack = find_pack(Path(model_path))
                reports[mode].head_eval = pack.manifest.get("eagle", {}).get("dev_eval", {}) if pack else {}
        sampling = p.Sampling.greedy(max_tokens)

        active = list(modes)

        def sample(mode: str, prompt: BenchPrompt) -> Sample | None:
            """One answer; a mode that fails (its server crashed) is reported and dropped, the others go on."""
            from engine.bench.peer import PeerError

            try:
                return peers[mode].run(prompt) if mode in peers else _run_one(clients[mode], prompt, sampling)
            except (PeerError, WorkerError) as exc:
                if mode == "vanilla":
                    raise
                reports[mode].failed = f"{prompt.id}: {exc}"
                active.remove(mode)
                return None

        for prompt in prompts[:warmup]:
            for mode in list(active):
                sample(mode, prompt)
        for prompt in tqdm(prompts, desc="bench", unit="prompt", file=sys.stderr):
            runs: dict[str, list[Sample]] = {mode: [] for mode in active}
            for _ in range(max(1, repeat)):
                for mode in list(active):
                    got = sample(mode, prompt)
                    if got is not None:
                        runs[mode].append(got)
            for mode, got in runs.items():
                if got and mode in active:
                    reports[mode].samples.append(sorted(got, key=lambda s: s.decode_tok_s)[len(got) // 2])
                    if len(got) >= 2 and got[0].decode_tok_s > 0:
                        reports[mode].self_ratios[prompt.id] = got[1].decode_tok_s / got[0].decode_tok_s
        if "vanilla" in reports:
            _vanilla_margins(clients["vanilla"], reports, prompts, sampling)
    finally:
        for client in clients.values():
            client.stop()
        for peer in peers.values():
            peer.stop()
    reference = reports.get("vanilla")
    return {
        "model": model_path,
        "floor": _floor(model_path),
        "max_tokens": max_tokens,
        "warmup": warmup,
        "repeat": max(1, repeat),
        "prompts": len(prompts),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "modes": [reports[m].summary(reference if m != "vanilla" else None, {q.id: q.category for q in prompts}) for m in modes],
        "samples": {m: [asdict(s) for s in reports[m].samples] for m in modes},
    }


def _floor(model_path: str) -> dict | None:
    """The physical floor of one decode step on this CPU: every layer's and the lm_head's weights
    read once at the measured bandwidth (engine/bench/cost_curve.py). None if it cannot be had."""
    try:
        from engine.bench.cost_curve import floor_ms
        from engine.placement.machine import measure_cpu_bandwidth

        bandwidth = measure_cpu_bandwidth()
        ms, read = floor_ms(Path(model_path), bandwidth)
    except (OSError, ValueError, RuntimeError):  # no GGUF facts or no native build: no floor line
        return None
    return {"ms_per_token": ms, "bytes_per_token": read, "bandwidth_gbs": bandwidth}


class _Peer:
    """A peer mode: upstream llama-server with llama.cpp's own speculative decoding (or none), fed
    the token ids our chat formatting gives, greedy, one slot, the same threads."""

    def __init__(self, binary: Path, model: Path, drafter: str, n_ctx: int, n_threads: int, max_tokens: int) -> None:
        from engine.bench.peer import PeerServer
        from engine.hardware import physical_cores
        from engine.llm.chat_prompt import ChatPrompt
        from engine.llm.load import is_end_of_generation, vocab_only
        from engine.models.drafts import find_draft_model
        from engine.models.gguf_file import inspect_gguf
        from engine.paths import cache_dir

        spec: list[str] = []
        if drafter == "draft":
            draft = find_draft_model(model)
            if draft is None:
                raise SystemExit(f"peer:draft needs a draft model with {model.name}'s tokenizer installed")
            spec = ["--spec-type", "draft-simple", "-md", str(draft), "-ngld", "0"]
        elif drafter == "eagle3":  # the same EAGLE-3 head our eagle mode uses, in llama.cpp's own loop
            from engine.models.acceleration import find_pack

            pack = find_pack(model)
            if pack is None or pack.eagle_head is None:
                raise SystemExit(f"peer:eagle3 needs an EAGLE-3 head installed for {model.name}")
            spec = ["--spec-type", "draft-eagle3", "-md", str(pack.eagle_head), "-ngld", "0"]
        elif drafter:
            spec = ["--spec-type", drafter]
        threads = n_threads or physical_cores()
        self.vocab_llm = vocab_only(model)
        self.chat = ChatPrompt.for_model(self.vocab_llm, inspect_gguf(model).chat_template)
        self.budget, self.max_tokens = n_ctx - min(max_tokens, n_ctx // 2), max_tokens
        log = cache_dir() / "logs" / f"peer-{drafter or 'plain'}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.server = PeerServer(binary, model, threads, n_ctx, spec, log)
        self.loaded = p.Loaded(n_threads=threads, placement=p.Placement(n_ctx=n_ctx, n_threads=threads, layout="last"),
                               plan=f"upstream llama-server {' '.join(spec) or '(no speculation)'}")  # fmt: skip
        self._is_eog = is_end_of_generation

    def run(self, prompt: BenchPrompt) -> Sample:
        tokens = self.chat.fit([{"role": "user", "content": prompt.text}], self.budget).tokens
        r = self.server.complete(tokens, self.max_tokens)
        out = [t for t in r.tokens if not self._is_eog(self.vocab_llm, t)]
        finish = "stop" if r.stopped or len(out) < len(r.tokens) else "length"
        return Sample(prompt.id, len(tokens), len(out), r.ttft_ms, r.prefill_tok_s, r.decode_tok_s, finish, out)

    def stop(self) -> None:
        self.server.stop()
        self.vocab_llm.close()


def _vanilla_margins(
    client: WorkerClient, reports: dict[str, ModeReport], prompts: list[BenchPrompt], sampling: p.Sampling
) -> None:
    """Vanilla again, untimed, on the prompts some mode diverged on, reporting its top-2 logit gaps
    (reading logits each token would slow the timed vanilla runs). Where the re-run itself departs
    from the timed run (kernels whose results depend on the batch shape, e.g. a different cached
    prefix), only the gaps of the shared prefix are kept: a divergence past it counts as no tie."""
    ref = {s.prompt_id: s for s in reports["vanilla"].samples}
    diverged = {s.prompt_id for r in reports.values() for s in r.samples if s.tokens != ref.get(s.prompt_id, s).tokens}
    unrepeatable = []
    for prompt in tqdm([q for q in prompts if q.id in diverged], desc="vanilla logit gaps", unit="prompt", file=sys.stderr):
        again = _run_one(client, prompt, sampling, report_margins=True)
        timed = ref[prompt.id]
        if again.tokens != timed.tokens:
            unrepeatable.append(prompt.id)
        # gap i belongs to the token at i, chosen after the same prefix: valid while the prefixes agree
        timed.margins = again.margins[: common_prefix(again.tokens, timed.tokens) + 1]
    reports["vanilla"].unrepeatable = unrepeatable


def _run_one(client: WorkerClient, prompt: BenchPrompt, sampling: p.Sampling, report_margins: bool = False) -> Sample:
    stats, done = p.Stats(), p.Done()
    # A fresh conversation per prompt, as a user would start one; the whole answer at once, as the
    # peer's are asked for (a token's event and its reader's wake-up ran beside the decode threads).
    rid = client.generate([{"role": "user", "content": prompt.text}], sampling, report_margins=report_margins, stream=False)
    for ev in client.events_of(rid):
        if isinstance(ev, p.Stats):
            stats = ev
        elif isinstance(ev, p.Done):
            done = ev
    return Sample(prompt.id, done.n_prompt, done.n_generated, stats.ttft_ms, stats.prefill_tok_s, stats.decode_tok_s,
                  done.finish_reason, done.tokens, stats.accel, done.margins)  # fmt: skip


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
        if "acceptance_length_median" in m:
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
        if "token_agreement" in m and m["mode"].startswith("specee"):
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
    print(f"  exits {m['exit_rate']:.1%} of steps, mean layers {m['mean_layers']:.1f}/{m['n_layer']},"
          f" candidate hit {m['cand_hit_rate']:.1%}")  # fmt: skip
    print(f"  per step: target {m['target_ms_per_step']:.2f} ms, draft {m['draft_ms_per_step']:.2f} ms")
    hist = m.get("exit_hist", [])
    exits = ", ".join(f"L{i}: {n}" for i, n in enumerate(hist[:-1]) if n)
    if exits:
        vocab = m.get("vocab_head_steps", 0)
        print(f"  exits by layer: {exits} (last layer: {vocab} by the draft-vocabulary head); full lm_head: {hist[-1]}")
    if "exit_precision" in m:
        n = m["exit_precision_checked_exits"]
        print(f"  exit precision {m['exit_precision']:.2%} over {n} exits checked at full depth ({m['backend']} backend)")
    if m.get("confirmed_endings"):
        print(f"  exits declined onto an end-of-generation or stop token: {m['confirmed_endings']}")


def write_report(report: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report, indent=1))
