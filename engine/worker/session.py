"""One loaded model and its generation loop, inside the worker process (llama_cpp = our native build)."""

from __future__ import annotations

import ctypes
import itertools
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import llama_cpp
from llama_cpp import Llama

from engine import protocol as p
from engine.hardware import detect as detect_hardware
from engine.hardware import physical_cores
from engine.kept_caches import kv_states_root
from engine.llm.batched import BatchedVanilla, Slot
from engine.llm.chat_prompt import ChatPrompt, looks_like_base_model
from engine.llm.decoders import (
    Decoder,
    DrafterDecoder,
    Grammar,
    SpecEEDecoder,
    VanillaDecoder,
    greedy_alone,
    make_sampler,
)
from engine.llm.kv_states import MIN_GAIN_TOKENS, KvStates, folder_key
from engine.llm.load import batch_invariant_weights, capture_head_layers, flash_attention, parallel_sequences
from engine.models.acceleration import AccelerationError, check_eagle_head, find_pack, head_target_layers, model_sha256
from engine.models.drafts import find_draft_model, same_tokenizer
from engine.models.exit_predictors import load_predictors
from engine.models.gguf_file import GGUFInfo, ModelFileError, inspect_gguf
from engine.models.registry import ModelRegistry
from engine.models.weights_check import check_weights
from engine.native import build_info, exit_archs, interrupt_hooks
from engine.paths import cache_dir
from engine.placement.weights_layout import repack_is_exact
from engine.sequences import common_prefix
from engine.worker import auto
from engine.worker.answer import AnswerStream
from engine.worker.embeddings import Embedder
from engine.worker.stop_flag import StopFlag
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
DECISIONS_VERSION = "v2"  # auto's cache key: v2 entries were measured on a quiet machine, per context length
CALIBRATION_PROMPTS = ("Write a short paragraph about the history of bread.", "Explain how a bicycle works, step by step.")
# Default draft lengths: an n-gram match is usually a copy that runs on; a draft model's guesses fade
TRAINING_FREE_DRAFT = {"ngram": 8, "draft": 3}  # ngram's copy drafter picks its length each step, up to this


class LoadError(Exception):
    def __init__(self, kind: p.ErrorKind | str, message: str) -> None:
        super().__init__(message)
        self.kind = p.ErrorKind(kind)  # a kind the protocol does not know is a bug here, not the client's to decode


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
        n_cells = _padded_ctx(placement.n_ctx) * self.n_slots if self.n_slots > 1 else placement.n_ctx
        try:
            with batch_invariant_weights(repack_is_exact(info)), parallel_sequences(self.n_slots):
                self.llm = Llama(
                    model_path=str(Path(load.model_path)),
                    n_ctx=n_cells,
                    n_batch=min(512, placement.n_ctx),
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    n_gpu_layers=placement.n_gpu_layers,
                    flash_attn=flash_attention(placement.n_gpu_layers),
                    verbose=False,
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
        model = self.llm._model
        self._vocab = model.vocab
        # other conversations' caches (CPU placements: on a GPU every request prefills, see generate)
        states_folder = None
        self._keep_kv = load.keep_kv
        if placement.n_gpu_layers == 0 and self._keep_kv:
            sha = model_sha256(Path(load.model_path))
            valid_for = folder_key(sha, build_info().get("build_key", ""), self.llm.n_ctx(), self.llm.n_batch)
            states_folder = kv_states_root() / valid_for
        self._kv_states = KvStates(self.llm._ctx.ctx, folder=states_folder, disk_budget_bytes=load.kv_disk_budget)
        self.prompt = ChatPrompt.for_model(self.llm, info.chat_template)
        self._piece_buf = ctypes.create_string_buffer(256)
        self.mode_reason = ""
        self.measured: dict[str, float] = {}
        self._auto: auto.AutoCalibration | None = None  # auto's measurement in progress
        self._keep_mode = False  # ... or an explicit mode's vanilla reference (the mode stays)
        self._auto_key_pending = ""
        self._decisions = auto.DecisionCache(cache_dir() / "auto-mode.json")
        self.reference = auto.VanillaReference()  # vanilla's speed here, per threads and prompt band
        self._auto_makers: dict | None = None  # auto's candidate modes and the key of its decision
        self._decision_key = ""
        self._answers = auto.AnswerCheck()  # do the answers bear auto's decision out?
        self._vanilla: VanillaDecoder | None = None  # requests with a grammar or logprobs in another mode
        self._embedder: Embedder | None = None  # /v1/embeddings' own context, made at the first request
        makers, why_not, acceleration = self._available_modes(load, Path(load.model_path))
        self.mode, self.decoder = self._make_decoder(load, makers, why_not)
        self.loaded = p.Loaded(
            model_path=str(load.model_path),
            name=display_name(Path(load.model_path)),
            architecture=info.architecture,
            n_layer=info.n_layer,
            n_embd=info.n_embd,
            n_vocab=model.n_vocab(),
            n_ctx=self.n_ctx,
            n_ctx_train=model.n_ctx_train(),
            n_threads=self.n_threads,
            mode=self.mode,
            mode_reason=self.mode_reason,
            load_ms=(time.perf_counter() - start) * 1000,
            measured_tok_s=self.measured,
            placement=placement,
            plan=self.plan,
            predicted_tok_s=predicted,
            chat_format_note=self._chat_format_note(info),
            trainable=acceleration.architecture_supported and not acceleration.eagle_head,
            acceleration=acceleration,
            measuring=self._auto is not None and not self._keep_mode,  # an explicit mode measures only vanilla's speed
            n_parallel=self.n_slots,
        )
        # the batched path (engine/worker/concurrent.py); batch_owned: it used the context last
        self.batch = BatchedVanilla(self.llm, self.n_slots, self.n_ctx) if self.n_slots > 1 else None
        self._batch_owned = False

    def _make_decoder(self, load: p.Load, makers: dict, why_not: dict[str, tuple[p.ErrorKind, str]]) -> tuple[p.Mode, Decoder]:
        """The one place the mode is decided. An explicit mode must be available for this model (else
        a LoadError says how to get it); `auto` starts in vanilla and measures the modes it may use in
        the background (AutoCalibration), or takes the decision cached for this model, weights,
        build and machine."""
        if load.mode == p.Mode.VANILLA:
            return p.Mode.VANILLA, VanillaDecoder(self.llm, self.n_ctx)
        model_path = Path(load.model_path)
        if load.mode != p.Mode.AUTO:
            if load.mode not in makers:
                raise LoadError(*why_not[load.mode])
            like = self._decisions.like(self._auto_key(model_path, sorted(makers)))
            self.measured = dict(like.get("speeds", {}))
            self.reference = auto.VanillaReference(like.get("vanilla_reference"))
            decoder = makers[load.mode]()
            self.mode_reason = self.mode_reason or f"{load.mode}: chosen in the settings (auto would measure the modes)"
            if not self.measured.get("vanilla") and load.measure_reference:
                # the meter says how the chosen mode compares with vanilla: measure vanilla here while
                # idle (once per model, weights, build and machine), never switching the chosen mode
                self._calibrate({}, self._auto_key(model_path, []), keep_mode=True)
            return p.Mode(load.mode), decoder
        makers = {m: make for m, make in makers.items() if m not in why_not}  # auto skips an unmeasured head
        key = self._auto_key(model_path, sorted(makers))
        self._auto_makers, self._decision_key = makers, key
        cached = self._decisions.get(key)
        if cached is not None and cached["mode"] in ("vanilla", *makers):
            self.measured = dict(cached["speeds"])
            self.reference = auto.VanillaReference(cached.get("vanilla_reference"))
            self.mode_reason = auto.explain(cached["speeds"], cached["mode"], cached.get("failed"))
            mode = p.Mode(cached["mode"])
            return mode, makers[mode]() if mode != p.Mode.VANILLA else VanillaDecoder(self.llm, self.n_ctx)
        self.mode_reason = f"auto: measuring {', '.join(makers)} against vanilla in the background; vanilla until then"
        return p.Mode.VANILLA, self._calibrate(makers, key, keep_mode=False)

    def _calibrate(self, makers: dict, key: str, keep_mode: bool) -> VanillaDecoder:
        """Start measuring `makers` against vanilla in the background (AutoCalibration); keep_mode:
        an explicit mode stays whatever the result, only the speeds are wanted. Returns vanilla's decoder."""
        vanilla = VanillaDecoder(self.llm, self.n_ctx)
        budget = self.n_ctx // 2
        prompts = [self.prompt.fit([{"role": "user", "content": text}], budget).tokens for text in CALIBRATION_PROMPTS]
        self._auto = auto.AutoCalibration(prompts, makers, vanilla, self.n_threads, self._sample)
        self._auto_key_pending, self._keep_mode = key, keep_mode
        return vanilla

    def _available_modes(self, load: p.Load, model_path: Path) -> tuple[dict, dict[str, tuple[p.ErrorKind, str]], p.Acceleration]:
        """Makers of every accelerated mode this model can run, (error kind, message) for the others
        (for `auto` also for those it may not use yet), and the same as flags for Loaded."""
        makers: dict = {"ngram": lambda: self._training_free_decoder("ngram", load, model_path)}
        why_not: dict[str, tuple[p.ErrorKind, str]] = {}
        draft = Path(load.draft_model) if load.draft_model else find_draft_model(model_path)
        if draft is not None:
            makers["draft"] = lambda: self._training_free_decoder("draft", load, model_path, draft)
        else:
            why_not["draft"] = (
                p.ErrorKind.NO_DRAFT_MODEL,
                f"No installed model shares {model_path.name}'s tokenizer and is small enough to draft for it. Add a "
                "smaller model of the same family (for Qwen2.5-Coder-1.5B: `specee models fetch qwen2.5-coder-0.5b`), "
                "or use ngram mode.",
            )
        arch = self.info.architecture
        supported = arch in exit_archs()  # the native library's list (specee_exit_archs)
        pack = find_pack(model_path) if supported else None
        head = pack.eagle_head if pack else None
        exits = pack.exit_predictors if pack else None
        flags = p.Acceleration(
            architecture_supported=supported,
            eagle_head=head is not None,
            eagle_measured=bool(pack and head and pack.eagle_measured),
            exit_predictors=exits is not None,
            draft_model=draft.name if draft else "",
        )

        def missing(what: str, cmd: str) -> tuple[p.ErrorKind, str]:
            return (p.ErrorKind.NO_ACCELERATION, f"No {what} is installed for {model_path.name}. Train it with "
                                                 f"`specee train {cmd} --model {model_path}`, or use vanilla mode.")  # fmt: skip

        if not supported:
            why = f"mode is not available for {arch!r} models (supported: {', '.join(exit_archs())}); use ngram or vanilla."
            for mode in ("eagle", "specee"):
                why_not[mode] = (p.ErrorKind.UNSUPPORTED_ARCHITECTURE, f"{mode} {why}")
        elif head is None:
            why_not["eagle"] = why_not["specee"] = missing("EAGLE head", "eagle")
        else:
            makers["eagle"] = lambda: self._eagle_decoder(load, pack, head)
            if exits is None:
                why_not["specee"] = missing("SpecEE exit predictors", "exits")
            else:
                makers["specee"] = lambda: self._specee_decoder(model_path, head, exits, load)
            if load.mode != p.Mode.VANILLA and self.placement.n_gpu_layers != 0:
                self._capture_head_layers(head)
            if not flags.eagle_measured and load.mode == p.Mode.AUTO:
                # explicit eagle/specee run; only auto leaves an unmeasured head out (see _make_decoder)
                assert pack is not None
                repo = pack.manifest["eagle"]["source"].get("repo", "REPO")
                unmeasured = (f"auto does not use the EAGLE head imported from {repo} before the engine measured it: "
                              f"`specee models import-head {model_path} {repo}` measures it (eagle mode works now)")  # fmt: skip
                why_not["eagle"] = why_not["specee"] = (p.ErrorKind.NOT_MEASURED, unmeasured)
        flags.modes = [p.Mode.VANILLA, *(p.Mode(m) for m in makers)]
        return makers, why_not, flags

    def _capture_head_layers(self, head: Path) -> None:
        """On a GPU backend, before the first decode: see capture_head_layers."""
        try:
            layers = head_target_layers(head)
        except AccelerationError:
            return  # the decoder that needs the head says what is wrong with it, when asked for
        capture_head_layers(self.llm, layers)

    def _auto_key(self, model_path: Path, modes: list[str]) -> str:
        """What auto's decision depends on: the model, the weights, the native build, the machine."""
        pack = find_pack(model_path)
        stamps = []
        for f in sorted(pack.folder.iterdir()) if pack else []:
            st = f.stat()
            stamps.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
        pl = self.placement
        build = build_info().get("build_key", "")
        return (f"{DECISIONS_VERSION}|{model_sha256(model_path)}|{','.join(stamps)}|{build}|{detect_hardware().cpu_model}|"
                f"{self.n_threads}|{pl.n_ctx}|{pl.layout}:{pl.n_gpu_layers}|{','.join(modes)}")  # fmt: skip

    def has_background_work(self) -> bool:
        return self._auto is not None

    def background_step(self, interrupted: Callable[[], bool]) -> p.AutoDecided | None:
        """One unit of auto's measurement; the decision once the last unit ran (or, when a unit had to
        be set aside because other processes were busy, word that the measurement waits)."""
        cal = self._auto
        assert cal is not None
        if cal.waiting:
            return None
        self._to_solo()
        if self._threads_now != self.n_threads:
            self._set_threads(self.n_threads)  # measured with every thread (a busy machine's units don't count)
        was_postponed = cal.postponed
        self._keep_live_cache()  # the measurement uses the target's KV cache: the conversation's is kept
        cal.step(interrupted)
        self.decoder.forget()
        if cal.postponed and not was_postponed:  # say so once, not at every retry
            busy = f"other programs kept {cal.busy_cores:.1f} cores busy while it measured"
            if self._keep_mode:  # the chosen mode stays: only its comparison with vanilla waits
                why = f"{self.mode_reason}; vanilla's speed here is measured once the machine is quiet ({busy})"
                return p.AutoDecided(mode=self.mode, mode_reason=why, measured_tok_s=self.measured)
            self.mode_reason = why = (f"auto: {busy}, so it waits for a quiet machine before it decides (speeds "
                                      f"measured beside a busy neighbour mislead); {self.mode} until then")  # fmt: skip
            self.loaded.mode_reason = why
            return p.AutoDecided(mode=self.mode, mode_reason=why, measured_tok_s=self.measured, measuring=True)
        if not cal.done:
            return None
        speeds = cal.speeds()
        reference = cal.reference()
        if self._keep_mode:
            mode = self.mode
            self._decisions.put(self._auto_key_pending, p.Mode.VANILLA, speeds, cal.failed, reference)
            cal.close()
            self.mode_reason = f"{self.mode_reason}; vanilla measured here: {speeds['vanilla']:.1f} tok/s".lstrip("; ")
        else:
            mode = p.Mode(auto.choose(speeds))
            self._decisions.put(self._auto_key_pending, mode, speeds, cal.failed, reference)
            self.decoder = cal.take(mode)
            self.mode_reason = auto.explain(speeds, mode, cal.failed)
        self.mode, self._auto = mode, None
        self.measured = speeds
        self.reference.speeds.update(reference)
        self._answers = auto.AnswerCheck()
        self.loaded.mode, self.loaded.mode_reason, self.loaded.measured_tok_s = mode, self.mode_reason, speeds
        self.loaded.measuring = False
        return p.AutoDecided(mode=mode, mode_reason=self.mode_reason, measured_tok_s=speeds)

    def _after_answer(self, tok_s: float, threads: set[int], band: int, n_decoded: int, quiet: bool) -> p.AutoDecided | None:
        """What an answer's speed teaches: vanilla's own speed in its conditions, and whether auto's
        decision holds; when the answers contradict it, it is forgotten and measured again. An answer
        that ran beside a busy neighbour teaches nothing (nor does a short one, or one whose threads changed)."""
        if not quiet or len(threads) != 1 or n_decoded < auto.MIN_COMPARE_TOKENS or tok_s <= 0:
            return None
        (n_threads,) = threads
        if self.mode == p.Mode.VANILLA:
            self.reference.record(n_threads, band, tok_s)
            return None
        ratio = self.reference.ratio(tok_s, n_threads, band)
        if self._auto_makers is None or self._auto is not None or not self._answers.add(ratio):
            return None
        was = self.mode
        self._keep_live_cache()  # the decoder goes: its conversation is kept for the next turn
        self._decisions.forget(self._decision_key)
        old, self.decoder = self.decoder, self._calibrate(self._auto_makers, self._decision_key, keep_mode=False)
        old.close()
        self.mode = p.Mode.VANILLA
        self.mode_reason = (
            f"auto: {auto.CONTRADICTIONS} answers in a row ran slower in {was} ({ratio:.2f}x) than vanilla measured "
            "here in the same conditions, so its decision is measured again; vanilla until then"
        )
        self.loaded.mode, self.loaded.mode_reason, self.loaded.measuring = self.mode, self.mode_reason, True
        return p.AutoDecided(mode=self.mode, mode_reason=self.mode_reason, measured_tok_s=self.measured, measuring=True)

    def _eagle_decoder(self, load: p.Load, pack, head: Path) -> DrafterDecoder:  # type: ignore[no-untyped-def]
        try:
            check_eagle_head(head, Path(load.model_path))
            # an explicit chain length is verified whole every step, as asked; by default the chain is
            # the head's trained length and each step verifies only the drafts that pay here
            n_draft = load.n_draft or int(pack.manifest.get("eagle", {}).get("n_draft", 3))
            gated = not load.n_draft
            return DrafterDecoder(self.llm, "eagle", n_draft, self.n_threads, head, self._head_on_gpu(), gated=gated)
        except AccelerationError as exc:
            raise LoadError(exc.kind, str(exc)) from exc
        except RuntimeError as exc:
            raise LoadError(p.ErrorKind.BAD_HEAD, f"the EAGLE head {head.name} could not be used: {exc}") from exc

    def _training_free_decoder(self, mode: str, load: p.Load, model_path: Path, draft: Path | None = None) -> DrafterDecoder:
        if mode == "ngram":
            drafter = load.drafter or "copy"
            if drafter == "copy":
                reason = ("ngram: continuations found in the conversation are drafted where they are likely "
                          "to pay on this machine, else one token is decoded as vanilla does")  # fmt: skip
            else:
                reason = f"ngram: llama.cpp's {drafter} drafter proposes continuations found in the context"
        else:
            drafter = "draft-simple"
            assert draft is not None
            try:
                if not same_tokenizer(draft, model_path):
                    why = f"{draft.name} has another tokenizer than {model_path.name}; it cannot draft for it."
                    raise LoadError(p.ErrorKind.BAD_DRAFT_MODEL, why)
            except ModelFileError as exc:
                raise LoadError(p.ErrorKind.BAD_DRAFT_MODEL, f"the draft model cannot be used: {exc}") from exc
            reason = f"draft: {draft.name} (same tokenizer) drafts, {model_path.name} verifies"
        n_draft = load.n_draft or TRAINING_FREE_DRAFT[mode]
        try:
            decoder = DrafterDecoder(self.llm, drafter, n_draft, self.n_threads, draft, self._head_on_gpu())
        except RuntimeError as exc:
            raise LoadError(p.ErrorKind.BAD_DRAFT, f"{mode} mode could not start: {exc}") from exc
        if load.mode == mode:
            self.mode_reason = reason
        return decoder

    def _head_on_gpu(self) -> bool:
        """The EAGLE head sits with the layers that feed it: on the GPU only when the target's last
        layer is there (llama.cpp's default would put it on the GPU whatever the target's split)."""
        return self.placement.last_layer_on_gpu(self.info.n_layer)

    def _specee_decoder(self, model_path: Path, head: Path, exits: Path, load: p.Load) -> SpecEEDecoder:
        try:
            check_eagle_head(head, model_path)
            preds = load_predictors(exits, model_path)
            return SpecEEDecoder(self.llm, head, preds, self.n_threads, exits=load.exits, shadow_every=load.exit_check_every,
                                 fill=load.exit_fill, head_on_gpu=self._head_on_gpu())  # fmt: skip
        except AccelerationError as exc:
            raise LoadError(exc.kind, str(exc)) from exc
        except RuntimeError as exc:
            raise LoadError(p.ErrorKind.BAD_PREDICTORS, f"SpecEE could not start with {exits.name}: {exc}") from exc

    def close(self) -> None:
        if self._auto is not None:
            self._auto.close()
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
        llama_cpp.llama_set_n_threads(self.llm._ctx.ctx, n, n)
        self.decoder.set_threads(n)
        self._threads_now = n

    def _chat_format_note(self, info: GGUFInfo) -> str:
        if self.prompt.has_template:
            return ""
        note = (
            f"This model file carries no chat template, so conversations are formatted as {self.prompt.format_name}"
            f" (llama.cpp's format for {info.architecture or 'this'} models)."
        )
        if looks_like_base_model(info.name, False):
            note += (
                " It also looks like a base model, not a chat model: it continues text rather than answering."
                " For conversations, pick an instruct or chat version of it."
            )
        return note

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
        progress = answer.read if self.placement.n_gpu_layers == 0 else None
        if vanilla is not None:
            gen = vanilla.stream(tokens, s, Grammar.of(req), step_us=step_us, progress=progress)
        else:
            gen = decoder.stream(tokens, s, step_us=step_us, progress=progress)
        reading = _StopReading(self.llm._ctx.ctx, cancelled)  # Stop ends the prompt's reading mid-batch
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


class _StopReading:
    """While a prompt is read: the target context's abort callback reads the request's stop flag,
    so a Stop ends llama_decode between graph nodes (it returns 2 and drops that batch's rows).
    Only then: a decode step stopped midway would lose where the cache ends. A plain
    threading.Event (tests driving a session directly) stops between tokens only."""

    def __init__(self, ctx: int, cancelled: threading.Event | StopFlag) -> None:
        self._ctx = ctx
        self._on = isinstance(cancelled, StopFlag)
        if self._on:
            set_abort, requested = interrupt_hooks()
            set_abort(ctx, requested, cancelled.address)

    def close(self) -> None:
        if self._on:
            interrupt_hooks()[0](self._ctx, None, None)
            self._on = False


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
    EngineSession._make_decoder (explicit, or auto's measurement)."""
    asked = load.placement
    if asked.layout != "auto":
        where = "all" if asked.n_gpu_layers < 0 else str(asked.n_gpu_layers)
        return asked, f"explicit placement: {where} layers ({asked.layout}) on the GPU, the rest on the CPU", {}
    from engine.placement.auto import placement_for

    try:
        may_exit = load.mode in (p.Mode.SPECEE, p.Mode.AUTO)
        placement, plan = placement_for(load.model_path, asked.n_ctx, asked.n_threads, may_exit)
    except (ModelFileError, OSError, RuntimeError, ValueError, KeyError) as exc:
        cpu = p.Placement(n_ctx=asked.n_ctx, n_threads=asked.n_threads, n_gpu_layers=0, layout="last")
        return cpu, f"no placement plan ({exc}); all layers on the CPU", {}
    prefix = "cpu/" if plan.layout == "cpu" else f"{plan.layout}-layers/"
    predicted = {key.removeprefix(prefix): tok_s for key, tok_s in plan.alternatives.items() if key.startswith(prefix)}
    return placement, plan.explanation, predicted


def _padded_ctx(n_ctx: int) -> int:
    """The context llama.cpp makes of n_ctx (a multiple of 256): a sequence of a batched context
    gets the room a one-sequence context would have."""
    return -(-n_ctx // 256) * 256
