"""The shipped EAGLE head on the default model: found by sha256, loads, and changes nothing but speed."""

from __future__ import annotations

from pathlib import Path

from engine import protocol as p
from engine.bench.prompts import DEV_PROMPTS, load_prompts
from engine.client import WorkerClient
from engine.models.acceleration import find_pack


def test_the_default_model_has_a_shipped_head(model_path: Path) -> None:
    pack = find_pack(model_path)
    assert pack is not None and pack.eagle_head is not None and pack.eagle_head.is_file()
    assert pack.manifest["eagle"]["dev_eval"]["top4"] >= pack.manifest["eagle"]["dev_eval"]["top1"] > 0.1


def test_shipped_head_greedy_output_equals_vanilla(model_path: Path) -> None:
    prompts = load_prompts(DEV_PROMPTS)[::17][:6]  # one per category stride
    greedy = p.Sampling.greedy(48)
    with WorkerClient() as vanilla, WorkerClient() as eagle:
        vanilla.load(model_path, p.Placement(n_ctx=2048), mode="vanilla")
        assert eagle.load(model_path, p.Placement(n_ctx=2048), mode="eagle").mode == "eagle"
        accepted = 0
        for prompt in prompts:
            messages = [{"role": "user", "content": prompt.text}]
            want = list(vanilla.stream(messages, greedy))[-1]
            events = list(eagle.stream(messages, greedy))
            got = events[-1]
            assert got.tokens == want.tokens, prompt.id
            assert got.text == want.text
            accepted += [e for e in events if isinstance(e, p.Stats)][-1].accel["accepted"]
        assert accepted > 0, "the shipped head should get some drafts accepted"
