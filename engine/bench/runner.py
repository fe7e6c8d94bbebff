"""`specee bench`: every mode gets its own worker; prompts run interleaved across modes so that
machine drift (thermal, background load) hits all modes alike; ratios are to `vanilla` of the same run."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from engine import protocol as p
from engine.bench.printing import print_report, write_report
from engine.bench.summary import ModeReport, Sample, median_interval
from engine.client import WorkerClient, WorkerError
from engine.models.acceleration import find_pack
from engine.prompts import BenchPrompt
from engine.sequences import common_prefix

# the report's numbers and its printing live beside this (engine/bench/summary.py, printing.py)
__all__ = ["UPSTREAM", "ModeReport", "Sample", "median_interval", "print_report", "run_bench", "write_report"]

# A mode name -> (worker acceleration mode, which interpreter). `upstream` is vanilla decoding on
# plain upstream llama-cpp-python, for checking that our build costs nothing.
UPSTREAM = "upstream"


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
            placement = p.Placement(n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers or 0, layout=layout)  # type: ignore[arg-type]  # the CLI's string: Placement makes it a Layout
            loaded = client.load(
                model_path, placement, mode=worker_mode, n_draft=n_draft, exit_check_every=int(specee_opt == "check"),
                exit_fill=specee_opt != "nofill", exits=specee_opt != "noexit", drafter=drafter,
                keep_kv=False,  # every prompt prefills from scratch, as the peer's does (no former run's caches)
                measure_reference=False,  # no worker measures in the background while another is timed
            )  # fmt: skip
            clients[mode], reports[mode] = client, ModeReport(mode, ready.native, loaded=loaded)
            if mode.startswith(("eagle", "specee", "combined")):
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
            for mode, taken in runs.items():
                if taken and mode in active:
                    reports[mode].samples.append(sorted(taken, key=lambda s: s.decode_tok_s)[len(taken) // 2])
                    if len(taken) >= 2 and taken[0].decode_tok_s > 0:
                        reports[mode].self_ratios[prompt.id] = taken[1].decode_tok_s / taken[0].decode_tok_s
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
        self.loaded = p.Loaded(n_threads=threads, placement=p.Placement(n_ctx=n_ctx, n_threads=threads, layout=p.Layout.LAST),
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
