"""SpecEE exit predictors: data from the real engine, one small MLP per layer, calibrated
thresholds and a layer schedule chosen by simulating the decode on held-out steps.

Data: the native early-exit step run at full depth on training prompts records, for every step,
the candidate logits after every layer (the exact numbers the engine will see) and the token the
full model chose. Label of (step, layer): the best candidate at that layer is that token.
"""

from __future__ import annotations

import json
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from engine import protocol as p
from engine.atomic import write_text_atomic
from engine.models.exit_predictors import ExitPredictors, LayerPredictor
from engine.prompts import BenchPrompt
from engine.train.exit_schedule import CHECK_COST_LAYERS, MAX_SKIP_LAYERS, calibrate, choose_schedule, simulate, step_cost
from engine.train.magpie import mixed_prompts

DATA_FILE = "exit-data.npz"
# native/src/early-exit.cpp specee_ee::SHORTLIST_CTX_ROWS: the rows of context tokens after the draft vocabulary's
SHORTLIST_CTX_ROWS = 2048


@dataclass
class ExitData:
    rec: np.ndarray  # [steps, n_layer, n_cand] candidate logits after each layer
    draft_lp: np.ndarray  # [steps, n_cand] the head's log-probabilities of the candidates
    vocab: np.ndarray  # [steps, 4] draft-vocabulary head after the last layer: 3 features, arg max token
    cands: np.ndarray  # [steps, n_cand]
    token: np.ndarray  # [steps] the full-depth token
    seq: np.ndarray  # [steps] prompt index (for a split by prompt)

    @property
    def labels(self) -> np.ndarray:
        """[steps, n_layer]: exiting after that layer would give the full model's token."""
        best = np.take_along_axis(self.cands[:, None, :], self.rec.argmax(-1)[..., None], axis=-1)[..., 0]
        return best == self.token[:, None]


N_FEATURES = 14  # native/src/specee.h SPECEE_EE_N_FEATURES


def features(rec: np.ndarray, draft_lp: np.ndarray) -> np.ndarray:
    """[steps, n_layer, 14], as native/src/exit-predictor.cpp exit_features computes them: top-4
    logits, their softmax over all candidates, the top token's probability change since the
    previous layer and whether it was already on top, top-1/top-2 margin, growth of the top logit,
    the head's log-probability of all candidates and of its first one."""
    rec = rec.astype(np.float32)
    steps, n_layer, k = rec.shape
    order = np.argsort(-rec, axis=-1, kind="stable")[..., :4]
    if k < 4:
        order = np.concatenate([order, np.repeat(order[..., -1:], 4 - k, axis=-1)], axis=-1)
    z = np.exp(rec - rec.max(-1, keepdims=True))
    pr = z / z.sum(-1, keepdims=True)
    prev = np.concatenate([np.full_like(pr[:, :1], 1.0 / k), pr[:, :-1]], axis=1)
    top = np.take_along_axis(rec, order, -1)
    f = np.zeros((steps, n_layer, N_FEATURES), np.float32)
    f[..., 0:4] = top
    f[..., 4:8] = np.take_along_axis(pr, order, -1)
    i1 = order[..., :1]
    f[..., 8] = np.take_along_axis(pr, i1, -1)[..., 0] - np.take_along_axis(prev, i1, -1)[..., 0]
    prev_arg = rec[:, :-1].argmax(-1)
    f[:, 1:, 9] = (prev_arg == i1[:, 1:, 0]).astype(np.float32)
    f[..., 10] = top[..., 0] - top[..., 1] if k > 1 else 0.0
    f[:, 1:, 11] = top[:, 1:, 0] - rec[:, :-1].max(-1)
    dm = draft_lp.max(-1, keepdims=True)
    f[..., 12] = (dm + np.log(np.exp(draft_lp - dm).sum(-1, keepdims=True)))[:, :1]
    f[..., 13] = draft_lp[:, :1]
    return f


def collect(model_path: Path, head_path: Path, prompts: list[BenchPrompt], work: Path, max_new: int, n_threads: int) -> ExitData:
    """Record full-depth steps; resumable per prompt (the npz is rewritten atomically)."""
    from engine.llm.chat_prompt import ChatPrompt
    from engine.llm.decoders import SpecEEDecoder
    from engine.llm.load import is_end_of_generation, open_model
    from engine.models.gguf_file import inspect_gguf

    work.mkdir(parents=True, exist_ok=True)
    path = work / DATA_FILE
    parts: dict[str, list[np.ndarray]] = {"rec": [], "draft_lp": [], "vocab": [], "cands": [], "token": [], "seq": []}
    done: set[str] = set()
    if path.exists():
        try:
            with np.load(path) as z:
                loaded = {k: z[k] for k in parts}
                done = set(json.loads(str(z["done"])))
            for k in parts:
                parts[k].append(loaded[k])
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
            # a recording cut short (disk full, killed mid-write by hand): record again, keep the file
            aside = path.with_name("damaged-" + path.name)
            path.replace(aside)
            print(f"[specee] {path} is damaged ({err}); moved to {aside.name}, recording again", file=sys.stderr)
    llm = open_model(model_path, n_ctx=1024, n_batch=512, n_threads=n_threads, n_threads_batch=n_threads)
    chat = ChatPrompt.for_model(llm, inspect_gguf(model_path).chat_template)
    dec = SpecEEDecoder(llm, head_path, None, n_threads)
    todo = [(i, pr) for i, pr in enumerate(prompts) if pr.id not in done]
    bar = tqdm(total=len(prompts), initial=len(prompts) - len(todo), desc="exit data", unit="prompt")
    try:
        for n, (i, pr) in enumerate(todo):
            tokens = chat.fit([{"role": "user", "content": pr.text}], 1024 - max_new - 8).tokens
            for step, (tok, rec, cands) in enumerate(dec.record(tokens, p.Sampling.greedy(max_new))):
                parts["rec"].append(rec[None, :-2].astype(np.float16))
                parts["draft_lp"].append(rec[None, -2].astype(np.float32))
                parts["vocab"].append(rec[None, -1, :4].astype(np.float32))
                parts["cands"].append(cands[None])
                parts["token"].append(np.array([tok], np.int32))
                parts["seq"].append(np.array([i], np.int32))
                if is_end_of_generation(llm, tok) or step + 1 >= max_new:
                    break
            dec.forget()
            done.add(pr.id)
            bar.update(1)
            if (n + 1) % 20 == 0 or n + 1 == len(todo):
                _save(path, parts, done)
    finally:
        bar.close()
        dec.close()
        llm.close()
    return load_data(work)


def _save(path: Path, parts: dict[str, list[np.ndarray]], done: set[str]) -> None:
    tmp = path.with_name("partial-" + path.name)
    arrays = {k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()}
    for k, v in arrays.items():
        parts[k] = [v]
    with open(tmp, "wb") as f:
        np.savez(f, done=np.array(json.dumps(sorted(done))), **arrays)  # type: ignore[arg-type]  # numpy's stub: **arrays could name allow_pickle
    tmp.replace(path)


def load_data(work: Path) -> ExitData:
    path = work / DATA_FILE
    try:
        with np.load(path) as z:
            return ExitData(z["rec"].astype(np.float32), z["draft_lp"], z["vocab"], z["cands"], z["token"], z["seq"])
    except (ValueError, KeyError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path} is damaged ({err}): remove it and record again with `specee train exits`") from err


# ---- training -----------------------------------------------------------------------------


def train_mlps(x: np.ndarray, y: np.ndarray, hidden: int = 64, epochs: int = 30, seed: int = 0) -> list[LayerPredictor]:
    """One MLP per layer, trained together as a batched model. x [steps, L, F], y [steps, L].
    Feature scaling is folded into the first layer so the engine sees raw features."""
    torch.manual_seed(seed)
    n, n_layer, nf = x.shape
    mean, std = x.mean(0), x.std(0) + 1e-4  # [L, F]
    xt = torch.from_numpy((x - mean) / std).float()
    yt = torch.from_numpy(y.astype(np.float32))
    w1 = torch.nn.Parameter(torch.randn(n_layer, hidden, nf) * (2.0 / nf) ** 0.5)
    b1 = torch.nn.Parameter(torch.zeros(n_layer, hidden))
    w2 = torch.nn.Parameter(torch.randn(n_layer, hidden) * (1.0 / hidden) ** 0.5)
    b2 = torch.nn.Parameter(torch.zeros(n_layer))
    opt = torch.optim.Adam([w1, b1, w2, b2], lr=3e-3)
    batch = 512
    for _epoch in range(epochs):
        perm = torch.randperm(n)
        for s in range(0, n, batch):
            idx = perm[s : s + batch]
            h = torch.relu(torch.einsum("blf,lhf->blh", xt[idx], w1) + b1)
            z = (h * w2).sum(-1) + b2
            loss = torch.nn.functional.binary_cross_entropy_with_logits(z, yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    out = []
    with torch.no_grad():
        for layer in range(n_layer):
            sd = torch.from_numpy(std[layer]).float()
            mu = torch.from_numpy(mean[layer]).float()
            w = w1[layer] / sd  # [H, F]
            b = b1[layer] - (w * mu).sum(-1)
            out.append(LayerPredictor(w.numpy().copy(), b.numpy().copy(), w2[layer].numpy().copy(), float(b2[layer]), 0.0))
    return out


def predictor_logits(preds: list[LayerPredictor], x: np.ndarray) -> np.ndarray:
    """[steps, L] logits z, computed exactly as the engine does (float32)."""
    z = np.empty(x.shape[:2], np.float32)
    for layer, pr in enumerate(preds):
        h = np.maximum(x[:, layer] @ pr.w1.T + pr.b1, 0.0)
        z[:, layer] = h @ pr.w2 + pr.b2
    return z


def fit_vocab_head(f: np.ndarray, y: np.ndarray, epochs: int = 300) -> tuple[np.ndarray, float]:
    """Logistic regression on the draft-vocabulary head's 3 features (standardized, folded back)."""
    mean, std = f.mean(0), f.std(0) + 1e-4
    xt = torch.from_numpy((f - mean) / std).float()
    yt = torch.from_numpy(y.astype(np.float32))
    w = torch.zeros(f.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=0.05)
    for _ in range(epochs):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(xt @ w + b, yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    wn = w.detach().numpy() / std
    return wn.astype(np.float32), float(b.detach().numpy()[0] - (wn * mean).sum())


def heldout_steps(seq: np.ndarray, frac: float = 0.3) -> np.ndarray:
    """[steps] bool: the steps of a seeded share of the prompts, held out for calibration."""
    seqs = np.unique(seq)
    held = np.random.default_rng(0).choice(seqs, size=max(1, int(len(seqs) * frac)), replace=False)
    return np.isin(seq, held)


def exit_prompts(prompts_file: Path, first_prompt: int = 0, n_prompts: int = 0) -> list[BenchPrompt]:
    """The prompts a recording was made on, in its order (its `seq` indexes them): shuffled as the
    EAGLE trainer does, so first_prompt can skip the ones the head was trained on."""
    return mixed_prompts(prompts_file, 0)[first_prompt : first_prompt + n_prompts if n_prompts else None]


def fit_predictors(
    data: ExitData,
    target_sha: str,
    precision: float = 0.995,
    hidden: int = 64,
    epochs: int = 30,
    head_cost: float = 5.0,
    check_cost: float = CHECK_COST_LAYERS,
    heldout_frac: float = 0.3,
    n_cand: int = 0,
    vocab_precision: float = 0.99,
    vocab_size: int = 49152,
    n_dv: int = 4096,
    max_skip: int = MAX_SKIP_LAYERS,
    draft_cost: float = 0.0,
) -> tuple[ExitPredictors, dict]:
    """n_cand > 0 keeps only the head's first n_cand candidates of the recording (they are stored
    in the head's rank order), so one recording serves every candidate count. Exits skip at most
    max_skip layers (MAX_SKIP_LAYERS). draft_cost > 0, the EAGLE head's own step in layers: where
    the shortlist's exits alone cost less per token than the layer checks with the head running
    for their candidates, the predictors keep no layer, and the engine runs no head."""
    t0 = time.monotonic()
    if n_cand:
        data = ExitData(
            data.rec[:, :, :n_cand], data.draft_lp[:, :n_cand], data.vocab, data.cands[:, :n_cand], data.token, data.seq
        )
    n_layer, k = data.rec.shape[1], data.rec.shape[2]
    x, y = features(data.rec, data.draft_lp), data.labels
    is_held = heldout_steps(data.seq, heldout_frac)
    preds = train_mlps(x[~is_held], y[~is_held], hidden=hidden, epochs=epochs)
    z_cal = predictor_logits(preds, x[is_held])
    thr = calibrate(z_cal, y[is_held], precision, first_layer=max(0, n_layer - 1 - max_skip))
    schedule = choose_schedule(z_cal, y[is_held], thr, n_layer, head_cost, check_cost)
    sim = simulate(z_cal, y[is_held], thr, schedule, n_layer)
    out = ExitPredictors(k, n_layer, target_sha)
    # After the last layer: the draft-vocabulary head instead of the full one, when sure.
    vf, vy = data.vocab[:, :3], data.vocab[:, 3].astype(np.int64) == data.token
    vocab_metrics: dict = {}
    if data.vocab[:, 0].any():
        vw, vb = fit_vocab_head(vf[~is_held], vy[~is_held])
        running = np.ones(is_held.sum(), bool)
        for layer in schedule:
            running &= ~(z_cal[:, layer] > thr[layer])
        zv = vf[is_held] @ vw + vb
        vthr = calibrate(zv[running, None], vy[is_held][running, None], vocab_precision)[0]
        hit = zv[running] > vthr if np.isfinite(vthr) else np.zeros(running.sum(), bool)
        # It runs on every step that reaches the end and saves the full head only where it fires.
        vocab_cost = head_cost * n_dv / vocab_size
        gain = float(hit.mean()) * (head_cost - vocab_cost) - vocab_cost if hit.size else 0.0
        vocab_metrics = {
            "draft_vocab_covers_full_argmax": round(float(vy.mean()), 4),
            "vocab_head_would_fire": round(float(hit.mean()) if hit.size else 0.0, 4),
            "vocab_head_gain_layers_per_token": round(gain, 3),
        }
        if gain > 0:
            out.vocab_head = ([float(v) for v in vw], vb, float(vthr))
            vocab_metrics["vocab_head_precision"] = round(float(vy[is_held][running][hit].mean()), 4)
        if draft_cost > 0:
            # the shortlist alone, calibrated on every held-out step: no candidates, so no head
            zall, yall = vf[is_held] @ vw + vb, vy[is_held]
            athr = calibrate(zall[:, None], yall[:, None], vocab_precision)[0]
            fire = zall > athr if np.isfinite(athr) else np.zeros(len(zall), bool)
            alone = n_layer + vocab_cost + (1.0 - float(fire.mean())) * head_cost
            with_head = step_cost(z_cal, y[is_held], thr, schedule, n_layer, head_cost, check_cost) + draft_cost
            if out.vocab_head is not None:
                with_head -= gain
            vocab_metrics |= {
                "shortlist_alone_exit_rate": round(float(fire.mean()), 4),
                "shortlist_alone_precision": round(float(yall[fire].mean()), 4) if fire.any() else 1.0,
                "cost_layers_shortlist_alone": round(alone, 3),
                "cost_layers_with_head": round(with_head, 3),
                "draft_cost_layers": round(draft_cost, 3),
            }
            if fire.any() and alone < with_head:
                schedule = []
                sim = simulate(z_cal, y[is_held], thr, schedule, n_layer)
                out.vocab_head = ([float(v) for v in vw], vb, float(athr))
                vocab_metrics["vocab_head_precision"] = vocab_metrics["shortlist_alone_precision"]
    for layer in schedule:
        pr = preds[layer]
        pr.threshold = float(thr[layer])
        out.layers[layer] = pr
    in_cands = (data.cands == data.token[:, None]).any(-1)
    first_settled = np.where(y.any(1), y.argmax(1), n_layer)
    metrics = {
        "steps": len(data.token),
        "heldout_steps": int(is_held.sum()),
        "candidate_hit_rate": round(float(in_cands.mean()), 4),
        "oracle_mean_layers": round(float(np.where(y.any(1), first_settled + 1, n_layer).mean()), 2),
        "schedule": schedule,
        "heldout_exit_rate": round(sim["exit_rate"], 4),
        "heldout_precision": round(sim["precision"], 4),
        "heldout_mean_layers": round(sim["mean_layers"], 2),
        "heldout_exit_hist": sim["exit_hist"],  # steps ending after layer L; [n_layer] = full depth
        **vocab_metrics,
        "precision_target": precision,
        "max_skip": max_skip,
        "hidden": hidden,
        "epochs": epochs,
        "fit_wall_s": round(time.monotonic() - t0, 1),
    }
    out.metadata = metrics
    return out, metrics


def head_cost_in_layers(model: Path) -> float:
    """The full lm_head's cost in units of one layer: the bytes each reads per token (decode is
    bound by weight reads on models of a billion parameters or more): 6.8 for Qwen2.5-Coder-1.5B. Small
    models are not bandwidth-bound: by bytes SmolLM2-135M's head is 13.6 layers, by time ~3.7."""
    per_layer, head = _layer_and_head_bytes(model)
    return head / per_layer


def _layer_and_head_bytes(model: Path) -> tuple[float, int]:
    """A layer's weight bytes (the mean over layers) and the lm_head's (the tied embedding's if none)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(model))
    layer_bytes: dict[int, int] = {}
    head = embd = 0
    for t in reader.tensors:
        if t.name.startswith("blk."):
            lid = int(t.name.split(".")[1])
            layer_bytes[lid] = layer_bytes.get(lid, 0) + int(t.n_bytes)
        elif t.name == "output.weight":
            head = int(t.n_bytes)
        elif t.name == "token_embd.weight":
            embd = int(t.n_bytes)
    return sum(layer_bytes.values()) / max(1, len(layer_bytes)), head or embd


def write_manifest_entry(manifest_path: Path, entry: dict) -> None:
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest["exits"] = entry
    write_text_atomic(manifest_path, json.dumps(manifest, indent=1))


def train_exits(
    model: Path,
    head: Path,
    out: Path,
    prompts_file: Path,
    first_prompt: int = 0,
    n_prompts: int = 0,
    max_new: int = 96,
    precision: float = 0.995,
    work: Path | None = None,
    n_threads: int = 0,
    epochs: int = 30,
    check_cost: float = CHECK_COST_LAYERS,
    max_skip: int = MAX_SKIP_LAYERS,
) -> dict:
    """Data from the engine + per-layer MLPs + thresholds + schedule -> out (GGUF) and the
    `exits` entry of manifest.json beside it; the prompts are `exit_prompts`."""
    import shlex

    from engine.hardware import physical_cores
    from engine.models.acceleration import check_eagle_head, model_sha256
    from engine.models.exit_predictors import save_predictors
    from engine.paths import cache_dir

    check_eagle_head(head, model)
    sha = model_sha256(model)
    work = work or cache_dir() / "train" / f"exits-{sha[:16]}"
    prompts = exit_prompts(prompts_file, first_prompt, n_prompts)
    t0 = time.monotonic()
    data = collect(model, head, prompts, work, max_new, n_threads or physical_cores())
    t_data = time.monotonic() - t0
    from gguf import GGUFReader

    d2t = [t for t in GGUFReader(str(head)).tensors if t.name == "d2t"]
    n_dv = int(d2t[0].data.shape[0]) if d2t else 0
    vocab_size = len(GGUFReader(str(model)).fields["tokenizer.ggml.tokens"].data)
    # the EAGLE head's own step, in layers by the bytes it reads (as head_cost_in_layers)
    draft_cost = head.stat().st_size / _layer_and_head_bytes(model)[0]
    preds, metrics = fit_predictors(
        data,
        sha,
        precision=precision,
        epochs=epochs,
        n_dv=n_dv + SHORTLIST_CTX_ROWS,  # every shortlist row is multiplied, used or not
        vocab_size=vocab_size,
        vocab_precision=precision,
        head_cost=head_cost_in_layers(model),
        check_cost=check_cost,
        max_skip=max_skip,
        draft_cost=draft_cost,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    save_predictors(preds, out)
    entry = {
        "file": out.name,
        "draft_bytes": head.stat().st_size,
        "head_cost_layers": round(head_cost_in_layers(model), 2),  # what drafting the candidates reads per token (planner)
        "check_cost_layers": check_cost,
        "n_cand": preds.n_cand,
        "head": head.name,
        "prompts": len(prompts),
        "data_wall_s": round(t_data, 1),
        **metrics,
        "command": "specee " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
    }
    write_manifest_entry(out.parent / "manifest.json", entry)
    return entry
