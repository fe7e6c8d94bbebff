"""`specee-chat --selftest`: the installed app's end-to-end check, headless. Loads the default
model in the worker (from the frozen executable itself in an installer build), generates a few
tokens in every acceleration mode whose weights are installed, prints JSON, exits 0 only if all
worked. It also reports the backends the installation ships and loaded, and the GPU models would
go on (or why none): a machine without a GPU driver must still pass, on the CPU."""

from __future__ import annotations

import json
import sys
import time
from typing import cast

from engine import __version__
from engine import protocol as p
from engine.client import WorkerClient, WorkerError, worker_command
from engine.models.acceleration import find_pack
from engine.models.default_model import ensure_default_model


def run(n_tokens: int = 8) -> int:
    t0 = time.perf_counter()
    report: dict = {"version": __version__, "frozen": bool(getattr(sys, "frozen", False)), "modes": {}}
    ok = True
    try:
        model = ensure_default_model()
        pack = find_pack(model)
        modes = ["vanilla", "ngram"]  # ngram: the drafters library is bundled and loads
        if pack and pack.eagle_head:
            modes.append("eagle")
        if pack and pack.exit_predictors:
            modes.append("specee")
        with WorkerClient() as client:
            report["worker_command"] = worker_command()
            gpu = client.ready.native["gpu"] if client.ready else {}
            report["backends"] = gpu.get("backends", [])
            report["gpu"] = (gpu.get("gpu") or {}).get("description")
            report["why_no_gpu"] = gpu.get("why_no_gpu", [])
            for mode in modes:
                loaded = client.load(model, p.Placement(n_ctx=1024), mode=mode)
                t = time.perf_counter()
                events = list(client.stream([{"role": "user", "content": "Say hello."}], p.Sampling.greedy(n_tokens)))
                done = cast(p.Done, events[-1])  # a stream ends with its Done
                report.setdefault("start_to_first_answer_s", round(time.perf_counter() - t0, 2))
                report["modes"][mode] = {"loaded": loaded.mode, "tokens": done.n_generated, "text": done.text,
                                         "seconds": round(time.perf_counter() - t, 2)}  # fmt: skip
                ok &= done.n_generated > 0 and loaded.mode == mode
    except (WorkerError, OSError, RuntimeError) as exc:
        report["error"] = str(exc)
        ok = False
    report["ok"] = ok
    print(json.dumps(report, indent=1))
    return 0 if ok else 1
