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
