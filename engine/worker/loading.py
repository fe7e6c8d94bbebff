"""What a Load resolves to around llama.cpp's load of the target, apart from it: where the layers go
(the planner's placement, or the caller's), the name people call the model by, the cells a batched
context needs, and what Loaded notes about a model without a chat template."""

from __future__ import annotations

from pathlib import Path

from engine import protocol as p
from engine.llm.chat_prompt import ChatPrompt, looks_like_base_model
from engine.models.gguf_file import GGUFInfo, ModelFileError
from engine.models.registry import ModelRegistry


def display_name(model_path: Path) -> str:
    """What people call the model: its id in the registry (the model switcher's name for it), else the
    file's name; never the GGUF's general.name, which reads like "Smollm2 135M 8k Lc100K Mix1 Ep2"."""
    try:
        record = ModelRegistry().by_path(model_path)
    except OSError:
        record = None
    return record.id if record else model_path.stem


def resolve_placement(load: p.Load) -> tuple[p.Placement, str, dict[str, float]]:
    """The placement to load, why, and the planner's predicted decode speed per mode: the planner's
    placement for "auto" (the same for app, CLI, bench and tests), else the caller's override. The
    planner weighs layouts for the modes this load may run; the mode itself is decided only by
    AutoMode.start (explicit, or auto's measurement)."""
    asked = load.placement
    if asked.layout != "auto":
        where = "all" if asked.n_gpu_layers < 0 else str(asked.n_gpu_layers)
        return asked, f"explicit placement: {where} layers ({asked.layout}) on the GPU, the rest on the CPU", {}
    from engine.placement.auto import placement_for

    try:
        may_exit = load.mode in (p.Mode.SPECEE, p.Mode.COMBINED, p.Mode.AUTO)
        placement, plan = placement_for(load.model_path, asked.n_ctx, asked.n_threads, may_exit)
    except (ModelFileError, OSError, RuntimeError, ValueError, KeyError) as exc:
        cpu = p.Placement(n_ctx=asked.n_ctx, n_threads=asked.n_threads, n_gpu_layers=0, layout=p.Layout.LAST)
        return cpu, f"no placement plan ({exc}); all layers on the CPU", {}
    prefix = "cpu/" if plan.layout == "cpu" else f"{plan.layout}-layers/"
    predicted = {key.removeprefix(prefix): tok_s for key, tok_s in plan.alternatives.items() if key.startswith(prefix)}
    return placement, plan.explanation, predicted


def padded_ctx(n_ctx: int) -> int:
    """The context llama.cpp makes of n_ctx (a multiple of 256): a sequence of a batched context
    gets the room a one-sequence context would have."""
    return -(-n_ctx // 256) * 256


def chat_format_note(prompt: ChatPrompt, info: GGUFInfo) -> str:
    if prompt.has_template:
        return ""
    note = (
        f"This model file carries no chat template, so conversations are formatted as {prompt.format_name}"
        f" (llama.cpp's format for {info.architecture or 'this'} models)."
    )
    if looks_like_base_model(info.name, False):
        note += (
            " It also looks like a base model, not a chat model: it continues text rather than answering."
            " For conversations, pick an instruct or chat version of it."
        )
    return note
