"""Several vanilla sequences decoded together: one llama_decode per step holds the next token of every
answer being written plus prompt chunks of newly started ones, each in its own sequence (and KV
cache: engine/llm/target.py context_params), each sampled by its own sampler chain. The CPU
kernels are batch-invariant (tests/test_batch_invariance.py) and a sequence attends only to its own
cache, laid out as it would be alone, so its tokens are those VanillaDecoder gives it alone.

llama.cpp runs one graph for sequences of consecutive ids with as many rows each, and splits the
rest: a step decoding sequences 0 and 2 would cost two passes, so idle sequences between get a row
that changes nothing (_pads). New answers take the lowest free
sequence, unless another free one holds a long enough prefix of the prompt (a conversation going
on: only what is new is prefilled). Sequence 0 is also the one-at-a-time decoders' (VanillaDecoder,
the drafters): `forget` hands its cache over between them.

A request that comes while answers are being decoded need not wait out the step (~14 ms for four
answers of the default model on 2 cores; a client that asks again as soon as its answer ends comes
just after a step began): another thread calls interrupt(), a step that only decodes answers stops
between graph nodes (specee_interrupt_requested), its rows are dropped from the cache, and the next
step starts the new prompt. The stopped step is decoded again, the same tokens at the same positions."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import llama_cpp

from engine import native
from engine.llm.decoders.sampling import SamplerChain
from engine.llm.target import Target
from engine.sequences import common_prefix

# Prompt rows one step may add beside answers being decoded: a new prompt goes in chunks of this
# many (~0.1 s each for the default model on 2 cores), so the answers already streaming are never
# held up for a whole long prompt's prefill. A step with nothing to decode takes up to n_batch.
PREFILL_PER_STEP = 128
# A free sequence whose cache shares at least this much of a new prompt is taken for it (else the
# lowest free one): below it, the prefill saved is worth less than a split step
MIN_REUSE_TOKENS = 64


@dataclass(eq=False)
class Slot:
    """One sequence of the batch: an answer being written, or (inactive) the cache of a finished one."""

    seq: int
    kv: list[int] = field(default_factory=list)  # the tokens in this sequence's KV cache
    prompt: list[int] = field(default_factory=list)
    n_fed: int = 0  # prompt tokens in the cache: the prefill's progress
    cached: int = 0  # of them, reused from the previous answer's cache
    next: int = -1  # the token sampled last, decoded at the next step (-1: none yet)
    sampler: SamplerChain | None = None
    greedy: bool = False  # the sampler is greedy alone: native specee_greedy picks its token (decoders.greedy_alone)
    active: bool = False
    used_at: int = 0  # when it last started (its prefill goes in arrival order)
    row: int = -1  # the batch row its last token was sampled from (valid until the next step)


class BatchedVanilla:
    """Up to n_slots answers decoded together on one context (created for that many sequences)."""

    def __init__(self, llm: Target, n_slots: int, n_ctx_seq: int, prefill_per_step: int = PREFILL_PER_STEP) -> None:
        self._ctx = llm.ctx
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._n_batch = llm.n_batch
        self.n_ctx_seq = n_ctx_seq  # one sequence's room: its prompt and answer
        self.prefill_per_step = max(1, min(prefill_per_step, self._n_batch - n_slots))
        self.slots = [Slot(seq=i) for i in range(n_slots)]
        self._batch = llama_cpp.llama_batch_init(self._n_batch, 0, 1)
        self._steps = 0
        self._interrupt = ctypes.c_bool(False)  # raised by another thread: a request came (interrupt())
        self._stop = ctypes.c_bool(False)  # ... or a prompt being read was cancelled (stop_reading())
        self.n_interrupted = 0  # steps that gave way to one

    def interrupt(self) -> None:
        """From any thread: a request came that can join. A step decoding answers only (no prompt rows)
        stops between graph nodes and returns no tokens; the caller starts the request and steps on."""
        self._interrupt.value = True

    def stop_reading(self) -> None:
        """From any thread: an answer whose prompt is being read was cancelled. A step that reads
        prompt rows stops too (a batch of them takes seconds); the rows are read again next step
        for the prompts that go on."""
        self._stop.value = True

    def rearm(self) -> None:
        """Before the caller looks for new requests: an interrupt() or stop_reading() after this stops the next step."""
        self._interrupt.value = False
        self._stop.value = False

    @property
    def busy(self) -> bool:
        return any(s.active for s in self.slots)

    @property
    def free(self) -> int:
        return sum(not s.active for s in self.slots)

    def pick(self, tokens: list[int]) -> Slot:
        """The free slot a prompt goes to (the caller checked that one is free): one whose cache
        shares enough of it, else the lowest free sequence. Its cache may be replaced before start()."""
        free = [s for s in self.slots if not s.active]
        reuse = max(free, key=lambda s: (common_prefix(s.kv, tokens), -s.used_at))
        return reuse if common_prefix(reuse.kv, tokens) >= MIN_REUSE_TOKENS else free[0]

    def start(self, slot: Slot, tokens: list[int], sampler: SamplerChain, greedy: bool = False) -> Slot:
        """Begin the prompt in this free slot (pick()); its prefill runs in the next steps. greedy: the
        sampler is greedy alone (decoders.greedy_alone), so the arg max is taken without it."""
        if not tokens or len(tokens) >= self.n_ctx_seq:
            raise ValueError("the prompt is empty or does not fit in the context")
        assert not slot.active
        cached = min(common_prefix(slot.kv, tokens), len(tokens) - 1)  # one token re-decoded for its logits
        llama_cpp.llama_memory_seq_rm(self._mem, slot.seq, cached, -1)
        self._steps += 1
        slot.kv, slot.prompt, slot.n_fed, slot.cached = tokens[:cached], list(tokens), cached, cached
        slot.next, slot.sampler, slot.active, slot.used_at, slot.row = -1, sampler, True, self._steps, -1
        slot.greedy = greedy
        return slot

    def finish(self, slot: Slot) -> None:
        """The answer ended: the slot is free again, its cache kept for a conversation that goes on."""
        slot.active, slot.sampler, slot.next, slot.row = False, None, -1, -1
        if slot.n_fed < len(slot.prompt):  # cancelled mid-prefill: the cache holds only part of it
            slot.kv = slot.prompt[: slot.n_fed]

    def step(self) -> list[tuple[Slot, int, bool]]:
        """One decode of every active slot's next row(s); returns (slot, token sampled, context full
        after it) for each slot that got a token. RuntimeError if llama.cpp fails the decode."""
        b = self._batch
        n = 0
        sampled: list[Slot] = []

        def add(slot: Slot, token: int, pos: int, logits: bool) -> None:
            nonlocal n
            b.token[n], b.pos[n], b.n_seq_id[n], b.logits[n] = token, pos, 1, logits
            b.seq_id[n][0] = slot.seq
            if logits:
                slot.row = n
                sampled.append(slot)
            n += 1

        decoding = [s for s in self.slots if s.active and s.next >= 0]  # in sequence order: one pass where consecutive
        pending = sorted((s for s in self.slots if s.active and s.n_fed < len(s.prompt)), key=lambda s: s.used_at)
        # A prompt's last chunk goes in a call of its own, before the answers' next rows: beside them
        # llama.cpp splits the batch by sequence into two passes anyway, and this way the new answer's
        # first token comes out after its own pass rather than after both
        answering = bool(decoding)  # answers are waiting: prompts get prefill_per_step rows, not the batch
        if decoding and pending and len(pending[0].prompt) - pending[0].n_fed <= self.prefill_per_step:
            decoding = []
        pads = self._pads(decoding)
        for slot in sorted([*decoding, *pads], key=lambda s: s.seq):
            if slot in pads:  # its cache's last token again, or a stand-in where it holds none
                add(slot, slot.kv[-1] if slot.kv else 0, max(len(slot.kv) - 1, 0), False)
            else:
                add(slot, slot.next, len(slot.kv), True)
        budget = self.prefill_per_step if answering else self._n_batch
        fed: list[tuple[Slot, int]] = []
        for slot in pending:
            take = min(budget, len(slot.prompt) - slot.n_fed)
            if take <= 0:
                break
            for i in range(slot.n_fed, slot.n_fed + take):
                add(slot, slot.prompt[i], i, i == len(slot.prompt) - 1)
            fed.append((slot, take))
            budget -= take
        if n == 0:
            return []
        b.n_tokens = n
        for slot in pads:
            llama_cpp.llama_memory_seq_rm(self._mem, slot.seq, max(len(slot.kv) - 1, 0), -1)
        # a step that only decodes answers gives way to a new request (stopping it loses no prefill);
        # one that reads prompts only to a cancelled prompt
        rc = self._decode(b, self._interrupt if decoding and not fed else self._stop)
        for slot in pads:
            if not slot.kv:
                llama_cpp.llama_memory_seq_rm(self._mem, slot.seq, 0, -1)
            elif rc != 0:  # its last token may not be back in the cache
                slot.kv = slot.kv[:-1]
        if rc != 0:
            # llama.cpp dropped the failed ubatch's rows; any earlier ubatch's rows go too, so every
            # sequence's cache is what its Slot says (the rows are decoded again next step)
            for slot in pads:
                llama_cpp.llama_memory_seq_rm(self._mem, slot.seq, len(slot.kv), -1)
            for slot in decoding:
                llama_cpp.llama_memory_seq_rm(self._mem, slot.seq, len(slot.kv), -1)
            for slot, _ in fed:
                llama_cpp.llama_memory_seq_rm(self._mem, slot.seq, slot.n_fed, -1)
            if rc == 2:  # interrupted: a request came, or a prompt read was cancelled
                self.n_interrupted += 1
                return []
            raise RuntimeError("llama.cpp could not decode the batch")
        for slot in decoding:
            slot.kv.append(slot.next)
        for slot, take in fed:
            slot.n_fed += take
            slot.kv = slot.prompt[: slot.n_fed]
        out = []
        argmax, sample = native.lib().specee_greedy, llama_cpp.llama_sampler_sample
        for slot in sampled:
            assert slot.sampler is not None
            tok = argmax(self._ctx, slot.row) if slot.greedy else sample(slot.sampler.sampler, self._ctx, slot.row)
            slot.next = tok
            out.append((slot, tok, len(slot.kv) + 1 >= self.n_ctx_seq))
        return out

    def _decode(self, batch: llama_cpp.llama_batch, flag: ctypes.c_bool) -> int:
        """llama_decode's result: 0, 2 when the flag (interrupt(), stop_reading()) stopped it, else a failure."""
        set_abort, requested = native.interrupt_hooks()
        set_abort(self._ctx, requested, ctypes.addressof(flag))
        try:
            rc: int = llama_cpp.llama_decode(self._ctx, batch)
            return rc
        finally:  # only this step may stop: the one-at-a-time decoders share the context
            set_abort(self._ctx, None, None)

    def _pads(self, decoding: list[Slot]) -> list[Slot]:
        """The idle slots between the lowest and highest sequence decoding this step. llama.cpp takes
        a batch's sequences into one pass only while their ids run on (0, 1, 2; not 0, 2), so each
        idle one between gets a row that changes nothing: its cache's last token decoded again at its
        own position (the same K and V, the kernels being batch-invariant, in the same cell), or a
        stand-in removed after. On 2 cores a step of sequences 0, 1, 3 took 17.6-18.5 ms, of 0-3
        13.9-16.1 ms; 0, 2: 13.9-15.9 ms, 0-2: 12.6-13.8 ms."""
        if not decoding:
            return []
        busy = {s.seq for s in decoding}
        lo, hi = min(busy), max(busy)
        return [s for s in self.slots[lo:hi] if s.seq not in busy and not s.active]

    def logits_row(self, slot: Slot) -> int:
        """The batch row the slot's last token was sampled from, valid until the next step."""
        return slot.row

    def seq0_tokens(self) -> list[int]:
        """Sequence 0's cache, for the one-at-a-time decoder that takes it back."""
        return list(self.slots[0].kv)

    def forget(self, seq0: list[int]) -> None:
        """Another decoder used the context: sequence 0 holds `seq0` now (anything past it is
        dropped), and the other sequences' caches are dropped (their cells free for sequence 0)."""
        assert not self.busy
        for slot in self.slots[1:]:
            llama_cpp.llama_memory_seq_rm(self._mem, slot.seq, -1, -1)
            slot.kv = []
        llama_cpp.llama_memory_seq_rm(self._mem, 0, len(seq0), -1)
        self.slots[0].kv = list(seq0)

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
