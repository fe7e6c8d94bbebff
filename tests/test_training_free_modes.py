"""Training-free lossless modes on the real worker: `ngram` (our copy drafter, or llama.cpp's prompt-lookup drafters) and
`draft` (a smaller model with the target's tokenizer, paired by the tokenizer's hash). Like `eagle`,
every emitted token is the target's own, so greedy answers equal vanilla's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import protocol as p
from engine.bench.fidelity import ended_early, first_divergence
from engine.client import WorkerClient, WorkerError
from engine.models.drafts import find_draft_model
from engine.models.registry import ModelRecord, ModelRegistry
from engine.prompts import DEV_PROMPTS, load_prompts
from tests.conftest import BACKENDS, device_cases, exact_on, placement_for_backend
from tests.tiny_models import write_tiny_gguf

COPY = [{"role": "user", "content": "Repeat exactly, twice: The quick brown fox jumps over the lazy dog near the river bank."}]


@pytest.fixture(scope="module")
def tiny_draft(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Path:
    """A tiny random model with the default model's tokenizer: a draft that is mostly wrong, which is
    what shows that verification keeps the target's answer."""
    return write_tiny_gguf(tmp_path_factory.mktemp("draft") / "tiny-draft.gguf", "llama", tied=False, tokenizer_from=model_path)


@pytest.fixture(scope="module")
def vanilla(model_path: Path) -> Iterator[WorkerClient]:
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=2048), mode="vanilla")
        yield client


def _done(client: WorkerClient, messages: list[dict[str, str]], n: int = 48, margins: bool = False) -> tuple[p.Done, dict]:
    events = list(client.events_of(client.generate(messages, p.Sampling.greedy(n), report_margins=margins)))
    done = events[-1]
    assert isinstance(done, p.Done)
    stats = [e for e in events if isinstance(e, p.Stats)]
    return done, stats[-1].accel if stats else {}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["ngram", "draft"])
def test_greedy_output_equals_vanilla(model_path: Path, tiny_draft: Path, backend: str, mode: str) -> None:
    placement = placement_for_backend(backend)
    prompts = [COPY] + [[{"role": "user", "content": q.text}] for q in load_prompts(DEV_PROMPTS)[::25][:4]]
    prompts = device_cases(prompts, backend, keep=2)  # the copy case (ngram must draft) and one more
    with WorkerClient() as vanilla, WorkerClient() as spec:
        vanilla.load(model_path, placement, mode="vanilla")
        loaded = spec.load(model_path, placement, mode=mode, draft_model=str(tiny_draft) if mode == "draft" else "")
        assert loaded.mode == mode and loaded.mode_reason
        accepted = 0
        for messages in prompts:
            want, _ = _done(vanilla, messages, margins=True)
            got, accel = _done(spec, messages)
            assert not ended_early(got.tokens, got.finish_reason, want.tokens)
            d = first_divergence(got.tokens, want.tokens, want.margins)
            assert d is None if exact_on(backend) else (d is None or d.is_tie), d
            assert accel["drafted"] >= accel["accepted"] >= 0
            accepted += accel["accepted"]
    if mode == "ngram":
        assert accepted > 0, "copying text must let prompt lookup propose accepted tokens"


def test_copy_drafting_drafts_long_runs_where_the_answer_copies(model_path: Path) -> None:
    """ngram's default drafter (copy) drafts what followed the longest earlier match of the context:
    on a list to copy, most steps emit several tokens, all confirmed by the target. (Where it does
    not pay it decodes one row; the bench measures that per category.)"""
    with WorkerClient() as client:
        loaded = client.load(model_path, p.Placement(n_ctx=1024), mode="ngram")
        assert "drafted where they are likely to pay" in loaded.mode_reason
        to_copy = "Copy this list exactly: " + "alpha, beta, gamma, delta, " * 6
        _, accel = _done(client, [{"role": "user", "content": to_copy}], n=64)
        assert accel["acceptance_length"] > 1.5 and accel["accept_rate"] > 0.7, accel


def test_copy_drafter_learns_from_the_steps_it_does_not_draft(model_path: Path) -> None:
    """A match of 2 tokens is a weak hint a priori (estimated acceptance 0.25 with one earlier
    occurrence, 0.31 where several went on alike: too low for a draft to pay), so the drafter never
    verifies one to find out; but every step that decodes one row shows whether such a match's next
    token came true. On a list to copy they mostly do, and the estimates rise from their priors
    within one answer, without a verify paid for it."""
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=1024), mode="ngram")
        to_copy = "Copy this list exactly: " + "alpha, beta, gamma, delta, " * 6
        _, accel = _done(client, [{"role": "user", "content": to_copy}], n=64)
        learnt = accel["copy_acceptance"]
        # priors 0.25 (one earlier occurrence) and 0.31 (several, all going on alike)
        assert learnt["2 one"] > 0.3 and learnt["2 agree"] > 0.5, learnt


def test_another_of_llamas_ngram_drafters_and_a_bad_name(model_path: Path, vanilla: WorkerClient) -> None:
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=1024), mode="ngram", drafter="ngram-map-k")
        assert _done(client, COPY)[0].tokens == _done(vanilla, COPY)[0].tokens
        with pytest.raises(WorkerError, match="ngram-simple") as err:
            client.load(model_path, p.Placement(n_ctx=1024), mode="ngram", drafter="ngram-magic")
        assert err.value.kind == "bad_draft"


def test_draft_models_pair_by_tokenizer(model_path: Path, tiny_draft: Path, tmp_path: Path, isolated_data: Path) -> None:
    registry = ModelRegistry()
    assert find_draft_model(model_path, registry) is None
    registry.add(ModelRecord("tiny", str(tiny_draft), "x", tiny_draft.stat().st_size, "test"))
    registry.add(ModelRecord("target", str(model_path), "y", model_path.stat().st_size, "test"))
    assert find_draft_model(model_path, registry) == tiny_draft  # same tokenizer, far smaller
    assert find_draft_model(tiny_draft, registry) is None  # the target is no draft for its own draft
    other = tmp_path / "other-tokenizer.gguf"
    data = bytearray(tiny_draft.read_bytes())
    entry = (12).to_bytes(8, "little") + b"<|im_start|>"  # the length-prefixed vocabulary entry
    i = data.index(entry) + 8
    data[i : i + 12] = b"<|im_begin|>"  # same length: the file stays valid, the tokenizer differs
    other.write_bytes(bytes(data))
    registry.remove("tiny")
    registry.add(ModelRecord("other", str(other), "z", other.stat().st_size, "test"))
    assert find_draft_model(model_path, registry) is None


def test_draft_mode_without_a_draft_model_says_what_to_do(model_path: Path, isolated_data: Path) -> None:
    with WorkerClient() as client, pytest.raises(WorkerError, match="ngram mode") as err:
        client.load(model_path, p.Placement(n_ctx=1024), mode="draft")
    assert err.value.kind == "no_draft_model"


@pytest.mark.parametrize("drafter", ["copy", "ngram-simple"])
def test_several_steps_a_call_answer_as_one_step_a_call(model_path: Path, drafter: str, native_build) -> None:
    """specee_drafter_steps (the worker's step_us > 0): the same answer as one step a call, no step
    begun past max_tokens, and a cache that says what it holds when the consumer stops early."""
    from engine.llm.decoders import DrafterDecoder
    from engine.llm.target import Target

    llm = Target.load(model_path, n_ctx=1024, n_batch=64, n_threads=2)
    text = f"<|im_start|>user\n{COPY[0]['content']}<|im_end|>\n<|im_start|>assistant\n"
    tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
    answers = []
    for step_us in (0, 10**9):
        # a drafter of its own for each: the copy drafter learns as it goes, and both answers must
        # start from what it knew at load to draft alike
        fresh = DrafterDecoder(llm, drafter, 4, 2)
        try:
            fresh.forget()
            answers.append(list(fresh.stream(tokens, p.Sampling.greedy(40), step_us=step_us)))
        finally:
            fresh.close()
    assert answers[0] == answers[1] and 40 <= len(answers[0]) <= 40 + 4  # the last step's drafts
    dec = DrafterDecoder(llm, drafter, 4, 2)
    try:
        dec.forget()
        stream = dec.stream(tokens, p.Sampling.greedy(), step_us=10**9)
        got = [next(stream) for _ in range(3)]
        stream.close()
        kv = dec.kv_tokens()
        assert kv[: len(tokens) + 2] == tokens + got[:2] and len(kv) >= len(tokens) + 2
    finally:
        dec.close()
        llm.close()
