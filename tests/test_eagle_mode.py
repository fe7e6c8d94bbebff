"""The shipped EAGLE head on the default model: found by sha256, loads, and changes nothing but speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import protocol as p
from engine.bench.fidelity import ended_early, first_divergence
from engine.client import WorkerClient
from engine.models.acceleration import find_pack
from engine.prompts import DEV_PROMPTS, load_prompts
from tests.conftest import BACKENDS, device_cases, exact_on, placement_for_backend


def test_the_default_model_has_a_shipped_head(model_path: Path) -> None:
    pack = find_pack(model_path)
    assert pack is not None and pack.eagle_head is not None and pack.eagle_head.is_file()
    assert pack.manifest["eagle"]["dev_eval"]["top4"] >= pack.manifest["eagle"]["dev_eval"]["top1"] > 0.1


@pytest.mark.parametrize("backend", BACKENDS)
def test_shipped_head_greedy_output_equals_vanilla(model_path: Path, backend: str) -> None:
    """On the CPU and on Vulkan every row is computed alike whatever the batch, so the answers are
    identical; on other GPU backends they may differ only where vanilla's top two logits tie (the
    bench's tie-gap rule)."""
    prompts = device_cases(load_prompts(DEV_PROMPTS)[::17][:6], backend, keep=1)  # one per category stride
    greedy = p.Sampling.greedy(48)
    placement = placement_for_backend(backend)
    with WorkerClient() as vanilla, WorkerClient() as eagle:
        vanilla.load(model_path, placement, mode="vanilla")
        assert eagle.load(model_path, placement, mode="eagle").mode == "eagle"
        accepted = 0
        for prompt in prompts:
            messages = [{"role": "user", "content": prompt.text}]
            want = list(vanilla.events_of(vanilla.generate(messages, greedy, report_margins=True)))[-1]
            events = list(eagle.stream(messages, greedy))
            got = events[-1]
            assert isinstance(want, p.Done) and isinstance(got, p.Done)
            assert not ended_early(got.tokens, got.finish_reason, want.tokens), prompt.id
            d = first_divergence(got.tokens, want.tokens, want.margins)
            if exact_on(backend):
                assert d is None and got.text == want.text, (prompt.id, d)
            else:
                assert d is None or d.is_tie, (prompt.id, d)
            accepted += [e for e in events if isinstance(e, p.Stats)][-1].accel["accepted"]
        assert accepted > 0, "the shipped head should get some drafts accepted"


def test_the_gated_chain_cuts_drafts_and_changes_nothing_else(model_path: Path) -> None:
    """By default each step verifies only the head's drafts that pay on this machine (its calibrated
    confidence against the measured cost of a verify per row count); an explicit chain length is
    verified whole. Same answers, the gated chain cut where it did not pay, and the gate's calibration
    and costs reported.

    The gate prices drafts with costs it times itself (native/src/draft-gate.h, fed by eagle.cpp's
    clock; no API sets them), so how many drafts it cuts, and how much more often the ones it keeps
    land, follow this machine's load: only what holds for any measured costs is asserted here. A
    verify of k + 1 rows is priced at least one row's cost and each chained head decode costs real
    time, so the gate cuts the head's unlikely later drafts whatever the timings; it keeps its
    confident first drafts unless a two-row verify measures ~1.7x a one-row one (~1.2x here)."""
    prompts = load_prompts(DEV_PROMPTS)[::25][:4]
    greedy = p.Sampling.greedy(64)
    placement = p.Placement(n_ctx=1024, n_threads=2)
    runs = {}
    for name, n_draft in (("gated", 0), ("fixed", 3)):
        with WorkerClient() as client:
            loaded = client.load(model_path, placement, mode="eagle", n_draft=n_draft)
            assert loaded.mode == "eagle"
            tokens, drafted, steps, accel = [], 0, 0, {}
            for prompt in prompts:
                events = list(client.stream([{"role": "user", "content": prompt.text}], greedy))
                accel = [e for e in events if isinstance(e, p.Stats)][-1].accel
                tokens.append(events[-1].tokens)  # type: ignore[attr-defined]
                answer_steps = _steps(accel)
                # a step verifies at most the chain's 3 drafts (the shipped pack's n_draft); a fixed chain all of them
                assert accel["drafted"] <= 3 * answer_steps if name == "gated" else accel["drafted"] == 3 * answer_steps
                drafted += accel["drafted"]
                steps += answer_steps
            runs[name] = (tokens, drafted, steps, accel)
    (g_tokens, g_drafted, g_steps, g_accel), (f_tokens, _f_drafted, _f_steps, f_accel) = runs["gated"], runs["fixed"]
    assert g_tokens == f_tokens
    assert 0 < g_drafted < 3 * g_steps, (g_drafted, g_steps)  # it verified drafts, and cut some chains
    gate = g_accel["eagle_gate"]
    assert len(gate["first"]) == len(gate["later"]) == 10 and all(0 < v < 1 for v in gate["first"] + gate["later"])
    assert gate["first"][9] > gate["first"][0], "a confident draft is confirmed more often than an unsure one"
    # the costs it priced with, as measured: their values are the machine's; that it timed its verifies
    # (1 to 4 rows) and its steps is pinned
    assert len(gate["verify_ms"]) == 4 and any(v > 0 for v in gate["verify_ms"]) and gate["step_ms"] > 0
    assert "eagle_gate" not in f_accel


def _steps(accel: dict) -> int:
    """Target passes of one answer: each emits its accepted drafts and one token of the target's."""
    assert accel["accepted"] > 0, accel
    return round(accel["accepted"] / (accel["acceptance_length"] - 1))
