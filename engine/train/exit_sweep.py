"""What SpecEE's remaining exit levers could win at most, from a `specee train exits` recording.

`python -m engine.train.exit_sweep --work W [--model M] [--first-prompt 1100 --n-prompts 230]`
refits the predictors on the recording's training prompts (as `specee train exits` does) and, on
its held-out prompts, for each precision target prints the cost of a token in layer units (layers
run, the full lm_head where no exit fires, the checks) relative to a plain full-depth step:

- `static`: the schedule `specee train exits` would ship (`choose_schedule`), were exits free to skip
  any number of layers (the shipping run bounds that for fidelity: exits.MAX_SKIP_LAYERS);
- `context bound`: a schedule that knows the context perfectly, so it checks only the one layer
  where the step will exit and nothing on steps that will not; every context-aware schedule (the
  SpecEE paper's, or any gate) costs at least this;
- `copy cands`: steps whose token is missing from the head's candidates but is the copy drafter's
  proposal (longest earlier match in prompt + answer so far, as `ngram` drafts): the hits that
  feeding that proposal in as a candidate would add, and the cost if every one of them exited at
  the earliest calibrated layer (a bound: the predictor may not be that sure).

Offline and cheap (a minute of fitting); the bench measures what ships, this says what is worth building.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.sequences import CopyLookup
from engine.train import exits as X


@dataclass
class Sweep:
    precision: float
    calibrated: list[int]  # layers with a threshold that meets the target
    schedule: list[int]  # what the trainer's chooser keeps
    static: float  # cost per token / full-depth cost
    static_exit_rate: float
    context_bound: float
    context_exit_rate: float
    copy_hits: float  # share of steps the copy proposal would add to the candidates' hits
    copy_bound: float


def context_bound(z: np.ndarray, thr: np.ndarray, n_layer: int, head_cost: float, check_cost: float) -> tuple[float, float]:
    """Cost per token (layer units) and exit rate when only the layer a step exits at is checked:
    the earliest calibrated layer whose predictor fires, one check; nothing on steps with no exit."""
    first = np.full(z.shape[0], n_layer)
    for layer in reversed(range(n_layer)):
        if np.isfinite(thr[layer]):
            first[z[:, layer] > thr[layer]] = layer
    exits = first < n_layer
    return float(np.where(exits, first + 1 + check_cost, n_layer + head_cost).mean()), float(exits.mean())


def copy_proposals(prompt: list[int], answer: list[int]) -> list[int]:
    """For each answer position, the token the copy drafter would propose there (-1: no match),
    from the prompt and the answer before it."""
    look = CopyLookup(prompt)
    out = []
    for tok in answer:
        out.append(look.proposal())
        look.push(tok)
    return out


def sweep(
    data: X.ExitData,
    prompt_tokens: dict[int, list[int]],
    precisions: list[float],
    head_cost: float,
    check_cost: float,
    epochs: int = 30,
) -> list[Sweep]:
    n_layer = data.rec.shape[1]
    x, y = X.features(data.rec, data.draft_lp), data.labels
    held = X.heldout_steps(data.seq)
    preds = X.train_mlps(x[~held], y[~held], epochs=epochs)
    z, yh = X.predictor_logits(preds, x[held]), y[held]
    base = n_layer + head_cost
    # the copy drafter's proposal at every held-out step, answer by answer
    proposal = np.full(len(data.token), -1)
    for s in np.unique(data.seq[held]):
        idx = np.nonzero(data.seq == s)[0]
        proposal[idx] = copy_proposals(prompt_tokens.get(int(s), []), data.token[idx].tolist())
    in_cands = (data.cands == data.token[:, None]).any(-1)
    added = (~in_cands & (proposal == data.token))[held]
    out = []
    for precision in precisions:
        thr = X.calibrate(z, yh, precision)
        calibrated = [layer for layer in range(n_layer) if np.isfinite(thr[layer])]
        schedule = X.choose_schedule(z, yh, thr, n_layer, head_cost, check_cost)
        static = X.step_cost(z, yh, thr, schedule, n_layer, head_cost, check_cost)
        sim = X.simulate(z, yh, thr, schedule, n_layer)
        bound, bound_rate = context_bound(z, thr, n_layer, head_cost, check_cost)
        # every added hit exits at the earliest calibrated layer, on top of the static schedule
        earliest = calibrated[0] + 1 + check_cost if calibrated else base
        running = np.ones(len(z), bool)
        for layer in schedule:
            running &= ~(z[:, layer] > thr[layer])
        gain = float((added & running).mean()) * (base - earliest)
        out.append(
            Sweep(
                precision=precision,
                calibrated=calibrated,
                schedule=schedule,
                static=static / base,
                static_exit_rate=sim["exit_rate"],
                context_bound=bound / base,
                context_exit_rate=bound_rate,
                copy_hits=float(added.mean()),
                copy_bound=(static - gain) / base,
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="a `specee train exits --work` folder (its exit-data.npz)")
    ap.add_argument("--model", help="GGUF path or model id (default: the default model)")
    ap.add_argument("--prompts", type=Path, help="the recording's prompt file (default: the training prompts)")
    ap.add_argument("--first-prompt", type=int, default=1100)
    ap.add_argument("--n-prompts", type=int, default=230)
    ap.add_argument("--max-new", type=int, default=96, help="as recorded: the prompt was fitted to leave room for it")
    ap.add_argument("--head-cost", type=float, help="the lm_head in layers (default: the shipped manifest's)")
    ap.add_argument("--check-cost", type=float, help="one check in layers (default: the shipped manifest's)")
    ap.add_argument("--precision", type=float, nargs="+", default=[0.995, 0.99])
    ap.add_argument("--epochs", type=int, default=60)
    args = ap.parse_args()
    if not (args.work / X.DATA_FILE).is_file():
        raise SystemExit(f"no recording in {args.work}: make one with `specee train exits --work {args.work} ...`")

    from engine.llm.chat_prompt import ChatPrompt
    from engine.llm.load import vocab_only
    from engine.models.acceleration import find_pack
    from engine.models.default_model import default_model_path
    from engine.models.gguf_file import inspect_gguf
    from engine.models.registry import ModelRegistry
    from engine.paths import RESOURCES_DIR

    model = ModelRegistry().path_for(args.model) if args.model else default_model_path()
    pack = find_pack(model)
    shipped = (pack.manifest.get("exits") if pack else None) or {}
    head_cost = args.head_cost or shipped.get("head_cost_layers") or X.head_cost_in_layers(model)
    check_cost = args.check_cost or shipped.get("check_cost_layers") or X.CHECK_COST_LAYERS
    prompts = X.exit_prompts(args.prompts or RESOURCES_DIR / "prompts" / "train.jsonl", args.first_prompt, args.n_prompts)
    llm = vocab_only(model)
    chat = ChatPrompt.for_model(llm, inspect_gguf(model).chat_template)
    tokens = {i: chat.fit([{"role": "user", "content": q.text}], 1024 - args.max_new - 8).tokens for i, q in enumerate(prompts)}
    try:
        data = X.load_data(args.work)
    except ValueError as err:
        raise SystemExit(str(err)) from err
    print(f"{model.name}: {len(data.token)} steps, lm_head {head_cost:.2f} layers, a check {check_cost:.2f}")
    print("cost per token / a full-depth step's (exit rate), on the held-out prompts:")
    print(f"{'precision':>9} {'calibrated':<18} {'schedule':<10} {'static':>15} {'context bound':>16} {'copy cands':>22}")
    for s in sweep(data, tokens, args.precision, head_cost, check_cost, args.epochs):
        print(
            f"{s.precision:9.3f} {json.dumps(s.calibrated):<18} {json.dumps(s.schedule):<10}"
            f" {s.static:7.4f} ({s.static_exit_rate:5.1%}) {s.context_bound:8.4f} ({s.context_exit_rate:5.1%})"
            f" {s.copy_bound:8.4f} (+{s.copy_hits:5.1%} hits)"
        )


if __name__ == "__main__":
    main()
