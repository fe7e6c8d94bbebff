"""One loaded model in the worker process (llama_cpp = our native build): its load, the target's
context (the conversations' kept caches, and which path owns it: one answer at a time or the batch)
and the one-at-a-time answer. Which mode runs and why: engine/worker/auto_mode.py; what each mode
needs to run: engine/worker/modes.py."""

from __future__ import annotations

import ctypes
import itertools
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from engine import protocol as p
from engine.hardware import physical_cores
from engine.kept_caches import kv_states_root
from engine.llm.batched import BatchedVanilla, Slot
from engine.llm.chat_prompt import ChatPrompt
from engine.llm.decoders import Decoder, Grammar, VanillaDecoder, greedy_alone, make_sampler
from engine.llm.kv_states import MIN_GAIN_TOKENS, KvStates, folder_key
from engine.llm.load import flash_attention, prompt_batch
from engine.llm.target import Target
from engine.models.acceleration import model_sha256
from engine.models.gguf_file import inspect_gguf
from engine.models.weights_check import check_weights
from engine.native import build_info
from engine.placement.weights_layout import repack_is_exact
from engine.sequences import common_prefix
from engine.worker import auto
from engine.worker.answer import AnswerStream
from engine.worker.auto_mode import AutoMode
from engine.worker.embeddings import Embedder
from engine.worker.loading import chat_format_note, display_name, padded_ctx, resolve_placement
from engine.worker.modes import LoadError, ModeMakers
from engine.worker.stop_flag import StopFlag, StopReading
from engine.worker.threads import TOLERATED_CORES, ThreadGovernor, cores_used_by_others, machine_sampler

Emit = Callable[[p.Message], None]
STATS_INTERVAL_S = 0.25
# Tokens go out in pieces of at most this long (the first at once): an event per token cost the
# worker ~0.2 ms of a 8 ms step, and its reader (the window, the server) woke per token beside the
# two decode threads on a 2-core laptop. 30 ms is under a frame or two of the window's redraw.
TOKEN_EMIT_S = 0.03
# Vanilla's native loop and the drafting modes' steps go on for up to this long before they hand
# their tokens to Python (Decoder.stream's step_us): under the emit interval, and a cancel or a stop
# string waits out at most that much more decoding.
NATIVE_STEP_US = 20_000
SHOW_RATIO_AFTER = 8  # decoded tokens before Stats.vs_vanilla is worth showing


class EngineSession:
    """A model in memory, for a Load that passed Load.validate(). Not thread-safe: the worker drives
    it from one thread. (A conversation is engine.chats.session.ChatSession, on the frontend's side.)"""

    def __init__(self, load: p.Load) -> None:
        start = time.perf_counter()
        self.load = load
        info = inspect_gguf(load.model_path)  # ModelFileError: clear message for bad files
        check_weights(info)  # ... and for a sound header over garbage weights
        placement, self.plan, predicted = resolve_placement(load)
        self.placement = placement
        self.n_threads = placement.n_threads or physical_cores()
        self._governor: ThreadGovernor | None = None  # auto threads: follow what other processes leave free
        self._sample = machine_sampler()
        self._threads_now = self.n_threads  # what the target's context decodes with now
        lib = None
        if placement.layout == "first":
            from engine import native

            lib = native.lib()
            lib.specee_set_first_layers_on_gpu(max(placement.n_gpu_layers, 0), placement.output_on_gpu)
        # requests decoded together: each its own sequence with a whole context's cells (a unified
        # cache of n_slots contexts), vanilla rows on the CPU (a GPU's batch kernels differ from its
        # one-row ones), in the modes that may run them
        batchable = load.mode in (p.Mode.AUTO, *p.BATCHED_MODES) and placement.n_gpu_layers == 0
        self.n_slots = load.n_parallel if batchable else 1
        n_cells = padded_ctx(placement.n_ctx) * self.n_slots if self.n_slots > 1 else placement.n_ctx
        try:
            self.llm = Target.load(
                Path(load.model_path),
                n_ctx=n_cells,
                n_batch=prompt_batch(placement.n_ctx),
                n_ubatch=prompt_batch(placement.n_ctx),
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                n_gpu_layers=placement.n_gpu_layers,
                flash_attn=flash_attention(placement.n_gpu_layers),
                repack=repack_is_exact(info),
                n_seq_max=self.n_slots,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise LoadError(
                p.ErrorKind.LOAD_FAILED,
                f"llama.cpp could not load {Path(load.model_path).name} ({exc}). The file passed the GGUF checks, so "
                "its architecture may be unsupported by this build, or memory ran out; try a smaller context length.",
            ) from exc
        finally:
            if lib is not None:
                lib.specee_set_first_layers_on_gpu(-1, False)  # later loads (the EAGLE head) keep upstream's
        self.info = info
        self.n_ctx = self.llm.n_ctx() // self.n_slots  # one request's context: its prompt and answer
        if not placement.n_threads and self.n_threads > 1:
            self._governor = ThreadGovernor(self._set_threads, self.n_threads, sample=self._sample)
        self._vocab = self.llm.vocab
        # other conversations' caches (CPU placements: on a GPU every request prefills, see generate)
        states_folder = None
        self._keep_kv = load.keep_kv
        if placement.n_gpu_layers == 0 and self._keep_kv:
            sha = model_sha256(Path(load.model_path))
            valid_for = folder_key(sha, build_info().get("build_key", ""), self.llm.n_ctx(), self.llm.n_batch)
            states_folder = kv_states_root() / valid_for
        self._kv_states = KvStates(self.llm.ctx, folder=states_folder, disk_budget_bytes=load.kv_disk_budget)
        self.prompt = ChatPrompt.for_model(self.llm, info.chat_template)
        self._piece_buf = ctypes.create_string_buffer(256)
        self._vanilla: VanillaDecoder | None = None  # requests with a grammar or logprobs in another mode
        self._embedder: Embedder | None = None  # /v1/embeddings' own context, made at the first request
        modes = ModeMakers(load, self.llm, info, placement, self.n_ctx, self.n_threads)
        acceleration = modes.acceleration
        # which mode runs and why (explicit, auto's cached decision or its measurement in the idle time)
        self.auto_mode = AutoMode(load, modes, self.prompt, placement, self.n_threads, self._sample)
        self.decoder: Decoder = self.auto_mode.start()
        self.loaded = p.Loaded(
            model_path=str(load.model_path),
            name=display_name(Path(load.model_path)),
            architecture=info.architecture,
            n_layer=info.n_layer,
            n_embd=info.n_embd,
            n_vocab=self.llm.n_vocab(),
            n_ctx=self.n_ctx,
            n_ctx_train=self.llm.n_ctx_train(),
            n_threads=self.n_threads,
            mode=self.mode,
            mode_reason=self.mode_reason,
            load_ms=(time.perf_counter() - start) * 1000,
            measured_tok_s=self.measured,
            placement=placement,
            plan=self.plan,
            predicted_tok_s=predicted,
            chat_format_note=chat_format_note(self.prompt, info),
            trainable=acceleration.architecture_supported and not acceleration.eagle_head,
            acceleration=acceleration,
            measuring=self.auto_mode.measuring,  # an explicit mode measures only vanilla's speed
            n_parallel=self.n_slots,
        )
        # the batched path (engine/worker/concurrent.py); batch_owned: it used the context last
        self.batch = BatchedVanilla(self.llm, self.n_slots, self.n_ctx) if self.n_slots > 1 else None
        self._batch_owned = False

    # -- the mode: AutoMode decides it, the session runs it (engine/worker/auto_mode.py) ----------------

    @property
    def mode(self) -> p.Mode:
        return self.auto_mode.mode

    @property
    def mode_reason(self) -> str:
        return self.auto_mode.mode_reason

    @property
    def measured(self) -> dict[str, float]:
        return self.auto_mode.measured

    @property
    def reference(self) -> auto.VanillaReference:
        return self.auto_mode.reference

    def has_background_work(self) -> bool:
        return self.auto_mode.background_work

    def background_step(self, interrupted: Callable[[], bool]) -> p.AutoDecided | None:
        """One unit of auto's measurement; the decision once the last unit ran (or, when a unit had to
        be set aside because other processes were busy, word that the measurement waits)."""
        assert self.auto_mode.background_work
        if self.auto_mode.waiting:
            return None
        self._to_solo()
        if self._threads_now != self.n_threads:
            self._set_threads(self.n_threads)  # measured with every thread (a busy machine's units don't count)
        self._keep_live_cache()  # the measurement uses the target's KV cache: the conversation's is kept
        decided, decoder = self.auto_mode.background_step(interrupted, self.decoder)
        if decoder is not None:
            self.decoder = decoder
        if decided is not None:
            self._show_mode()
        return decided

    def _after_answer(self, tok_s: float, threads: set[int], band: int, n_decoded: int, quiet: bool) -> p.AutoDecided | None:
        """What an answer's speed teaches (AutoMode.after_answer); when the answers contradict auto's
        decision, it is measured again in vanilla."""
        if not self.auto_mode.after_answer(tok_s, threads, band, n_decoded, quiet):
            return None
        self._keep_live_cache()  # the decoder goes: its conversation is kept for the next turn
        old = self.decoder
        decided, self.decoder = self.auto_mode.measure_again()
        old.close()
        self._show_mode()
        return decided

    def _show_mode(self) -> None:
        """Loaded (sent again when a load is refused and this model stays) says what AutoMode says now."""
        self.loaded.mode, self.loaded.mode_reason = self.auto_mode.mode, self.auto_mode.mode_reason
        self.loaded.measured_tok_s, self.loaded.measuring = self.auto_mode.measured, self.auto_mode.measuring

    def close(self) -> None:
        self.auto_mode.close()
        if self.batch is not None:
            if not self.batch.busy:
                self._to_solo()
            self.batch.close()
        if self._kv_states.folder is not None and self.decoder.restorable:
            self._kv_states.save(self.decoder.kv_tokens(), aux=self.decoder.head_state())  # model switch, quit: kept on disk
            self._kv_states.spill()
        self.decoder.close()
        if self._vanilla is not None:
            self._vanilla.close()
        if self._embedder is not None:
            self._embedder.close()
        self.llm.close()

    def _piece(self, token: int, special: bool = False) -> bytes:
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece_buf, len(self._piece_buf), 0, special)
        return self._piece_buf.raw[: max(n, 0)]

    def _set_threads(self, n: int) -> None:
        self.llm.set_threads(n)
        self.decoder.set_threads(n)
        self._threads_now = n

    def count_tokens(self, req: p.CountTokens) -> p.TokenCount:
        """The message box's count: the prompt a Generate of req.messages + req.text would build."""
        n_ctx = self.n_ctx
        n_text, n_prompt = self.prompt.count(req.messages, req.text)
        return p.TokenCount(req.request_id, n_text, n_prompt, p.prompt_budget(n_ctx, req.max_tokens), n_ctx)

    def _switch_cache(self, tokens: list[int]) -> None:
        """Before a prefill drops most of the live cache (another conversation, an earlier branch),
        keep that cache; where a kept one shares more of `tokens` than the live one, restore it."""
        live = self.decoder.cached_prefix(tokens)
        leaving = self.decoder.kv_tokens()
        if len(leaving) - live >= MIN_GAIN_TOKENS:
            self._kv_states.save(leaving, aux=self.decoder.head_state())
        n, key = self._kv_states.best(tokens)
        if key is not None and n >= live + MIN_GAIN_TOKENS:
            self.decoder.adopt(self._kv_states.restore(key) or [], self._kv_states.restored_aux)

    def _keep_live_cache(self) -> None:
        """Before another user of the target's context (auto's measurement) drops the live cache:
        the conversation in it is kept (KvStates), so its next turn restores it, whatever mode
        then runs, instead of reading the whole conversation again."""
        if self._keep_kv and self.decoder.restorable and self.placement.n_gpu_layers == 0:
            leaving = self.decoder.kv_tokens()
            if len(leaving) >= MIN_GAIN_TOKENS:
                self._kv_states.save(leaving, aux=self.decoder.head_state())

    def _vanilla_for(self, req: p.Generate) -> VanillaDecoder | None:
        """The vanilla decoder a request with a grammar or logprobs runs in, whatever the mode: the
        accelerated modes verify drafts without a grammar and keep no logits per token. In another
        mode it is a decoder of its own on the same context, whose cache it prefills from scratch
        (the mode's cache may hold early exits' approximations); the mode prefills again after it."""
        if not req.needs_vanilla:
            return None
        if isinstance(self.decoder, VanillaDecoder):
            return self.decoder
        if self._vanilla is None:
            self._vanilla = VanillaDecoder(self.llm, self.n_ctx)
        # a restorable mode's cache is exact (what vanilla computes): the request goes on from it
        self._vanilla.adopt(self.decoder.kv_tokens() if self.decoder.restorable else [])
        self.decoder.forget()
        return self._vanilla

    # -- the batched path (engine/worker/concurrent.py drives it) -----------------------------------

    def can_batch(self, req: p.Generate) -> bool:
        """Whether this request may be decoded beside others now: a worker loaded with n_parallel > 1,
        in vanilla or ngram (as vanilla rows); grammar, logprobs and the bench's margins keep the
        one-at-a-time path."""
        return (
            self.batch is not None
            and self.mode in p.BATCHED_MODES
            and not (
                req.report_margins or req.needs_vanilla or req.preserved_tokens  # a tool chat: its text shows special tokens
            )
        )

    def start_batched(self, req: p.Generate, emit: Emit, t0: float) -> tuple[Slot, AnswerStream]:
        """Begin the request in a free slot of the batch (its prefill runs in the next steps).
        SettingsError, ContextOverflow, ChatFormatError as generate() raises them."""
        assert self.batch is not None and self.batch.free
        req.validate()
        s = req.sampling
        tokens = self._fit_prompt(req, emit)
        self._to_batch()
        if not self.batch.busy and self._governor is not None:
            self._governor.restart()
        slot = self.batch.pick(tokens)
        if self._keep_kv:
            self._switch_slot_cache(slot, tokens)
        self.llm.set_seed(s.seed if s.seed >= 0 else random.getrandbits(32))  # make_sampler's dist reads it
        self.batch.start(slot, tokens, make_sampler(self.llm, s), greedy=greedy_alone(s))
        answer = AnswerStream(req, len(tokens), slot.cached, self, emit, t0, emit_every_s=TOKEN_EMIT_S,
                              stats_every_s=STATS_INTERVAL_S, n_threads=self._threads_now,
                              long_prompt=self.llm.n_batch)  # fmt: skip
        return slot, answer

    def batch_step(self) -> list[tuple[Slot, int, bool]]:
        """One decode of the batch: (slot, token, context full) per slot that got a token."""
        assert self.batch is not None
        if self._governor is not None:
            current = self._governor.tick()
            if current != self._threads_now:
                self._set_threads(current)
        return self.batch.step()

    def is_end(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def piece(self, token: int, special: bool = False) -> bytes:
        return self._piece(token, special)

    def _switch_slot_cache(self, slot: Slot, tokens: list[int]) -> None:
        """_switch_cache for a slot of the batch: the conversation it held is kept before a prompt
        replaces most of it, and a kept one sharing more of `tokens` is restored into it."""
        live = min(common_prefix(slot.kv, tokens), len(tokens) - 1)
        if len(slot.kv) - live >= MIN_GAIN_TOKENS:
            self._kv_states.save(slot.kv, seq=slot.seq)
        n, key = self._kv_states.best(tokens)
        if key is not None and n >= live + MIN_GAIN_TOKENS:
            slot.kv = self._kv_states.restore(key, seq=slot.seq) or []

    def _to_batch(self) -> None:
        """Before the batch uses the context after the one-at-a-time path: sequence 0's cache is
        handed over (a conversation the solo path answered goes on there)."""
        assert self.batch is not None
        if not self._batch_owned:
            self.batch.forget(self.decoder.kv_tokens() if self.decoder.restorable else [])
            self._batch_owned = True

    def _to_solo(self) -> None:
        """Before the one-at-a-time path uses the context after the batch: sequence 0's cache is
        handed back, the other sequences' are dropped (their cells free again)."""
        if self.batch is None or not self._batch_owned:
            return
        if self._keep_kv:  # the conversations the batch answered in the other sequences are kept
            for slot in self.batch.slots[1:]:
                if len(slot.kv) >= MIN_GAIN_TOKENS:
                    self._kv_states.save(slot.kv, seq=slot.seq)
        seq0 = self.batch.seq0_tokens()
        self.batch.forget(seq0)
        if self.decoder.restorable:
            self.decoder.adopt(seq0)
        else:
            self.decoder.forget()
        self._batch_owned = False

    def _fit_prompt(self, req: p.Generate, emit: Emit) -> list[int]:
        """The request's prompt tokens, within the context less the answer's room (ContextOverflow
        where the request asks for a refusal; else trimmed, a context_trimmed Notice says how)."""
        n_ctx = self.n_ctx
        budget = p.prompt_budget(n_ctx, req.sampling.max_tokens)
        if req.prompt:
            fitted = self.prompt.fit_text(req.prompt, budget)
        else:
            trim = req.on_overflow == p.Overflow.TRIM
            fitted = self.prompt.fit(req.messages, budget, continue_answer=req.continue_answer, trim=trim)
        if fitted.dropped_messages or fitted.truncated_last or fitted.answer_cut:
            what = []
            if fitted.dropped_messages:
                what.append(f"the {fitted.dropped_messages} oldest messages were left out")
            if fitted.truncated_last:
                what.append(
                    f"{fitted.cut_chars} characters were cut from the middle of your last message (its start and end were kept)"
                )
            if fitted.answer_cut:
                what.append(f"the model now sees the answer without its first {fitted.answer_cut} characters")
            emit(
                p.Notice(
                    req.request_id,
                    "context_trimmed",
                    f"The conversation is longer than the {n_ctx}-token context: " + " and ".join(what) + ".",
                )
            )
        return fitted.tokens

    def generate(self, req: p.Generate, emit: Emit, cancelled: threading.Event | StopFlag, t0: float) -> None:
        req.validate()
        self._to_solo()
        s = req.sampling
        vanilla = self._vanilla_for(req)
        decoder: Decoder = vanilla if vanilla is not None else self.decoder
        mode = p.Mode.VANILLA if vanilla is not None else self.mode
        tokens = self._fit_prompt(req, emit)
        if self.placement.n_gpu_layers != 0:
            # On a GPU, prompt chunks of up to 32 rows take the one-row kernels (as verify batches
            # must, patch 0012) and longer ones the matrix kernels, so a reused prefix (leaving a
            # short chunk to prefill) rounded otherwise than a whole prefill, and an answer depended
            # on what was cached (lavapipe, 3 first layers: 7/13 answers). GPUs prefill fast: every
            # request prefills from the start, in the same chunks.
            decoder.forget()
        elif decoder is self.decoder and self.decoder.restorable and self._keep_kv:
            self._switch_cache(tokens)
        cached = decoder.cached_prefix(tokens)
        self.llm.set_seed(s.seed if s.seed >= 0 else random.getrandbits(32))
        band = auto.prompt_band(len(tokens))
        governor = self._governor
        if governor is not None:
            governor.restart()
            if self._threads_now != governor.current:
                self._set_threads(governor.current)
        threads_used = {self._threads_now}
        machine_before = self._sample()  # was the machine quiet while this answer ran?

        def details(decode: float, n_gen: int) -> dict:
            comparable = len(threads_used) == 1 and n_gen > SHOW_RATIO_AFTER and mode != p.Mode.VANILLA
            return {
                "mode": mode,
                "vs_vanilla": self.reference.ratio(decode, self._threads_now, band) if comparable else 0.0,
                "n_ctx_used": decoder.kv_used(),
                "n_threads": self._threads_now,
                "accel": decoder.accel_stats(),
            }

        def logprob(tok: int, piece: bytes) -> p.TokenLogprob:
            assert vanilla is not None
            return self._token_logprob(vanilla, tok, piece, req.top_logprobs)

        answer = AnswerStream(
            req, len(tokens), cached, self, emit, t0, emit_every_s=TOKEN_EMIT_S, stats_every_s=STATS_INTERVAL_S,
            n_threads=self._threads_now, long_prompt=self.llm.n_batch, details=details,
            logprob=logprob if req.logprobs else None, margin=decoder.last_margin if req.report_margins else None,
        )  # fmt: skip
        # logprobs and margins read the logits each token came from: one token a call then
        step_us = 0 if req.logprobs or req.report_margins else NATIVE_STEP_US

        # PromptProgress after each batch of a long prompt; on a GPU only as it starts (the prompt is
        # read in one call there: a whole prefill's chunks must stay the same, see above)
        def batch_read(n_done: int) -> None:
            answer.read(n_done)
            if governor is not None:
                # between batches too: a long prompt is read for up to minutes, and with only the
                # count the previous answer ended on it was read on one of two cores after a busy
                # spell (or on two beside a neighbour, each barrier stalled) (issue 46)
                threads_used.clear()  # the answer's speed is measured from its first token
                threads_used.add(governor.tick())

        progress = batch_read if self.placement.n_gpu_layers == 0 else None
        if vanilla is not None:
            gen = vanilla.stream(tokens, s, Grammar.of(req), step_us=step_us, progress=progress)
        else:
            gen = decoder.stream(tokens, s, step_us=step_us, progress=progress)
        reading = StopReading(self.llm.ctx, cancelled)  # Stop ends the prompt's reading mid-batch
        try:
            first = next(gen)
        except StopIteration:
            first = None
        except RuntimeError:
            if not cancelled.is_set():
                raise
            first = None  # stopped while the prompt was read: what was read of it stays cached
            answer.cancel()
        finally:
            reading.close()
        for tok in itertools.chain((first,), gen) if first is not None else ():
            if governor is not None:
                threads_used.add(governor.tick())
            if answer.add(tok, False):
                break
            if cancelled.is_set():
                answer.cancel()
                break
        gen.close()
        answer.close()
        if vanilla is not None:
            if vanilla is not self.decoder and self.decoder.restorable:
                self.decoder.adopt(vanilla.kv_tokens())  # the conversation goes on from what vanilla left
            return  # a grammar or logprobs' work makes this answer's speed no measure of the mode's
        quiet = cores_used_by_others(machine_before, self._sample()) <= TOLERATED_CORES
        if decided := self._after_answer(answer.decode_tok_s(), threads_used, band, len(answer.tokens) - 1, quiet):
            emit(decided)

    def _token_logprob(self, vanilla: VanillaDecoder, tok: int, piece: bytes, n_top: int) -> p.TokenLogprob:
        logprob, top = vanilla.logprobs(tok, n_top)
        alternatives = [p.TopLogprob(t, list(self._piece(t)), lp) for t, lp in top]
        return p.TokenLogprob(tok, list(piece), logprob, alternatives)

    def embed(self, req: p.Embed) -> p.Embeddings:
        """/v1/embeddings from the loaded model (engine/worker/embeddings.py): a context of its own on
        the same weights, made at the first request and freed with the model. EmbedInputError for an
        input that cannot be embedded (empty, too long, not token ids)."""
        if self._embedder is None:
            self._embedder = Embedder(self.llm, self.n_ctx, self.n_threads)
        return self._embedder.embed(req)
