"""Token sources per acceleration mode. Each turns prompt tokens into a stream of sampled tokens;
the session around them handles text, stop strings, cancel and stats the same way for all."""

from __future__ import annotations

import ctypes
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import llama_cpp
import numpy as np
from llama_cpp import Llama
from llama_cpp._internals import LlamaSampler

from engine import native
from engine import protocol as p
from engine.hashing import sha256_file
from engine.llm.kv_states import Aux, seq_state, set_seq_state
from engine.models.exit_predictors import ExitPredictors
from engine.sequences import common_prefix

# the copy drafter's buckets (native/src/spec/copy-draft.h), as its accel stats name them: a match
# length, and whether the earlier occurrences of the context's last two tokens went on alike; its
# estimates come in COPY_BUCKETS' order
COPY_MATCH_BUCKETS = ("2", "3", "4", "5-7", "8-15", "16+")
COPY_ALIKE = ("one", "agree", "disagree")
COPY_BUCKETS = tuple(f"{length} {alike}" for alike in COPY_ALIKE for length in COPY_MATCH_BUCKETS)


# Decoder.stream's progress: called with the prompt tokens in the cache so far while a long prompt
# is read, after each batch of it (the last: all of them, just before the first token)
Progress = Callable[[int], None]


class PromptInterrupted(RuntimeError):
    """The prompt's reading was stopped (a Cancel raised the context's abort flag mid-batch); the
    cache keeps the batches read before it (kv_tokens says which)."""


class Decoder(Protocol):
    def cached_prefix(self, tokens: list[int]) -> int: ...
    # step_us: how long native code may go on before it hands its tokens over (0: one step a call)
    def stream(
        self, tokens: list[int], s: p.Sampling, *, step_us: int = 0, progress: Progress | None = None
    ) -> Iterator[int]: ...
    def kv_used(self) -> int: ...
    def accel_stats(self) -> dict[str, float]: ...
    def forget(self) -> None: ...  # drop the KV prefix bookkeeping (another decoder used the context)
    def set_threads(self, n: int) -> None: ...  # a draft context's threads (the target's are the worker's)
    def close(self) -> None: ...
    # gap between the top two logits the last token was chosen from; nan where the mode does not know it
    def last_margin(self) -> float: ...

    # whether the target's KV cache alone is this decoder's state (a saved one may be restored:
    # engine/llm/kv_states.py); kv_tokens: the tokens in it; adopt: a restored cache holds these
    restorable: bool

    def kv_tokens(self) -> list[int]: ...
    # the target's cache holds `tokens` now (restored, or handed back by the batch); `aux`: the
    # drafter's own cache of them saved with it (head_state), if any
    def adopt(self, tokens: list[int], aux: Aux | None = None) -> None: ...
    def head_state(self) -> Aux | None: ...  # the drafter's own cache, to keep beside the target's


@dataclass(frozen=True)
class Grammar:
    """A GBNF grammar (root rule "root") and how it applies (Generate.grammar_*): from the start,
    after reading `prefill` (a chat template's generation prompt it starts at), or lazily, from the
    first match of a trigger pattern (a regex over the answer's text) or token on."""

    text: str
    lazy: bool = False
    trigger_patterns: tuple[str, ...] = ()
    trigger_tokens: tuple[int, ...] = ()
    prefill: tuple[int, ...] = ()

    @classmethod
    def of(cls, req: p.Generate) -> Grammar:
        return cls(
            req.grammar, req.grammar_lazy, tuple(req.grammar_trigger_patterns), tuple(req.grammar_trigger_tokens),
            tuple(req.grammar_prefill),
        )  # fmt: skip

    def sampler(self, llm: Llama) -> Any:
        """llama.cpp's grammar sampler for it; SettingsError for a grammar llama.cpp cannot parse."""
        vocab = llm._model.vocab
        if self.lazy:
            patterns = (ctypes.c_char_p * len(self.trigger_patterns))(*(x.encode() for x in self.trigger_patterns))
            tokens = (llama_cpp.llama_token * len(self.trigger_tokens))(*self.trigger_tokens)
            smpl = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
                vocab, self.text.encode(), b"root", patterns, len(patterns), tokens, len(tokens)
            )
        else:
            smpl = llama_cpp.llama_sampler_init_grammar(vocab, self.text.encode(), b"root")
        if not smpl:
            raise p.SettingsError("grammar: llama.cpp could not parse the grammar (the worker's log says where)")
        for token in self.prefill:
            llama_cpp.llama_sampler_accept(smpl, token)
        return smpl


def make_sampler(llm: Llama, s: p.Sampling, grammar: str | Grammar = "") -> LlamaSampler:
    """llama.cpp's sampler chain for `s`, as llama-cpp-python's Llama._init_sampler builds it (same
    samplers, same order: answers stay token-identical to it), with a logit bias first when asked, then
    a grammar (GBNF, root rule "root"): it rules out every token that cannot continue it, the
    end-of-generation tokens until it is complete, before any other sampler sees the candidates."""
    chain = LlamaSampler()
    n_vocab = llm.n_vocab()
    if s.logit_bias:
        biases = (llama_cpp.llama_logit_bias * len(s.logit_bias))(*_logit_biases(s.logit_bias, n_vocab))
        # llama.cpp copies the biases: the array need not outlive this call
        llama_cpp.llama_sampler_chain_add(chain.sampler, llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(biases), biases))
    grammar = Grammar(grammar) if isinstance(grammar, str) else grammar
    if grammar.text:
        # the chain owns it from here
        llama_cpp.llama_sampler_chain_add(chain.sampler, grammar.sampler(llm))
    chain.add_penalties(
        n_vocab=n_vocab, penalty_last_n=llm.last_n_tokens_size, penalty_repeat=s.repeat_penalty,
        penalty_freq=s.frequency_penalty, penalty_present=s.presence_penalty,
    )  # fmt: skip
    if s.temperature == 0.0:
        chain.add_greedy()
        return chain
    chain.add_top_k(s.top_k)
    chain.add_typical(1.0, 1)
    chain.add_top_p(s.top_p, 1)
    chain.add_min_p(s.min_p, 1)
    chain.add_temp(s.temperature)
    chain.add_dist(llm._seed)
    return chain


def greedy_alone(s: p.Sampling, grammar: str | Grammar = "") -> bool:
    """Whether make_sampler's chain for `s` is llama.cpp's greedy sampler alone (no bias, grammar or
    penalty before it): then native.lib().specee_greedy picks the same token (the first of equal
    maxima) without the chain's copy of every logit into a candidate array (~0.1 ms a token here)."""
    text = grammar.text if isinstance(grammar, Grammar) else grammar
    neutral = s.repeat_penalty == 1.0 and s.frequency_penalty == 0.0 and s.presence_penalty == 0.0
    return s.temperature == 0.0 and neutral and not s.logit_bias and not text


def _logit_biases(logit_bias: dict[str, float], n_vocab: int) -> list[tuple[int, float]]:
    """Sampling.logit_bias (validated: decimal keys) as (token, bias) pairs; SettingsError for a token
    this model's vocabulary does not have."""
    pairs = [(int(token), float(bias)) for token, bias in logit_bias.items()]
    for token, _bias in pairs:
        if token >= n_vocab:
            raise p.SettingsError(f"logit_bias: token {token} is not in this model's vocabulary (0..{n_vocab - 1})")
    return pairs


class VanillaDecoder:
    """One target forward pass per token, in a loop of our own over llama.cpp's C API
    (native specee_vanilla_run: a one-token llama_decode and llama.cpp's sampler chain per token,
    several tokens a call; no logits copied into Python; llama-cpp-python's generate also re-trimmed
    the cache and kept its own arrays every token). Prefill chunks as llama-cpp-python's eval did (n_batch rows from the
    first uncached token), so answers are token-identical to it."""

    def __init__(self, llm: Llama, n_ctx: int = 0) -> None:
        """n_ctx: the room of its sequence (0: the context's; less where the context holds several)."""
        self.llm = llm
        self._ctx = llm._ctx.ctx
        self._n_vocab = llm.n_vocab()
        self._n_batch = llm.n_batch
        self._n_ctx = n_ctx or llm.n_ctx()
        self._kv: list[int] = []  # the tokens in the target's KV cache
        self._batch = llama_cpp.llama_batch_init(max(self._n_batch, 1), 0, 1)
        self._out = (ctypes.c_int32 * 512)()  # specee_vanilla_run's tokens of one call

    def cached_prefix(self, tokens: list[int]) -> int:
        return min(common_prefix(self._kv, tokens), len(tokens) - 1)  # one token re-decoded for its logits

    def _decode_chunk(self, tokens: list[int], pos0: int) -> None:
        b = self._batch
        n = len(tokens)
        b.n_tokens = n
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = pos0 + i
            b.seq_id[i][0] = 0
            b.n_seq_id[i] = 1
            b.logits[i] = False
        b.logits[n - 1] = True
        rc = llama_cpp.llama_decode(self._ctx, b)
        if rc == 2:  # the abort flag: llama.cpp dropped this chunk's rows
            raise PromptInterrupted("the prompt's reading was stopped")
        if rc != 0:
            raise RuntimeError("llama.cpp could not decode the prompt")

    def stream(
        self, tokens: list[int], s: p.Sampling, grammar: str | Grammar = "", *, step_us: int = 0, progress: Progress | None = None
    ) -> Iterator[int]:
        """The answer's tokens as they are picked, at most s.max_tokens (0: until the context is full).
        step_us: how long native code may go on picking and decoding before it hands its tokens over
        (the first token always comes at once). 0: one token at a time, each decoded only when the
        next is asked for, so last_margin and logprobs read the logits the token came from; more
        saves the per-token calls, and a consumer that stops early leaves up to that much decoded
        past its last token in the cache (kv_tokens says so). progress: see Progress."""
        if not tokens or len(tokens) >= self._n_ctx:
            raise ValueError("the prompt is empty or does not fit in the context")
        smpl = make_sampler(self.llm, s, grammar)
        start = self.cached_prefix(tokens)
        self._kv = tokens[:start]
        # sequence 0: the only one, unless engine/llm/batched.py keeps others beside it
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self._ctx), 0, start, -1)
        for c0 in range(start, len(tokens), self._n_batch):
            end = min(c0 + self._n_batch, len(tokens))
            try:
                self._decode_chunk(tokens[c0:end], c0)
            except PromptInterrupted:
                raise  # the chunks before it stay cached: the same prompt again goes on from there
            except RuntimeError:
                self._kv = []  # where the cache ends is unknown
                raise
            self._kv = tokens[:end]
            if progress is not None:
                progress(end)
        kv = list(tokens)
        self._kv = kv
        # greedy alone: specee_greedy's arg max (the same token) rather than the chain
        run, ctx, out = native.lib().specee_vanilla_run, self._ctx, self._out
        sampler = None if greedy_alone(s, grammar) else smpl.sampler
        left = s.max_tokens or self._n_ctx
        pending, budget = -1, 0  # the first token's logits came with the prefill: it comes at once
        while left > 0 and len(kv) + 1 < self._n_ctx:
            n = run(ctx, sampler, pending, len(kv), self._n_ctx, min(left, len(out)), budget, out)
            if n <= 0:
                self._kv = []  # where the cache ends is unknown: the next answer prefills from scratch
                raise RuntimeError("llama.cpp could not decode a token")
            got = out[:n]
            if pending >= 0:
                kv.append(pending)
            kv.extend(got[:-1])  # every token but the last is in the cache now
            left -= n
            pending, budget = got[-1], step_us
            yield from got

    restorable = True

    def kv_used(self) -> int:
        return len(self._kv)

    def kv_tokens(self) -> list[int]:
        return list(self._kv)

    def adopt(self, tokens: list[int], aux: Aux | None = None) -> None:
        self._kv = list(tokens)

    def head_state(self) -> Aux | None:
        return None

    def accel_stats(self) -> dict[str, float]:
        return {}

    def last_margin(self) -> float:
        # the context still holds the logits the last token was sampled from (the next decode
        # runs only when the stream is resumed)
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, -1), shape=(self._n_vocab,))
        top2 = np.partition(row, -2)[-2:]
        return float(top2[1] - top2[0])

    def logprobs(self, token: int, n_top: int) -> tuple[float, list[tuple[int, float]]]:
        """The last token's log-probability under the model's distribution (log-softmax of the
        full-vocabulary logits it was sampled from, before any sampler), and the n_top most likely
        tokens with theirs, most likely first. Read only when asked: plain answers copy no logits."""
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, -1), shape=(self._n_vocab,))
        row = row.astype(np.float64)
        top = float(row.max())
        log_z = top + math.log(float(np.exp(row - top).sum()))
        best: list[tuple[int, float]] = []
        if n_top > 0:
            idx = np.argpartition(row, -n_top)[-n_top:]
            idx = idx[np.argsort(-row[idx], kind="stable")]
            best = [(int(i), float(row[i] - log_z)) for i in idx]
        return float(row[token] - log_z), best

    def forget(self) -> None:
        self._kv = []
        self.llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self._ctx), True)

    def set_threads(self, n: int) -> None:
        pass  # no context of its own

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None


def _load_draft_model(path: Path, on_gpu: bool, what: str) -> Any:
    params = llama_cpp.llama_model_default_params()
    # Explicitly with the target's last layer (EngineSession._head_on_gpu): llama.cpp's default
    # offloads everything, so a CPU-placed target would ship features to the GPU every step.
    params.n_gpu_layers = 999 if on_gpu else 0
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load the {what} {path.name}")
    return model


class _NativeLoop:
    """What the natively looped decoders share: a draft model they load (an EAGLE head or a
    smaller model) and the tokens in the target's KV cache, which their loop keeps past
    llama-cpp-python's own bookkeeping."""

    llm: Llama
    _draft_model: Any = None
    _kv: list[int]

    def cached_prefix(self, tokens: list[int]) -> int:
        return common_prefix(self._kv, tokens)

    restorable = False  # a draft model keeps state of its own
    _head_id = ""  # the EAGLE head file's sha256, where there is one (head_state's tag)

    def kv_used(self) -> int:
        return len(self._kv)

    def kv_tokens(self) -> list[int]:
        return list(self._kv)

    def _head_ctx(self) -> Any:
        """The EAGLE head's context (its sequence 0: the head's cache of the target's tokens), or None."""
        return None

    def head_state(self) -> Aux | None:
        """The EAGLE head's cache of the target's tokens (its sequence 0), tagged with the head's
        sha256: restored with the target's, the next answer drafts exactly as it would have in the
        same process (rows past the kept tokens are dropped by the next prefill)."""
        ctx = self._head_ctx()
        buf = seq_state(ctx, 0) if ctx else None
        return (self._head_id, buf) if buf is not None else None

    def adopt(self, tokens: list[int], aux: Aux | None = None) -> None:
        """The target's cache holds `tokens` now. The head's cache is set from `aux` where that was
        saved with them by this head; else its rows are kept only as far as the tokens it saw
        agree with the new ones (a row pairs token P+1 with the target's features at P)."""
        ctx = self._head_ctx()
        if ctx:
            mem = llama_cpp.llama_get_memory(ctx)
            restored = False
            if aux is not None and aux[0] == self._head_id:
                llama_cpp.llama_memory_seq_rm(mem, 0, -1, -1)
                restored = set_seq_state(ctx, 0, aux[1])
            if not restored:
                keep = max(0, common_prefix(self._kv, tokens) - 1)
                llama_cpp.llama_memory_seq_rm(mem, 0, keep, -1)
        self._kv = list(tokens)

    def forget(self) -> None:
        self._kv = []

    def last_margin(self) -> float:
        return math.nan

    def _free_draft_model(self) -> None:
        if self._draft_model:
            llama_cpp.llama_model_free(self._draft_model)
            self._draft_model = None


class DrafterDecoder(_NativeLoop):
    """Speculative decoding behind one native handle (specee_drafter_*, native/src/spec/drafter.cpp):
    a drafter proposes, the target verifies in one batch and every token is sampled from the target.
    drafter: "eagle" (draft_model: an EAGLE-3 head), "draft-simple" (draft_model: a smaller model with
    the target's tokenizer) or one of llama.cpp's n-gram drafters ("ngram-simple", ...).
    gated (eagle): each step verifies only as many of the head's up to n_draft drafts as pay on this
    machine (native/src/draft-gate.h), else always n_draft."""

    def __init__(
        self,
        llm: Llama,
        drafter: str,
        n_draft: int,
        n_threads: int,
        draft_model: Path | None = None,
        head_on_gpu: bool = False,
        gated: bool = False,
    ) -> None:
        self.llm = llm
        self.drafter = drafter
        # the n-gram drafters read the prompt the prefill hands them: the target's cache is all; an
        # EAGLE head's own cache is kept beside it (head_state) and rows past what it shares trimmed
        self.restorable = drafter in ("copy", "eagle") or drafter.startswith("ngram")
        self._head_id = sha256_file(Path(draft_model)) if drafter == "eagle" and draft_model is not None else ""
        self.lib = native.spec_lib()
        self.n_draft = n_draft
        self._handle = None
        self._kv = []  # unknown until a prefill succeeds
        if draft_model is not None:
            what = "EAGLE head" if drafter == "eagle" else "draft model"
            self._draft_model = _load_draft_model(draft_model, head_on_gpu, what)
        self._handle = self.lib.specee_drafter_init(llm._ctx.ctx, drafter.encode(), self._draft_model, n_draft, n_threads)
        if not self._handle:
            msg = self.lib.specee_drafter_last_error().decode()
            self.close()
            raise RuntimeError(msg)
        self.gated = gated and drafter == "eagle"
        self.lib.specee_drafter_set_gated(self._handle, self.gated)
        self._stats = native.DrafterStats()
        self._out = (ctypes.c_int32 * max(256, n_draft + 1))()  # the tokens of one specee_drafter_steps call

    def _error(self) -> RuntimeError:
        return RuntimeError(self.lib.specee_drafter_last_error().decode())

    def _head_ctx(self) -> Any:
        return self.lib.specee_drafter_draft_context(self._handle) if self._head_id else None

    def stream(self, tokens: list[int], s: p.Sampling, *, step_us: int = 0, progress: Progress | None = None) -> Iterator[int]:
        """step_us: how long native code may go on stepping before it hands its tokens over (0: one
        step a call); a consumer that stops early leaves the steps past its last token in the cache.
        progress: see Progress."""
        smpl = make_sampler(self.llm, s)
        sampler = None if greedy_alone(s) else smpl.sampler  # greedy alone: specee_greedy's arg max
        self.lib.specee_drafter_reset_stats(self._handle)
        self._stats = native.DrafterStats()
        arr = (ctypes.c_int32 * len(tokens))(*tokens)
        n_keep = _read_in_parts(self, tokens, arr, self.lib.specee_drafter_prefill, self._handle, progress, self._error)
        self._kv = tokens[: max(n_keep - 1, 0)]  # until the prefill succeeds (a stopped one keeps this)
        first = self.lib.specee_drafter_prefill(self._handle, arr, len(tokens), n_keep, sampler)
        if first < 0:
            raise self._error()
        if progress is not None:
            progress(len(tokens))
        seen = [*tokens, first]  # the prompt and the answer so far; the cache holds a prefix of it
        kv = self._kv = list(tokens)
        yield first
        per_step, left = self.n_draft + 1, (s.max_tokens or 1 << 30) - 1
        while left > 0:  # the last step may give more than max_tokens: the consumer takes what it asked
            room = min(len(self._out), max(left, per_step))  # no more steps than the answer may still take
            n = self.lib.specee_drafter_steps(
                self._handle, sampler, self._out, room, per_step, step_us, ctypes.byref(self._stats)
            )
            if n < 0:
                raise self._error()
            if n == 0:
                return  # context full
            new = self._out[:n]
            left -= n
            seen += new
            n_past = self.lib.specee_drafter_n_past(self._handle)
            if n_past < len(kv):
                del kv[n_past:]
            else:  # in place: copying the whole conversation every step cost ~10 us per 1000 tokens
                kv += seen[len(kv) : n_past]
            yield from new

    def accel_stats(self) -> dict[str, float]:
        st = self._stats
        steps = max(st.n_steps, 1)
        out = {
            "acceptance_length": st.n_emitted / steps,  # tokens per target forward pass
            "drafted": st.n_drafted,
            "accepted": st.n_accepted,
            "accept_rate": st.n_accepted / max(st.n_drafted, 1),
            "draft_ms_per_step": st.t_draft_ms / steps,
            "verify_ms_per_step": st.t_verify_ms / steps,
        }
        if self.drafter == "eagle":  # only EAGLE feeds the accepted tokens' features to its head
            out["feed_ms_per_step"] = st.t_feed_ms / steps
        p = (ctypes.c_double * len(COPY_BUCKETS))()
        if self.lib.specee_drafter_copy_acceptance(self._handle, p, len(p)):
            # what the copy drafter has learnt, per match length and agreement: why it drafts where it does
            out["copy_acceptance"] = {b: round(v, 3) for b, v in zip(COPY_BUCKETS, p, strict=True)}
        gate = native.GateInfo()
        if self.gated and self.lib.specee_drafter_gate_info(self._handle, ctypes.byref(gate)):
            # what the gate has learnt: how often a draft the head gave p = 0.0-0.1 .. 0.9-1.0 was
            # confirmed (its first and its later chain drafts), and this machine's costs
            out["eagle_gate"] = {
                "first": [round(v, 3) for v in gate.first],
                "later": [round(v, 3) for v in gate.later],
                "verify_ms": [round(v, 2) for v in gate.verify_ms],
                "step_ms": round(gate.step_ms, 2),
                "draft_ms": round(gate.draft_ms, 2),
            }
        return out

    def set_threads(self, n: int) -> None:
        if self._handle:
            self.lib.specee_drafter_set_threads(self._handle, n)

    def close(self) -> None:
        if self._handle:
            self.lib.specee_drafter_free(self._handle)
            self._handle = None
        self._free_draft_model()


class SpecEEDecoder(_NativeLoop):
    """SpecEE early exit in native/src/early-exit.cpp: one target pass per token that stops at the
    first layer whose predictor is sure the token is settled among the head's candidates."""

    def __init__(
        self,
        llm: Llama,
        head_path: Path,
        predictors: ExitPredictors | None,
        n_threads: int,
        *,
        exits: bool = True,
        force_layer: int = -1,
        shadow_every: int = 0,
        fill: bool = True,
        n_cand: int = 32,
        head_on_gpu: bool = False,
    ) -> None:
        self.llm = llm
        self.lib = native.lib()
        self._kv = []
        self._ee = None
        self.n_cand = predictors.n_cand if predictors else n_cand
        self._draft_model = _load_draft_model(head_path, head_on_gpu, "EAGLE head")
        self._ee = self.lib.specee_ee_init(llm._ctx.ctx, self._draft_model, self.n_cand, n_threads)
        if not self._ee:
            msg = self.lib.specee_last_error().decode()
            self.close()
            raise RuntimeError(msg)
        self.n_layer = llama_cpp.llama_model_n_layer(llm._model.model)
        self._head_id = sha256_file(Path(head_path))
        # exits only after the last layer skip no layer, so the cache holds no filled-in K/V and is
        # what any mode would have computed: it may be kept and restored (engine/llm/kv_states.py)
        self._exits_skip_layers = bool(predictors) and min(predictors.layers, default=self.n_layer) < self.n_layer - 1
        self.lib.specee_ee_set_fill(self._ee, fill)
        self.exits, self.force_layer, self.shadow_every = exits, force_layer, shadow_every
        if predictors and predictors.vocab_head is not None:
            w, b, thr = predictors.vocab_head
            if self.lib.specee_ee_set_vocab_predictor(self._ee, _f32(np.asarray(w, np.float32)), b, thr) != 0:
                self.close()
                raise RuntimeError(self.lib.specee_last_error().decode())
        if predictors:
            for layer, pr in predictors.layers.items():
                rc = self.lib.specee_ee_set_predictor(
                    self._ee, layer, pr.w1.shape[0], _f32(pr.w1), _f32(pr.b1), _f32(pr.w2), float(pr.b2), float(pr.threshold)
                )
                if rc != 0:
                    self.close()
                    raise RuntimeError(self.lib.specee_last_error().decode())
        self._ee_stats = native.EeStats()
        self._tok = (ctypes.c_int32 * 1)()

    def _error(self) -> RuntimeError:
        return RuntimeError(self.lib.specee_last_error().decode())

    @property
    def restorable(self) -> bool:  # type: ignore[override]
        return not self._exits_skip_layers and self.force_layer < 0

    def _head_ctx(self) -> Any:
        return self.lib.specee_ee_draft_context(self._ee) if self._ee else None

    def _configure(self, s: p.Sampling) -> None:
        seed = s.seed if s.seed >= 0 else random.getrandbits(32)
        exits = self.exits and not exits_would_ignore(s)
        self.lib.specee_ee_configure(self._ee, exits, self.force_layer, self.shadow_every, s.temperature, seed)
        # An exit never emits a token of a stop string (nor an end-of-generation token): the full
        # lm_head confirms it, so a premature exit cannot end the answer early. Nor a token biased
        # down (logit_bias < 0): the sampler chain decides whether it may come.
        stop = {t for st in s.stop for t in self.llm.tokenize(st.encode(), add_bos=False, special=True)}
        stop = sorted(stop | {int(token) for token, bias in s.logit_bias.items() if bias < 0})
        self.lib.specee_ee_set_stop_tokens(self._ee, (ctypes.c_int32 * max(len(stop), 1))(*stop), len(stop))

    def stream(self, tokens: list[int], s: p.Sampling, *, step_us: int = 0, progress: Progress | None = None) -> Iterator[int]:
        # one native step (one token) a call whatever step_us asks: specee_ee_step has no multi-step form yet
        yield from (tok for tok, _rec, _cands in self._run(tokens, s, record=False, progress=progress))

    def record(self, tokens: list[int], s: p.Sampling) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Full-depth greedy steps with every layer's candidate logits plus the head's log-probs of
        the candidates [n_layer + 1, n_cand] and the candidates (predictor training data); the
        first token comes from the prefill and has no record."""
        for tok, rec, cands in self._run(tokens, s, record=True):
            if rec is not None:
                yield tok, rec, cands

    def _run(
        self, tokens: list[int], s: p.Sampling, record: bool, progress: Progress | None = None
    ) -> Iterator[tuple[int, np.ndarray | None, np.ndarray]]:
        smpl = make_sampler(self.llm, s)
        self._configure(s)
        self.lib.specee_ee_reset_stats(self._ee)
        self._ee_stats = native.EeStats()
        arr = (ctypes.c_int32 * len(tokens))(*tokens)
        n_keep = _read_in_parts(self, tokens, arr, self.lib.specee_ee_prefill, self._ee, progress, self._error)
        self._kv = tokens[: max(n_keep - 1, 0)]  # until the prefill succeeds (a stopped one keeps this)
        first = self.lib.specee_ee_prefill(self._ee, arr, len(tokens), n_keep, smpl.sampler)
        if first < 0:
            raise self._error()
        if progress is not None:
            progress(len(tokens))
        self._kv = list(tokens)
        cands = np.zeros(self.n_cand, dtype=np.int32)
        # per layer the candidates' logits, then the head's log-probabilities of them, then the
        # draft-vocabulary head's features and arg max token
        rec = np.zeros((self.n_layer + 2, self.n_cand), dtype=np.float32) if record else None
        rec_p = _f32(rec) if rec is not None else None
        cands_p = cands.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        yield first, None, cands
        prev = first
        while True:
            n = self.lib.specee_ee_step(self._ee, smpl.sampler, self._tok, rec_p, cands_p, ctypes.byref(self._ee_stats))
            if n < 0:
                raise RuntimeError(self.lib.specee_last_error().decode())
            if n == 0:
                return  # context full
            self._kv.append(prev)
            prev = self._tok[0]
            yield prev, (rec.copy() if rec is not None else None), cands.copy()

    def accel_stats(self) -> dict[str, Any]:
        st = self._ee_stats
        steps = max(st.n_steps, 1)
        out: dict[str, Any] = {
            "steps": st.n_steps,
            "exit_rate": st.n_exits / steps,
            "vocab_head_rate": st.n_vocab_exits / steps,
            "mean_layers": st.n_layers_run / steps,
            "n_layer": self.n_layer,
            "cand_hit_rate": st.n_cand_hits / steps,
            "exit_hist": list(st.exit_hist[: self.n_layer + 1]),
            "target_ms_per_step": st.t_target_ms / steps,
            "draft_ms_per_step": st.t_draft_ms / steps,
            "confirmed_endings": st.n_confirmed,
        }
        if st.n_shadow:
            out["shadow_steps"] = st.n_shadow
            out["shadow_exits"] = st.n_shadow_exits
            out["exit_precision"] = st.n_shadow_correct / max(st.n_shadow_exits, 1)
        return out

    def set_threads(self, n: int) -> None:
        if self._ee:
            self.lib.specee_ee_set_threads(self._ee, n)

    def close(self) -> None:
        if self._ee:
            self.lib.specee_ee_free(self._ee)
            self._ee = None
        self._free_draft_model()


def _read_in_parts(
    dec: _NativeLoop, tokens: list[int], arr: Any, prefill: Any, handle: Any,
    progress: Progress | None, error: Callable[[], RuntimeError],
) -> int:  # fmt: skip
    """For a native prefill (one call for the whole prompt): where a progress callback is given,
    the prompt but its last batch is read a batch a call (each call's greedy pick unused), so that
    progress is told after each batch and a stopped reading keeps the batches read before it. The
    rows are those a whole prefill gives (the CPU kernels are batch-invariant: each call re-decodes
    its first token alone). Returns the prefix cached now, for the final call."""
    n_keep = dec.cached_prefix(tokens)
    n_batch = dec.llm.n_batch
    if progress is None or len(tokens) - n_keep <= n_batch:
        return n_keep
    for end in range(n_keep + n_batch, len(tokens), n_batch):
        dec._kv = tokens[: max(n_keep - 1, 0)]  # what a failed call leaves: it re-decodes from n_keep - 1
        if prefill(handle, arr, end, n_keep, None) < 0:
            raise error()
        dec._kv, n_keep = tokens[:end], end
        progress(end)
    return n_keep


def exits_would_ignore(s: p.Sampling) -> bool:
    """Whether SpecEE's exits would skip part of this sampling: an exit emits the token its layer is
    sure of without the sampler chain, so a bias up (which may make another token win) or a frequency
    or presence penalty (the request asks for them explicitly) needs every step at full depth."""
    return bool(s.frequency_penalty or s.presence_penalty or any(bias > 0 for bias in s.logit_bias.values()))


def _f32(a: np.ndarray) -> Any:
    assert a.dtype == np.float32 and a.flags["C_CONTIGUOUS"]
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
