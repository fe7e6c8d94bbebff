"""The target model as a teacher: greedy answers plus the hidden states EAGLE heads learn from.

One in-process llama.cpp model with two contexts (our native build). Greedy answers are generated
for several conversations at once, one row per sequence in each decode call (`sequences`): on a
2-core CPU a call of 16 rows costs ~7x one row (the default model: 103 vs 15 ms), so batching more
than doubles the teacher's throughput. The generation
context captures the three fused feature layers' inputs of every row it decodes, so each answer's
features come with it (the features of the very pass that chose each token), and the target's top-4
predictions from the same logits. `features` runs one prompt+answer through the other context as
a single batch: the reference the batched capture is tested against.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np
from llama_cpp import llama_cpp as C

from engine import native
from engine.hardware import physical_cores
from engine.llm.chat_prompt import ChatPrompt
from engine.llm.target import Target
from engine.models.gguf_file import inspect_gguf


def _sample(logits: np.ndarray, rng: np.random.Generator, temperature: float, top_p: float) -> int:
    """One token from softmax(logits / temperature) within its top_p nucleus."""
    top = np.argpartition(-logits, 256)[:256]  # the nucleus of a 0.95 top-p lies well inside
    z = logits[top].astype(np.float64) / max(temperature, 1e-6)
    order = np.argsort(-z)
    prob = np.exp(z[order] - z[order[0]])
    prob /= prob.sum()
    keep = int(np.searchsorted(np.cumsum(prob), top_p)) + 1
    return int(top[order[rng.choice(keep, p=prob[:keep] / prob[:keep].sum())]])


def _top4(logits: np.ndarray) -> np.ndarray:
    """[rows, 4] the four largest logits' token ids, best first."""
    top = np.argpartition(-logits, 4, axis=1)[:, :4]
    order = np.take_along_axis(logits, top, axis=1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(top, order, axis=1).astype(np.int32)


# Prompt rows per prefill call of the generation context; each row's logits are kept (for its top-4),
# so this bounds that buffer: 512 rows of a 152k vocabulary are 300 MB.
PREFILL_ROWS = 512


def default_feature_layers(n_layer: int) -> list[int]:
    """Low, middle and high layer inputs, as llama.cpp's EAGLE-3 converter chooses by default."""
    return [2, n_layer // 2, n_layer - 3]


@dataclass
class Sequence:
    tokens: np.ndarray  # int32 [n]: prompt + answer
    n_prompt: int
    features: np.ndarray  # float16 [n, 3, n_embd]: inputs of the feature layers at each position
    target_top: np.ndarray  # int32 [n, 4]: the target's top-4 next-token ids at each position


class Teacher:
    def __init__(self, model_path: str, layers: list[int] | None = None, n_ctx: int = 1024, n_threads: int = 0) -> None:
        self.lib = native.lib()
        self.llm = Target.load(model_path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=n_threads or physical_cores())
        self.n_ctx = n_ctx
        self.n_layer = self.llm.n_layer()
        self.n_embd = self.llm.n_embd()
        self.n_vocab = self.llm.n_vocab()
        self.layers = layers or default_feature_layers(self.n_layer)
        if len(self.layers) != 3 or not all(0 <= lid < self.n_layer for lid in self.layers):
            raise ValueError(f"need 3 feature layers in [0, {self.n_layer}), got {self.layers}")
        for lid in self.layers:
            self.lib.specee_capture_layer_input(self.llm.ctx, lid, True)
        self.prompt = ChatPrompt.for_model(self.llm, inspect_gguf(model_path).chat_template)

    def _generation_context(self, n_seq: int) -> Any:
        """A second context on the same weights with one KV stream per sequence, made once per size:
        llama.h's llama_context pointer, as Target.ctx (llama_cpp is read untyped)."""
        if getattr(self, "_gen_n_seq", 0) != n_seq:
            self.close_generation()
            params = C.llama_context_default_params()
            params.n_ctx = self.n_ctx * n_seq
            params.n_batch = max(self.n_ctx, 2048)
            params.n_ubatch = 512
            params.n_seq_max = n_seq
            params.kv_unified = False
            params.n_threads = params.n_threads_batch = self.llm.n_threads
            ctx = C.llama_init_from_model(self.llm.model, params)
            if not ctx:
                raise RuntimeError(f"could not create a {n_seq}-sequence generation context")
            for lid in self.layers:  # before its first decode: turning capture on re-reserves the scheduler
                self.lib.specee_capture_layer_input(ctx, lid, True)
            self._gen_ctx, self._gen_n_seq = ctx, n_seq
        return self._gen_ctx

    def close_generation(self) -> None:
        if getattr(self, "_gen_ctx", None):
            C.llama_free(self._gen_ctx)
        self._gen_ctx, self._gen_n_seq = None, 0

    def sequences(self, user_texts: list[str], max_new: int, n_seq: int = 16) -> list[Sequence]:
        """Each text's prompt + greedy answer with its features and top-4 predictions, `n_seq`
        conversations per decode call."""
        out: list[Sequence] = []
        for start in range(0, len(user_texts), n_seq):
            out += self._answer_group(user_texts[start : start + n_seq], max_new, n_seq)
        return out

    def _answer_group(self, texts: list[str], max_new: int, n_seq: int) -> list[Sequence]:
        budget = self.n_ctx - max_new - 1
        prompts = [self.prompt.fit([{"role": "user", "content": t}], budget).tokens for t in texts]
        ctx = self._generation_context(n_seq)
        C.llama_memory_clear(C.llama_get_memory(ctx), True)
        vocab = self.llm.vocab
        answers: list[list[int]] = [[] for _ in texts]
        feats = [np.empty((len(p) + max_new, 3, self.n_embd), np.float16) for p in prompts]
        top4 = [np.full((len(p) + max_new, 4), -1, np.int32) for p in prompts]  # answer rows: only the top one is known
        # Prefill every prompt (its own sequence), as many per call as PREFILL_ROWS allows (every row's logits: top-4)
        next_tok = [0] * len(texts)
        pending = list(range(len(texts)))
        while pending:
            group = [pending.pop(0)]
            size = len(prompts[group[0]])
            while pending and size + len(prompts[pending[0]]) <= PREFILL_ROWS:
                size += len(prompts[pending[0]])
                group.append(pending.pop(0))
            rows = [(tok, pos, i, True) for i in group for pos, tok in enumerate(prompts[i])]
            logits = self._decode_rows(ctx, rows)
            captured = self._captured(ctx, len(rows))
            r = 0
            for i in group:
                n = len(prompts[i])
                feats[i][:n] = captured[r : r + n]
                top4[i][:n] = _top4(logits[r : r + n])
                next_tok[i] = int(top4[i][n - 1, 0])
                r += n
        # Decode: a row per sequence and call; a sequence's last token is decoded too (its features
        # and top-4), then it leaves
        active = list(range(len(texts)))
        while active:
            for i in active:
                answers[i].append(next_tok[i])  # an end-of-turn token is a prediction too
            rows = [(next_tok[i], len(prompts[i]) + len(answers[i]) - 1, i, True) for i in active]
            logits = self._decode_rows(ctx, rows)
            captured = self._captured(ctx, len(rows))
            still = []
            for k, i in enumerate(active):
                pos = len(prompts[i]) + len(answers[i]) - 1
                feats[i][pos] = captured[k]
                if C.llama_vocab_is_eog(vocab, next_tok[i]) or len(answers[i]) >= max_new:
                    top4[i][pos] = _top4(logits[k : k + 1])[0]
                else:
                    next_tok[i] = int(np.argmax(logits[k]))
                    top4[i][pos, 0] = next_tok[i]
                    still.append(i)
            active = still
        out = []
        for i, prompt in enumerate(prompts):
            n = len(prompt) + len(answers[i])
            tokens = np.asarray(prompt + answers[i], dtype=np.int32)
            out.append(Sequence(tokens, len(prompt), feats[i][:n].copy(), top4[i][:n].copy()))
        return out

    def instructions(
        self, n: int, max_len: int, rng: np.random.Generator, temperature: float = 1.0, top_p: float = 0.95, n_seq: int = 16
    ) -> list[str]:
        """Questions the model writes itself: from the chat template's user-turn prefix, sampled
        until the turn ends (Magpie). A question still going at max_len tokens is dropped."""
        prefix = self.prompt.user_turn_prefix()
        vocab = self.llm.vocab
        out: list[str] = []
        for start in range(0, n, n_seq):
            k = min(n_seq, n - start)
            ctx = self._generation_context(n_seq)
            C.llama_memory_clear(C.llama_get_memory(ctx), True)
            rows = [(t, pos, i, pos == len(prefix) - 1) for i in range(k) for pos, t in enumerate(prefix)]
            logits = self._decode_rows(ctx, rows)
            texts: list[list[int]] = [[] for _ in range(k)]
            active = list(range(k))
            while active:
                still, rows = [], []
                for row, i in zip(logits, active, strict=True):
                    tok = _sample(row, rng, temperature, top_p)
                    if C.llama_vocab_is_eog(vocab, tok):
                        out.append(self.llm.detokenize(texts[i]).decode("utf-8", errors="replace"))
                    elif len(texts[i]) + 1 < max_len:
                        texts[i].append(tok)
                        still.append(i)
                        rows.append((tok, len(prefix) + len(texts[i]) - 1, i, True))
                active = still
                if rows:
                    logits = self._decode_rows(ctx, rows)
        return out

    def _decode_rows(self, ctx: ctypes.c_void_p, rows: list[tuple[int, int, int, bool]]) -> np.ndarray:
        """One decode call of (token, position, sequence, wants logits) rows; the logits of the rows
        that asked for them, in row order."""
        batch = C.llama_batch_init(len(rows), 0, 1)
        try:
            for r, (tok, pos, seq, want) in enumerate(rows):
                batch.token[r] = tok
                batch.pos[r] = pos
                batch.n_seq_id[r] = 1
                batch.seq_id[r][0] = seq
                batch.logits[r] = want
            batch.n_tokens = len(rows)
            rc = C.llama_decode(ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed with {rc}")
        finally:
            C.llama_batch_free(batch)
        n_out = sum(1 for r in rows if r[3])
        return np.ctypeslib.as_array(C.llama_get_logits(ctx), shape=(n_out, self.n_vocab)).copy()

    def _captured(self, ctx: ctypes.c_void_p, n_rows: int) -> np.ndarray:
        """[rows, 3, n_embd] float16: the feature layers' inputs of every row of the last decode call
        (llama.cpp puts them back in batch order)."""
        feats = np.empty((n_rows, 3, self.n_embd), np.float16)
        for j, lid in enumerate(self.layers):
            ptr = self.lib.specee_layer_input(ctx, lid)
            feats[:, j, :] = np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_embd))
        return feats

    def features(self, tokens: list[int], n_prompt: int) -> Sequence:
        """One batch through the target: per-position feature layers and top-4 predictions.
        `tokens` past n_prompt are the target's own greedy answer, so there the top prediction is
        the token it wrote next, known without the output layer (the trainers read only the top
        one; this pass's own arg max agrees on 98% of those rows, the generation context rounding
        a little otherwise). Logits are computed for the prompt's rows and the last row only: the
        default model's 49152-word output layer made this pass 243 tokens/s, now 329 (16 Magpie
        prompts, 3614 tokens; generation and this pass together 1.7 -> 1.45 s per prompt)."""
        n = len(tokens)
        assert n <= self.n_ctx
        self.llm.clear()
        batch = C.llama_batch_init(n, 0, 1)
        try:
            for i, tok in enumerate(tokens):
                batch.token[i] = tok
                batch.pos[i] = i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = i < n_prompt or i == n - 1
            batch.n_tokens = n
            rc = C.llama_decode(self.llm.ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed with {rc}")
        finally:
            C.llama_batch_free(batch)
        feats = np.empty((n, 3, self.n_embd), dtype=np.float16)
        for j, lid in enumerate(self.layers):
            ptr = self.lib.specee_layer_input(self.llm.ctx, lid)
            feats[:, j, :] = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n, self.n_embd))
        rows = np.r_[np.arange(min(n_prompt, n)), [n - 1]] if n_prompt < n else np.arange(n)
        logits = np.ctypeslib.as_array(C.llama_get_logits(self.llm.ctx), shape=(len(rows), self.n_vocab))
        top4 = np.full((n, 4), -1, dtype=np.int32)  # answer rows: only the top one is known
        top4[rows] = _top4(logits)
        top4[n_prompt : n - 1, 0] = tokens[n_prompt + 1 :]
        return Sequence(np.asarray(tokens, dtype=np.int32), n_prompt, feats, top4)
