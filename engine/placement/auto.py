"""The placement a load with layout "auto" gets: this model's facts and this machine's profile through
the planner. I/O glue above the planner and the machine profile, so neither imports the other's caller."""

from __future__ import annotations

from pathlib import Path

from engine import protocol as p
from engine.models.acceleration import find_pack
from engine.placement.machine import this_machine
from engine.placement.model_facts import facts_from_gguf
from engine.placement.planner import Plan, exits_from_manifest, plan


def placement_for(
    model_path: str | Path, n_ctx: int = 4096, n_threads: int = 0, may_exit: bool = True
) -> tuple[p.Placement, Plan]:
    """The worker's Placement for a model on this machine, from the plan, and the plan itself.
    User choices (context, threads) win; the plan decides what goes where. may_exit: the load may
    run specee (the mode asked for is specee or auto), so layouts are also weighed with its exits;
    the plan's mode is a prediction for the layout, never the mode the worker runs."""
    facts = facts_from_gguf(Path(model_path))
    pack = find_pack(Path(model_path))
    exits = exits_from_manifest(pack.manifest, facts.n_layer) if pack and may_exit else None
    pl = plan(facts, this_machine(), exits, n_ctx, ctx_auto=False, n_threads=n_threads)
    layout = p.Layout.FIRST if pl.layout == "first" else p.Layout.LAST
    placement = p.Placement(n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=pl.n_gpu_layers, layout=layout,
                            output_on_gpu=pl.output_on_gpu)  # fmt: skip
    return placement, pl
