"""The EAGLE-3 draft head in PyTorch, shaped exactly like llama.cpp's `eagle3` graph
(src/models/eagle3.cpp) so the trained weights export without conversion:

  g      = fc([f_low | f_mid | f_high])                     per position, from the target's layer inputs
  x      = [rmsnorm(embed(token)) * attn_norm | rmsnorm(g) * attn_norm_2]
  h      = attn(x) + g ;  h2 = h + mlp(rmsnorm(h) * ffn_norm)
  logits = lm_head(rmsnorm(h2) * output_norm)               over the reduced draft vocabulary (d2t)

RoPE rotates adjacent pairs (llama.cpp's NORM mode), so q/k need no permutation at export. The
token embedding is the target's own (frozen; llama.cpp borrows it through ctx_other).
Trained with training-time test: step k feeds step k-1's h2 back as g, with keys from the
ground-truth rows (step 1) up to the row's position plus the row's own chain, as at inference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class HeadConfig:
    n_embd: int = 576
    n_head: int = 9
    n_head_kv: int = 3
    n_ff: int = 1536
    target_hidden: int = 576
    draft_vocab: int = 4096
    rms_eps: float = 1e-5
    rope_base: float = 100000.0
    layers: tuple[int, int, int] = (2, 15, 27)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["layers"] = list(self.layers)
        return d


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_adjacent(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """x [B, H, L, D], pos [B, L]: rotate pairs (2i, 2i+1), llama.cpp's LLAMA_ROPE_TYPE_NORM."""
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)  # [D/2]
    ang = pos.to(torch.float32)[:, None, :, None] * inv  # [B, 1, L, D/2]
    cos, sin = ang.cos(), ang.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class EagleHead(nn.Module):
    def __init__(self, cfg: HeadConfig, target_embed: torch.Tensor) -> None:
        super().__init__()
        self.cfg = cfg
        e, hd = cfg.n_embd, cfg.n_embd // cfg.n_head
        self.head_dim = hd
        self.register_buffer("embed", target_embed.float(), persistent=False)  # [V, E], frozen
        self.fc = nn.Linear(3 * cfg.target_hidden, e, bias=False)
        self.attn_norm = RMSNorm(e, cfg.rms_eps)  # on the token embedding
        self.attn_norm_2 = RMSNorm(e, cfg.rms_eps)  # on g
        self.wq = nn.Linear(2 * e, cfg.n_head * hd, bias=False)
        self.wk = nn.Linear(2 * e, cfg.n_head_kv * hd, bias=False)
        self.wv = nn.Linear(2 * e, cfg.n_head_kv * hd, bias=False)
        self.wo = nn.Linear(cfg.n_head * hd, e, bias=False)
        self.ffn_norm = RMSNorm(e, cfg.rms_eps)
        self.gate = nn.Linear(e, cfg.n_ff, bias=False)
        self.up = nn.Linear(e, cfg.n_ff, bias=False)
        self.down = nn.Linear(cfg.n_ff, e, bias=False)
        self.output_norm = RMSNorm(e, cfg.rms_eps)
        self.lm_head = nn.Linear(e, cfg.draft_vocab, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab, dtype=torch.long))

    def _qkv(self, tokens: torch.Tensor, g: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, _ = g.shape
        x = torch.cat([self.attn_norm(self.embed[tokens]), self.attn_norm_2(g)], dim=-1)
        q = self.wq(x).view(b, n, self.cfg.n_head, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, n, self.cfg.n_head_kv, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, n, self.cfg.n_head_kv, self.head_dim).transpose(1, 2)
        rep = self.cfg.n_head // self.cfg.n_head_kv
        k = rope_adjacent(k, pos, self.cfg.rope_base).repeat_interleave(rep, dim=1)
        q = rope_adjacent(q, pos, self.cfg.rope_base)
        return q, k, v.repeat_interleave(rep, dim=1)

    def _finish(self, attn: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        b, _, n, _ = attn.shape
        h = self.wo(attn.transpose(1, 2).reshape(b, n, -1)) + g
        hn = self.ffn_norm(h)
        return h + self.down(F.silu(self.gate(hn)) * self.up(hn))

    def logits(self, h2: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.output_norm(h2))

    def unrolled(self, features: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Training-time test. features [B, L, 3T], tokens [B, L] (padded), valid [B, L] bool.
        Returns per step k (1-based) the draft logits at rows P, predicting the target's token after
        position P+k; rows whose inputs leave the sequence are garbage and masked by the caller."""
        b, n, _ = features.shape
        scale = self.head_dim**-0.5
        pos = torch.arange(n, device=features.device).expand(b, n)
        g = self.fc(features)
        # step 1: row P = (token x[P+1], g[P]) at position P, causal over the sequence
        tok1 = torch.roll(tokens, -1, dims=1)
        q, k1, v1 = self._qkv(tok1, g, pos)
        causal = torch.ones(n, n, dtype=torch.bool, device=g.device).tril()
        key_ok = causal[None, None] & valid[:, None, None, :]
        base_scores = None
        s1 = (q @ k1.transpose(-1, -2)) * scale
        s1 = s1.masked_fill(~key_ok, float("-inf"))
        h = self._finish(torch.softmax(s1, dim=-1) @ v1, g)
        outs = [self.logits(h)]
        chain_k: list[torch.Tensor] = []
        chain_v: list[torch.Tensor] = []
        for step in range(2, steps + 1):
            tok = torch.roll(tokens, -step, dims=1)
            q, kk, vv = self._qkv(tok, h, pos + step - 1)
            chain_k.append(kk)
            chain_v.append(vv)
            base_scores = (q @ k1.transpose(-1, -2)) * scale
            base_scores = base_scores.masked_fill(~key_ok, float("-inf"))
            diag = torch.stack([(q * ck).sum(-1) * scale for ck in chain_k], dim=-1)  # [B, H, L, step-1]
            probs = torch.softmax(torch.cat([base_scores, diag], dim=-1), dim=-1)
            attn = probs[..., :n] @ v1 + (probs[..., n:, None] * torch.stack(chain_v, dim=-2)).sum(-2)
            h = self._finish(attn, h)
            outs.append(self.logits(h))
        return outs
