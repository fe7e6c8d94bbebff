"""Train an EAGLE-3 head on teacher data (engine/train/dataset.py): draft vocabulary, training-time
test, checkpoints with resume, and the hit-rate / acceptance evaluation."""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGML_QUANT_SIZES, GGUFReader
from gguf.quants import dequantize
from tqdm import tqdm

from engine.train.dataset import iter_shards, read_manifest
from engine.train.eagle_export import MATRIX_TYPE
from engine.train.eagle_head import EagleHead, HeadConfig

STEP_WEIGHT = 0.8  # loss weight decays per unrolled step, as in EAGLE-3
PROMPT_ROW_WEIGHT = 0.2
CHECKPOINT_EVERY_S = 600.0  # within an epoch too: an epoch of 10x today's data is ~40 min on 2 cores
DTYPES = ("auto", "bf16", "fp32")  # training_dtype's names


@dataclass
class Batch:
    features: torch.Tensor  # [B, L, 3T] float32
    tokens: torch.Tensor  # [B, L] long
    top: torch.Tensor  # [B, L, 4] long: target top-4 next tokens at each position
    valid: torch.Tensor  # [B, L] bool
    n_prompt: torch.Tensor  # [B] long: prompt length; later positions are the target's own answer


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512_BF16 or AMX). There a training batch
    under bf16 autocast takes ~0.6x the time of fp32 (an EAGLE head for SmolLM2-135M, 1k tokens, on
    an AMD EPYC with AVX512_BF16); elsewhere bf16 is emulated and slower than fp32."""
    cpu = getattr(torch, "cpu", None)
    try:
        return bool(cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported())  # type: ignore[union-attr]
    except AttributeError:
        return False


def training_dtype(name: str) -> torch.dtype:
    """The matmuls' dtype in training: "auto" is bf16 where the CPU has it natively (the weights, the
    optimizer and the evaluation stay fp32 either way), else fp32."""
    if name not in DTYPES:
        raise ValueError(f"the training dtype must be one of {', '.join(DTYPES)}, not {name!r}")
    if name == "auto":
        return torch.bfloat16 if native_bf16() else torch.float32
    return torch.bfloat16 if name == "bf16" else torch.float32


def target_tensors(model_path: str) -> dict[str, np.ndarray]:
    """The target weights the head shares or starts from, dequantised like llama.cpp does."""
    reader = GGUFReader(model_path)
    out = {}
    for t in reader.tensors:
        if t.name in ("token_embd.weight", "output_norm.weight", "output.weight"):
            shape = [int(x) for x in reversed(t.shape)]  # ggml ne order -> numpy row-major
            out[t.name] = dequantize(t.data, t.tensor_type).reshape(shape)
    return out


def head_config(model_path: str, layers: list[int], draft_vocab: int, n_ff: int = 0) -> HeadConfig:
    """The head's shape from the target's hyper-parameters: the same width, heads, RoPE base and norm
    epsilon as the target. `n_ff` = 0 takes the target's feed-forward size; a smaller one trades a
    little acceptance for a head that trains in hours rather than days on a CPU."""
    fields = GGUFReader(model_path).fields
    arch = str(fields["general.architecture"].contents())

    def get(key: str, default: float | None = None) -> float:
        field = fields.get(f"{arch}.{key}")
        if field is None:
            if default is None:
                raise ValueError(f"{Path(model_path).name} lacks {arch}.{key}")
            return default
        return field.contents()

    n_embd = int(get("embedding_length"))
    n_head = int(get("attention.head_count"))
    return HeadConfig(
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(get("attention.head_count_kv", n_head)),
        n_ff=n_ff or int(get("feed_forward_length")),
        target_hidden=n_embd,
        draft_vocab=draft_vocab,
        rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_base=float(get("rope.freq_base", 10000.0)),
        layers=tuple(layers),  # type: ignore[arg-type]
    )


DRAFT_VOCAB_SIZES = (2048, 4096, 8192, 16384)
MAX_HEAD_BYTES = 50_000_000  # shipped files stay under 50 MB
_BLOCK, _BLOCK_BYTES = GGML_QUANT_SIZES[MATRIX_TYPE]
MATRIX_BYTES_PER_WEIGHT = _BLOCK_BYTES / _BLOCK  # as the export stores the matrices


def tokenizer_bytes(model_path: str) -> int:
    """What the target's tokenizer adds to the head's file (the export copies it)."""
    fields = GGUFReader(model_path).fields
    return sum(sum(part.nbytes for part in f.parts) for key, f in fields.items() if key.startswith("tokenizer."))


def head_bytes(cfg: HeadConfig) -> int:
    """The exported GGUF's matrices (add tokenizer_bytes for the file)."""
    e, hd = cfg.n_embd, cfg.n_embd // cfg.n_head
    weights = 3 * cfg.target_hidden * e + 2 * e * (cfg.n_head + 2 * cfg.n_head_kv) * hd + cfg.n_head * hd * e
    weights += 3 * e * cfg.n_ff + cfg.draft_vocab * e
    return int(weights * MATRIX_BYTES_PER_WEIGHT)


def measure_draft_vocab(
    seqs: list, held_out: list, n_vocab: int, tolerance: float = 0.01, sizes: tuple[int, ...] = DRAFT_VOCAB_SIZES
) -> tuple[int, dict[int, float]]:
    """The smallest draft vocabulary whose held-out coverage of the target's next token is within
    `tolerance` of the largest candidate's: each doubling costs head bytes on every draft step."""
    held = held_out or seqs
    table = {}
    for size in sizes:
        ids, _ = choose_draft_vocab(seqs, size, n_vocab)
        member = np.zeros(n_vocab, dtype=bool)
        member[ids] = True
        tops = np.concatenate([top[:, 0] for _f, _t, top, _n in held])
        table[size] = float(member[tops].mean())
    best = max(table.values())
    return next(size for size in sizes if table[size] >= best - tolerance), table


def load_sequences(folder: Path) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    seqs = []
    for shard in iter_shards(folder):
        for start, length, n_prompt in shard.seqs:
            sl = slice(int(start), int(start + length))
            seqs.append((np.asarray(shard.features[sl]), np.asarray(shard.tokens[sl]), np.asarray(shard.top[sl]), int(n_prompt)))
    return seqs


def choose_draft_vocab(seqs: list, size: int, n_vocab: int) -> tuple[np.ndarray, float]:
    """The `size` target tokens the target predicts most often (absolute ids, sorted) and their coverage."""
    counts = np.zeros(n_vocab, dtype=np.int64)
    for _f, _t, top, _n in seqs:
        np.add.at(counts, top[:, 0], 1)
    ids = np.sort(np.argsort(-counts, kind="stable")[:size])
    return ids, float(counts[ids].sum() / max(1, counts.sum()))


def training_run_key(seqs: list, draft_ids: np.ndarray, cfg: dict, steps: int, max_tokens: int, seed: int) -> str:
    """What a checkpoint must match to be resumed: the data (every sequence's tokens), the draft
    vocabulary, the head's shape and the batching. A run started on other data (more prompts
    answered since, say) would otherwise resume the old run's optimizer and epoch count."""
    h = hashlib.sha256(json.dumps([cfg, steps, max_tokens, seed], sort_keys=True).encode())
    h.update(np.ascontiguousarray(draft_ids, dtype=np.int64).tobytes())
    for _f, tokens, _top, _n in seqs:
        h.update(np.int64(len(tokens)).tobytes())
        h.update(np.ascontiguousarray(tokens, dtype=np.int64).tobytes())
    return h.hexdigest()


def make_batches(seqs: list, max_tokens: int, rng: random.Random) -> list[list[int]]:
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i][1]))
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order:
        n = len(seqs[i][1])
        if cur and max(longest, n) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(seqs: list, idx: list[int]) -> Batch:
    n = max(len(seqs[i][1]) for i in idx)
    b = len(idx)
    t_dim = seqs[idx[0]][0].shape[1] * seqs[idx[0]][0].shape[2]
    feats = torch.zeros(b, n, t_dim)
    toks = torch.zeros(b, n, dtype=torch.long)
    top = torch.zeros(b, n, 4, dtype=torch.long)
    valid = torch.zeros(b, n, dtype=torch.bool)
    n_prompt = torch.tensor([seqs[i][3] for i in idx], dtype=torch.long)
    for r, i in enumerate(idx):
        f, t, tp, _ = seqs[i]
        m = len(t)
        feats[r, :m] = torch.from_numpy(f.reshape(m, -1).astype(np.float32))
        toks[r, :m] = torch.from_numpy(t.astype(np.int64))
        top[r, :m] = torch.from_numpy(tp.astype(np.int64))
        valid[r, :m] = True
    return Batch(feats, toks, top, valid, n_prompt)


def step_targets(batch: Batch, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Labels for unrolled step k at row P: the target's top-1 after position P+k; the rows where
    that exists (inside the sequence); and the rows that predict answer tokens (what decoding
    needs: the prediction after the last prompt position onwards)."""
    lengths = batch.valid.sum(1, keepdim=True)
    pos = torch.arange(batch.valid.shape[1]).expand_as(batch.valid)
    ok = pos + step < lengths
    answer = ok & (pos + step >= batch.n_prompt[:, None] - 1)
    target = torch.roll(batch.top[..., 0], -step, dims=1)
    return target, ok, answer


def loss_fn(outs: list[torch.Tensor], batch: Batch, t2d: torch.Tensor) -> torch.Tensor:
    total, norm = torch.zeros(()), 0.0
    for k, logits in enumerate(outs, start=1):
        target, ok, answer = step_targets(batch, k)
        d = t2d[target]
        mask = ok & (d >= 0)
        if mask.any():
            w = STEP_WEIGHT ** (k - 1)
            # Prompt rows teach context but decoding only ever drafts answer tokens.
            row_w = torch.where(answer, 1.0, PROMPT_ROW_WEIGHT)[mask]
            ce = F.cross_entropy(logits[mask], d[mask], reduction="none")
            total = total + w * (ce * row_w).sum() / row_w.sum()
            norm += w
    return total / max(norm, 1e-9)


@torch.no_grad()
def evaluate(head: EagleHead, seqs: list, steps: int, t2d: torch.Tensor, max_tokens: int = 4096) -> dict:
    """Step-1 top-1 / top-4 hit rates (draft's best guesses vs the target's next token) and the
    expected accepted drafts per target step for a greedy chain of `steps` drafts."""
    head.eval()
    hits1 = hits4 = rows = 0
    accepted_sum, chains = 0.0, 0
    d2t = head.d2t
    for idx in make_batches(seqs, max_tokens, random.Random(0)):
        batch = collate(seqs, idx)
        outs = head.unrolled(batch.features, batch.tokens, batch.valid, steps)
        correct = []
        for k, logits in enumerate(outs, start=1):
            target, _, ok = step_targets(batch, k)  # answer rows: what decoding drafts
            top4 = d2t[logits.topk(4, dim=-1).indices]  # [B, L, 4] target ids
            hit1 = top4[..., 0] == target
            if k == 1:
                hits1 += int((hit1 & ok).sum())
                hits4 += int(((top4 == target[..., None]).any(-1) & ok).sum())
                rows += int(ok.sum())
                base_ok = ok
            correct.append(hit1 & ok)
        run = torch.ones_like(correct[0])
        acc = torch.zeros(correct[0].shape)
        for c in correct:
            run = run & c
            acc += run.float()
        accepted_sum += float(acc[base_ok].sum())
        chains += int(base_ok.sum())
    head.train()
    return {
        "top1": hits1 / max(rows, 1),
        "top4": hits4 / max(rows, 1),
        "accepted_per_step": accepted_sum / max(chains, 1),
        "acceptance_length": 1 + accepted_sum / max(chains, 1),
        "rows": rows,
    }


def train_head(
    model_path: str,
    data_dir: Path,
    out_dir: Path,
    eval_dir: Path | None = None,
    epochs: int = 8,
    draft_vocab: int = 4096,
    steps: int = 3,
    lr: float = 1e-3,
    max_tokens: int = 1024,
    seed: int = 0,
    time_budget_s: float = 0.0,
    n_ff: int = 0,
    train_dtype: str = "auto",
) -> dict:
    """`draft_vocab` = 0 sizes the draft vocabulary by measurement (measure_draft_vocab); `train_dtype`:
    training_dtype's."""
    dtype = training_dtype(train_dtype)
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(data_dir)
    seqs = load_sequences(data_dir)
    eval_seqs = load_sequences(eval_dir) if eval_dir else []
    weights = target_tensors(model_path)
    embed = torch.from_numpy(weights["token_embd.weight"].astype(np.float32))
    n_vocab = embed.shape[0]
    vocab_table: dict[int, float] = {}
    if not draft_vocab:
        shape = head_config(model_path, manifest["layers"], 0, n_ff)
        budget = MAX_HEAD_BYTES - tokenizer_bytes(model_path)
        fits = tuple(v for v in DRAFT_VOCAB_SIZES if head_bytes(replace(shape, draft_vocab=v)) <= budget)
        draft_vocab, vocab_table = measure_draft_vocab(seqs, eval_seqs, n_vocab, sizes=fits or DRAFT_VOCAB_SIZES[:1])
        print(f"draft vocabulary {draft_vocab} (held-out coverage by size: {vocab_table})")
    ids, coverage = choose_draft_vocab(seqs, draft_vocab, n_vocab)
    cfg = head_config(model_path, manifest["layers"], len(ids), n_ff)
    head = EagleHead(cfg, embed)
    head.d2t.copy_(torch.from_numpy(ids))
    t2d = torch.full((n_vocab,), -1, dtype=torch.long)
    t2d[head.d2t] = torch.arange(len(ids))
    with torch.no_grad():  # the target's own output head (tied embeddings) restricted to the draft vocab
        out_w = torch.from_numpy(weights.get("output.weight", weights["token_embd.weight"]).astype(np.float32))
        head.lm_head.weight.copy_(out_w[head.d2t])
        head.output_norm.weight.copy_(torch.from_numpy(weights["output_norm.weight"].astype(np.float32)))
        # Start with g = the highest feature layer and small block outputs, so the untrained head is
        # already an early exit of the target (a sane logit scale) rather than noise.
        t_dim = cfg.target_hidden
        head.fc.weight.zero_()
        head.fc.weight[:, 2 * t_dim : 3 * t_dim].copy_(torch.eye(cfg.n_embd, t_dim))
        head.wo.weight.mul_(0.1)
        head.down.weight.mul_(0.1)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    ckpt_path = out_dir / "checkpoint.pt"
    start_epoch, start_batch, history, elapsed, losses = 0, 0, [], 0.0, []
    best_score, best_state, best_epoch = -1.0, None, 0
    run_key = training_run_key(seqs, ids, cfg.as_dict(), steps, max_tokens, seed)
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=False)
        if ckpt.get("run_key", run_key) != run_key:  # a run on other data or of another shape
            stale = ckpt_path.with_name(f"stale-{ckpt_path.name}")
            ckpt_path.replace(stale)
            print(f"{ckpt_path} is from a run on other data or of another head shape: set aside as {stale.name}; "
                  "training starts over")  # fmt: skip
    if ckpt_path.exists():
        head.load_state_dict(ckpt["head"], strict=False)
        opt.load_state_dict(ckpt["opt"])
        start_epoch, history, elapsed = ckpt["epoch"], ckpt["history"], ckpt.get("elapsed", 0.0)
        start_batch, losses = ckpt.get("batch", 0), ckpt.get("losses", [])
        best_score, best_state, best_epoch = ckpt.get("best_score", -1.0), ckpt.get("best"), ckpt.get("best_epoch", 0)
        print(f"resumed from {ckpt_path} at epoch {start_epoch + 1}, batch {start_batch}")
    per_epoch = len(make_batches(seqs, max_tokens, random.Random(0)))
    total_batches, done_batches = epochs * per_epoch, start_epoch * per_epoch + start_batch
    t_start = time.monotonic() - elapsed

    def checkpoint(epoch: int, batch: int) -> None:
        """Where training stands: a run stopped at any point resumes here (epoch done, batches of
        the next one done), with its best head so far."""
        tmp = ckpt_path.with_suffix(".tmp")
        torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "batch": batch, "losses": losses,
                    "history": history, "elapsed": time.monotonic() - t_start, "cfg": cfg.as_dict(), "d2t": head.d2t,
                    "best": best_state, "best_score": best_score, "best_epoch": best_epoch,
                    "epochs": epochs, "per_epoch": per_epoch, "run_key": run_key}, tmp)  # fmt: skip
        tmp.replace(ckpt_path)

    for epoch in range(start_epoch, epochs):
        # each epoch's order from its own seed: a resumed epoch takes the batches it had
        batches = make_batches(seqs, max_tokens, random.Random(seed * 100_003 + epoch))
        first = start_batch if epoch == start_epoch else 0
        bar = tqdm(desc=f"epoch {epoch + 1}/{epochs}", unit="batch", initial=first, total=len(batches))
        if first == 0:
            losses = []
        saved_at = time.monotonic()
        for i, idx in enumerate(batches[first:], start=first):
            frac = done_batches / max(1, total_batches)
            for group in opt.param_groups:  # warm-up then cosine
                group["lr"] = lr * min(1.0, (done_batches + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
            batch = collate(seqs, idx)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
                loss = loss_fn(head.unrolled(batch.features, batch.tokens, batch.valid, steps), batch, t2d)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            done_batches += 1
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
            if time.monotonic() - saved_at >= CHECKPOINT_EVERY_S and i + 1 < len(batches):
                checkpoint(epoch, i + 1)
                saved_at = time.monotonic()
        bar.close()
        entry: dict[str, Any] = {"epoch": epoch + 1, "loss": float(np.mean(losses)), "elapsed_s": time.monotonic() - t_start}
        if eval_seqs:
            entry["eval"] = evaluate(head, eval_seqs, steps, t2d)
            print(json.dumps(entry))
            if entry["eval"]["accepted_per_step"] > best_score:  # early stopping: the head overfits small data
                best_score = entry["eval"]["accepted_per_step"]
                best_state = {k: v.detach().clone() for k, v in head.state_dict().items()}
                best_epoch = epoch + 1
        history.append(entry)
        checkpoint(epoch + 1, 0)
        if time_budget_s and time.monotonic() - t_start > time_budget_s:
            print(f"time budget of {time_budget_s:.0f}s reached after epoch {epoch + 1}")
            break
    if best_state is not None:
        head.load_state_dict(best_state)
    return {
        "best_epoch": best_epoch,
        "head": head,
        "cfg": cfg,
        "coverage": coverage,
        "draft_vocab_heldout_coverage": vocab_table,
        "history": history,
        "train_tokens": int(sum(len(s[1]) for s in seqs)),
        "train_seqs": len(seqs),
        "dtype": str(dtype).removeprefix("torch."),
        "wall_s": time.monotonic() - t_start,
    }
