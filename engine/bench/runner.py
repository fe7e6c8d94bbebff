"""`specee bench`: every mode gets its own worker; prompts run interleaved across modes so that
machine drift (thermal, background load) hits all modes alike; ratios are to `vanilla` of the same run."""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from engine import protocol as p
from engine.bench.prompts import BenchPrompt
from engine.client import WorkerClient
from engine.models.acceleration import find_pack

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


@dataclass
class ModeReport:
    mode: str
    native: dict
    samples: list[Sample] = field(default_factory=list)
    head_eval: dict = field(default_factory=dict)  # the shipped head's offline hit rates (manifest)

    def summary(self, reference: ModeReport | None) -> dict:
        decode = [s.decode_tok_s for s in self.samples if s.decode_tok_s > 0]
        out = {
            "mode": self.mode,
            "build_key": self.native.get("build_key", "upstream"),
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
        if self.head_eval:
            out["head_dev_eval"] = self.head_eval
        if reference is not None:
            ref = {s.prompt_id: s for s in reference.samples}
            ratios = [s.decode_tok_s / ref[s.prompt_id].decode_tok_s for s in self.samples
                      if s.prompt_id in ref and s.decode_tok_s > 0 and ref[s.prompt_id].decode_tok_s > 0]  # fmt: skip
            same = [s.tokens == ref[s.prompt_id].tokens for s in self.samples if s.prompt_id in ref]
            mismatched = [s.prompt_id for s in self.samples if s.prompt_id in ref and s.tokens != ref[s.prompt_id].tokens]
            out["decode_speedup_vs_vanilla_median"] = _median(ratios)
            out["identical_to_vanilla"] = f"{sum(same)}/{len(same)}"
            out["mismatched_prompts"] = mismatched
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
) -> dict:
    clients: dict[str, WorkerClient] = {}
    reports: dict[str, ModeReport] = {}
    try:
        for mode in modes:
            python = upstream_python if mode == UPSTREAM else None
            if mode == UPSTREAM and not python:
                raise SystemExit("mode 'upstream' needs --upstream-python (make upstream builds .venv-upstream)")
            client = WorkerClient(python=python)
            ready = client.start()
            # "eagle:2" = eagle with a 2-token draft chain
            worker_mode, _, n_draft = ("vanilla" if mode == UPSTREAM else mode).partition(":")
            client.load(model_path, p.Placement(n_ctx=n_ctx, n_threads=n_threads), mode=worker_mode, n_draft=int(n_draft or 0))
            clients[mode], reports[mode] = client, ModeReport(mode, ready.native)
            if mode.startswith("eagle"):
                pack = find_pack(Path(model_path))
                reports[mode].head_eval = pack.manifest.get("eagle", {}).get("dev_eval", {}) if pack else {}
        sampling = p.Sampling.greedy(max_tokens)
        for prompt in prompts[:warmup]:
            for mode in modes:
                _run_one(clients[mode], prompt, sampling)
        for prompt in tqdm(prompts, desc="bench", unit="prompt", file=sys.stderr):
            for mode in modes:
                reports[mode].samples.append(_run_one(clients[mode], prompt, sampling))
    finally:
        for client in clients.values():
            client.stop()
    reference = reports.get("vanilla")
    return {
        "model": model_path,
        "max_tokens": max_tokens,
        "warmup": warmup,
        "prompts": len(prompts),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "modes": [reports[m].summary(reference if m != "vanilla" else None) for m in modes],
        "samples": {m: [asdict(s) for s in reports[m].samples] for m in modes},
    }


def _run_one(client: WorkerClient, prompt: BenchPrompt, sampling: p.Sampling) -> Sample:
    stats, done = p.Stats(), p.Done()
    # A fresh conversation per prompt, as a user would start one.
    for ev in client.stream([{"role": "user", "content": prompt.text}], sampling):
        if isinstance(ev, p.Stats):
            stats = ev
        elif isinstance(ev, p.Done):
            done = ev
    return Sample(prompt.id, done.n_prompt, done.n_generated, stats.ttft_ms, stats.prefill_tok_s, stats.decode_tok_s,
                  done.finish_reason, done.tokens, stats.accel)  # fmt: skip


def print_report(report: dict) -> None:
    print(f"model: {report['model']}  prompts: {report['prompts']}  max_tokens: {report['max_tokens']}")
    header = f"{'mode':<12}{'decode tok/s':>14}{'prefill tok/s':>15}{'TTFT ms':>10}{'vs vanilla':>12}{'identical':>11}"
    print(header)
    print("-" * len(header))
    for m in report["modes"]:
        ratio = m.get("decode_speedup_vs_vanilla_median")
        print(f"{m['mode']:<12}{m['decode_tok_s_median']:>14.1f}{m['prefill_tok_s_median']:>15.1f}{m['ttft_ms_median']:>10.1f}"
              f"{(f'{ratio:.3f}x' if ratio else '1.000x'):>12}{m.get('identical_to_vanilla', '-'):>11}")  # fmt: skip
        if "acceptance_length_median" in m:
            print(f"  acceptance length {m['acceptance_length_median']:.2f} tok/step, accept {m['accept_rate_median']:.2f};"
                  f" per step: draft {m['draft_ms_per_step_median']:.1f} ms, verify {m['verify_ms_per_step_median']:.1f} ms,"
                  f" feed {m['feed_ms_per_step_median']:.1f} ms")  # fmt: skip
        if m.get("head_dev_eval"):
            ev = m["head_dev_eval"]
            print(f"  head (offline, dev prompts): top-1 {ev.get('top1', 0):.3f}, top-4 {ev.get('top4', 0):.3f}")
        if m.get("mismatched_prompts"):
            print(f"  output differs from vanilla on: {', '.join(m['mismatched_prompts'])}")


def write_report(report: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report, indent=1))
