"""Which mode a loaded model runs, and why: an explicit choice, auto's cached decision for this model,
weights, build and machine, or auto's measurement in the worker's idle time (engine/worker/auto.py's
AutoCalibration) and its re-check by the answers that follow (AnswerCheck). The session asks and
tells: start() at load, background_step() while idle, after_answer() after each answer. The session
owns the decoder and the target's context; AutoMode makes the decoders it decides on and hands
them over, and mode, mode_reason, measured and reference say where it stands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine import protocol as p
from engine.hardware import detect as detect_hardware
from engine.llm.chat_prompt import ChatPrompt
from engine.llm.decoders import Decoder
from engine.models.acceleration import find_pack, model_sha256
from engine.native import build_info
from engine.paths import cache_dir
from engine.worker import auto
from engine.worker.modes import LoadError, ModeMakers
from engine.worker.threads import CpuSample

# auto's cache key: v2 entries were measured on a quiet machine, per context length; v3 on the four
# kinds of request below (v2's two were free writing only, where neither copying nor exits pay much)
DECISIONS_VERSION = "v3"
# What users ask, one of each kind the modes differ on: free writing, an explanation, code, and an
# answer that reuses the words it was given (where copy drafts pay)
CALIBRATION_PROMPTS = (
    "Write a short paragraph about the history of bread.",
    "Explain how a bicycle works, step by step.",
    "Write a Python function that returns the largest of three numbers, with a docstring and two examples.",
    "Rewrite in the passive voice, then list every noun: The committee approved the new budget for the "
    "city library on Tuesday, and the mayor thanked the volunteers who had organised the book fair.",
)


class AutoMode:
    """The one place the mode is decided, for a Load that passed Load.validate(). Not thread-safe:
    the session calls it from the model thread."""

    def __init__(
        self,
        load: p.Load,
        modes: ModeMakers,
        prompt: ChatPrompt,
        placement: p.Placement,
        n_threads: int,
        sample: Callable[[], CpuSample],
    ) -> None:
        self.load, self.modes, self.prompt, self.placement = load, modes, prompt, placement
        self.n_threads, self._sample = n_threads, sample
        self.mode = p.Mode.VANILLA
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
        self._ratio = 0.0  # the last answer's speed against vanilla's (after_answer)

    @property
    def background_work(self) -> bool:
        """A measurement runs in the idle time (auto's, or an explicit mode's vanilla reference)."""
        return self._auto is not None

    @property
    def measuring(self) -> bool:
        """auto measures the modes (Loaded.measuring): an explicit mode measures only vanilla's speed."""
        return self._auto is not None and not self._keep_mode

    @property
    def waiting(self) -> bool:
        """The measurement was set aside for a busy machine: no unit to run yet."""
        return self._auto is not None and self._auto.waiting

    def start(self) -> Decoder:
        """The decoder the load starts with. An explicit mode must be available for this model (else
        a LoadError says how to get it); `auto` starts in vanilla and measures the modes it may use in
        the background (AutoCalibration), or takes the decision cached for this model, weights,
        build and machine."""
        load, makers, why_not = self.load, self.modes.makers, self.modes.why_not
        if load.mode == p.Mode.VANILLA:
            self.mode = p.Mode.VANILLA
            return self.modes.vanilla()
        model_path = Path(load.model_path)
        if load.mode != p.Mode.AUTO:
            if load.mode not in makers:
                raise LoadError(*why_not[load.mode])
            like = self._decisions.like(self._auto_key(model_path, sorted(makers)))
            self.measured = dict(like.get("speeds", {}))
            self.reference = auto.VanillaReference(like.get("vanilla_reference"))
            decoder = makers[load.mode]()
            self.mode_reason = self.modes.chosen_reason or f"{load.mode}: chosen in the settings (auto would measure the modes)"
            if not self.measured.get("vanilla") and load.measure_reference:
                # the meter says how the chosen mode compares with vanilla: measure vanilla here while
                # idle (once per model, weights, build and machine), never switching the chosen mode
                self._calibrate({}, self._auto_key(model_path, []), keep_mode=True)
            self.mode = p.Mode(load.mode)
            return decoder
        makers = {m: make for m, make in makers.items() if m not in why_not}  # auto skips an unmeasured head
        key = self._auto_key(model_path, sorted(makers))
        self._auto_makers, self._decision_key = makers, key
        cached = self._decisions.get(key)
        if cached is not None and cached["mode"] in ("vanilla", *makers):
            self.measured = dict(cached["speeds"])
            self.reference = auto.VanillaReference(cached.get("vanilla_reference"))
            self.mode_reason = auto.explain(cached["speeds"], cached["mode"], cached.get("failed"))
            self.mode = p.Mode(cached["mode"])
            return makers[self.mode]() if self.mode != p.Mode.VANILLA else self.modes.vanilla()
        self.mode_reason = f"auto: measuring {', '.join(makers)} against vanilla in the background; vanilla until then"
        self.mode = p.Mode.VANILLA
        return self._calibrate(makers, key, keep_mode=False)

    def _calibrate(self, makers: dict, key: str, keep_mode: bool) -> Decoder:
        """Start measuring `makers` against vanilla in the background (AutoCalibration); keep_mode:
        an explicit mode stays whatever the result, only the speeds are wanted. Returns vanilla's decoder."""
        vanilla = self.modes.vanilla()
        budget = self.modes.n_ctx // 2
        prompts = [self.prompt.fit([{"role": "user", "content": text}], budget).tokens for text in CALIBRATION_PROMPTS]
        self._auto = auto.AutoCalibration(prompts, makers, vanilla, self.n_threads, self._sample)
        self._auto_key_pending, self._keep_mode = key, keep_mode
        return vanilla

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

    def background_step(self, interrupted: Callable[[], bool], live: Decoder) -> tuple[p.AutoDecided | None, Decoder | None]:
        """One unit of auto's measurement on the target's context, whose live decoder forgets what the
        unit left. Returns the event to send (the decision once the last unit ran, or word that the
        measurement waits when a unit had to be set aside because other processes were busy) and
        the decoder the session switches to (None: it keeps its own)."""
        cal = self._auto
        assert cal is not None
        was_postponed = cal.postponed
        cal.step(interrupted)
        live.forget()
        if cal.postponed and not was_postponed:  # say so once, not at every retry
            busy = f"other programs kept {cal.busy_cores:.1f} cores busy while it measured"
            if self._keep_mode:  # the chosen mode stays: only its comparison with vanilla waits
                why = f"{self.mode_reason}; vanilla's speed here is measured once the machine is quiet ({busy})"
                return p.AutoDecided(mode=self.mode, mode_reason=why, measured_tok_s=self.measured), None
            self.mode_reason = why = (f"auto: {busy}, so it waits for a quiet machine before it decides (speeds "
                                      f"measured beside a busy neighbour mislead); {self.mode} until then")  # fmt: skip
            return p.AutoDecided(mode=self.mode, mode_reason=why, measured_tok_s=self.measured, measuring=True), None
        if not cal.done:
            return None, None
        speeds = cal.speeds()
        reference = cal.reference()
        decoder = None
        if self._keep_mode:
            mode = self.mode
            self._decisions.put(self._auto_key_pending, p.Mode.VANILLA, speeds, cal.failed, reference)
            cal.close()
            self.mode_reason = f"{self.mode_reason}; vanilla measured here: {speeds['vanilla']:.1f} tok/s".lstrip("; ")
        else:
            mode = p.Mode(auto.choose(speeds))
            self._decisions.put(self._auto_key_pending, mode, speeds, cal.failed, reference)
            decoder = cal.take(mode)
            self.mode_reason = auto.explain(speeds, mode, cal.failed)
        self.mode, self._auto = mode, None
        self.measured = speeds
        self.reference.speeds.update(reference)
        self._answers = auto.AnswerCheck()
        return p.AutoDecided(mode=mode, mode_reason=self.mode_reason, measured_tok_s=speeds), decoder

    def after_answer(self, tok_s: float, threads: set[int], band: int, n_decoded: int, quiet: bool) -> bool:
        """What an answer's speed teaches: vanilla's own speed in its conditions, and whether auto's
        decision holds. True when the answers contradict it: the session keeps its live cache, then
        calls measure_again(). An answer that ran beside a busy neighbour teaches nothing (nor does a
        short one, or one whose threads changed)."""
        if not quiet or len(threads) != 1 or n_decoded < auto.MIN_COMPARE_TOKENS or tok_s <= 0:
            return False
        (n_threads,) = threads
        if self.mode == p.Mode.VANILLA:
            self.reference.record(n_threads, band, tok_s)
            return False
        self._ratio = ratio = self.reference.ratio(tok_s, n_threads, band)
        return not (self._auto_makers is None or self._auto is not None or not self._answers.add(ratio))

    def measure_again(self) -> tuple[p.AutoDecided, Decoder]:
        """The answers contradicted auto's decision: it is forgotten and measured again, in vanilla
        until then. Returns the event and vanilla's decoder (the session closes the one it replaces)."""
        assert self._auto_makers is not None
        was = self.mode
        self._decisions.forget(self._decision_key)
        vanilla = self._calibrate(self._auto_makers, self._decision_key, keep_mode=False)
        self.mode = p.Mode.VANILLA
        self.mode_reason = (
            f"auto: {auto.CONTRADICTIONS} answers in a row ran slower in {was} ({self._ratio:.2f}x) than vanilla measured "
            "here in the same conditions, so its decision is measured again; vanilla until then"
        )
        return p.AutoDecided(mode=self.mode, mode_reason=self.mode_reason, measured_tok_s=self.measured, measuring=True), vanilla

    def close(self) -> None:
        if self._auto is not None:
            self._auto.close()
