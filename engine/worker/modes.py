"""Which accelerated modes a loaded model can run, and their decoders' makers: ngram always, draft with
a smaller model of the same tokenizer, eagle and specee with a trained (or imported) acceleration pack
for an architecture our native build hooks. A mode that cannot run says why, as the LoadError an
explicit choice of it gets. Which mode runs is decided elsewhere (engine/worker/auto_mode.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine import protocol as p
from engine.llm.decoders import Decoder, DrafterDecoder, SpecEEDecoder, VanillaDecoder
from engine.llm.load import capture_head_layers
from engine.llm.target import Target
from engine.models.acceleration import AccelerationError, AccelerationPack, check_eagle_head, find_pack, head_target_layers
from engine.models.drafts import find_draft_model, same_tokenizer
from engine.models.exit_predictors import load_predictors
from engine.models.gguf_file import GGUFInfo, ModelFileError
from engine.native import exit_archs

# Default draft lengths: an n-gram match is usually a copy that runs on; a draft model's guesses fade
TRAINING_FREE_DRAFT = {"ngram": 8, "draft": 3}  # ngram's copy drafter picks its length each step, up to this


class LoadError(Exception):
    def __init__(self, kind: p.ErrorKind | str, message: str) -> None:
        super().__init__(message)
        self.kind = p.ErrorKind(kind)  # a kind the protocol does not know is a bug here, not the client's to decode


class ModeMakers:
    """For one loaded target: `makers`, a decoder maker per accelerated mode this model can run;
    `why_not`, (error kind, message) for the others (for `auto` also for those it may not use yet);
    `acceleration`, the same as flags for Loaded; `vanilla()`, a plain decoder on the same context.
    A GPU placement captures the EAGLE head's layers here, before the first decode."""

    def __init__(self, load: p.Load, llm: Target, info: GGUFInfo, placement: p.Placement, n_ctx: int, n_threads: int) -> None:
        self.load, self.llm, self.info, self.placement = load, llm, info, placement
        self.n_ctx, self.n_threads = n_ctx, n_threads
        self.chosen_reason = ""  # what an explicitly chosen ngram or draft mode says of itself, once made
        self.makers, self.why_not, self.acceleration = self._available(load, Path(load.model_path))

    def vanilla(self) -> VanillaDecoder:
        return VanillaDecoder(self.llm, self.n_ctx)

    def _available(
        self, load: p.Load, model_path: Path
    ) -> tuple[dict[str, Callable[[], Decoder]], dict[str, tuple[p.ErrorKind, str]], p.Acceleration]:
        makers: dict[str, Callable[[], Decoder]] = {"ngram": lambda: self._training_free_decoder("ngram", load, model_path)}
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
            for mode in ("eagle", "specee", "combined"):
                why_not[mode] = (p.ErrorKind.UNSUPPORTED_ARCHITECTURE, f"{mode} {why}")
        elif head is None:
            why_not["eagle"] = why_not["specee"] = why_not["combined"] = missing("EAGLE head", "eagle")
        else:
            makers["eagle"] = lambda: self._eagle_decoder(load, pack, head)
            if exits is None:
                why_not["specee"] = why_not["combined"] = missing("SpecEE exit predictors", "exits")
            else:
                makers["specee"] = lambda: self._specee_decoder(model_path, head, exits, load)
                # the copy drafter's draft lengths, as ngram's
                makers["combined"] = lambda: self._specee_decoder(model_path, head, exits, load, TRAINING_FREE_DRAFT["ngram"])
            if load.mode != p.Mode.VANILLA and self.placement.n_gpu_layers != 0:
                self._capture_head_layers(head)
            if not flags.eagle_measured and load.mode == p.Mode.AUTO:
                # explicit eagle/specee run; only auto leaves an unmeasured head out (see AutoMode.start)
                assert pack is not None
                repo = pack.manifest["eagle"]["source"].get("repo", "REPO")
                unmeasured = (f"auto does not use the EAGLE head imported from {repo} before the engine measured it: "
                              f"`specee models import-head {model_path} {repo}` measures it (eagle mode works now)")  # fmt: skip
                why_not["eagle"] = why_not["specee"] = why_not["combined"] = (p.ErrorKind.NOT_MEASURED, unmeasured)
        flags.modes = [p.Mode.VANILLA, *(p.Mode(m) for m in makers)]
        return makers, why_not, flags

    def _capture_head_layers(self, head: Path) -> None:
        """On a GPU backend, before the first decode: see capture_head_layers."""
        try:
            layers = head_target_layers(head)
        except AccelerationError:
            return  # the decoder that needs the head says what is wrong with it, when asked for
        capture_head_layers(self.llm, layers)

    def _eagle_decoder(self, load: p.Load, pack: AccelerationPack | None, head: Path) -> DrafterDecoder:
        try:
            check_eagle_head(head, Path(load.model_path))
            # an explicit chain length is verified whole every step, as asked; by default the chain is
            # the head's trained length and each step verifies only the drafts that pay here
            assert pack is not None  # the head is the pack's
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
            self.chosen_reason = reason
        return decoder

    def _head_on_gpu(self) -> bool:
        """The EAGLE head sits with the layers that feed it: on the GPU only when the target's last
        layer is there (llama.cpp's default would put it on the GPU whatever the target's split)."""
        return self.placement.last_layer_on_gpu(self.info.n_layer)

    def _specee_decoder(self, model_path: Path, head: Path, exits: Path, load: p.Load, copy_draft: int = 0) -> SpecEEDecoder:
        """specee, or with copy_draft > 0 the combined mode (copy drafts of up to that many tokens)."""
        try:
            check_eagle_head(head, model_path)
            preds = load_predictors(exits, model_path)
            return SpecEEDecoder(self.llm, head, preds, self.n_threads, exits=load.exits, shadow_every=load.exit_check_every,
                                 fill=load.exit_fill, head_on_gpu=self._head_on_gpu(),
                                 copy_draft=load.n_draft or copy_draft if copy_draft else 0)  # fmt: skip
        except AccelerationError as exc:
            raise LoadError(exc.kind, str(exc)) from exc
        except RuntimeError as exc:
            raise LoadError(p.ErrorKind.BAD_PREDICTORS, f"SpecEE could not start with {exits.name}: {exc}") from exc
