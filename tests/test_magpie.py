"""engine.train.magpie: which of the model's own questions become training prompts."""

import json
import random

import pytest

from engine.train.magpie import clean, mixed_prompts, select, signature


def test_questions_are_cleaned_and_deduplicated_by_their_opening_words() -> None:
    seen = {signature("Write a haiku about rain.")}
    kept = select(
        [
            "  Can you explain how a bicycle gear works?  ",
            "can you explain how a BICYCLE gear works??",  # the same question
            "Write a haiku about rain!",  # one of the mixed-in prompts
            "ok",  # too short
            "<|im_start|>user How do magnets work?",  # template markup
            "assistant: Sure, here is the answer you asked for.",  # a reply, not a question
            "1234 5678 9012 3456 7890",  # no words
            "What is the capital of France, and why is it there?",
        ],
        seen,
    )
    assert kept == ["Can you explain how a bicycle gear works?", "What is the capital of France, and why is it there?"]
    assert clean("x" * 2000) is None


def test_mixed_prompts_follow_the_trainers_shuffled_order(tmp_path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"prompt number {i}"}) + "\n" for i in range(20)))
    order = [f"p{i}" for i in range(20)]
    random.Random(0).shuffle(order)
    assert [q.id for q in mixed_prompts(f, 5)] == order[:5]
    assert len(mixed_prompts(f, 0)) == 20 and mixed_prompts(None, 5) == []


@pytest.mark.slow
def test_the_models_own_questions_are_reproduced_and_resumed_from_shards(model_path, tmp_path, monkeypatch) -> None:
    from engine.paths import RESOURCES_DIR
    from engine.train import magpie

    monkeypatch.setattr(magpie, "SHARD_SIZE", 4)
    monkeypatch.setattr(magpie, "MAX_TOKENS", 64)
    out, work = tmp_path / "prompts.jsonl", tmp_path / "work"
    dev = RESOURCES_DIR / "prompts" / "dev.jsonl"
    result = magpie.make_prompts(model_path, out, 2, work, mix=dev, mix_first=3)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows[:3]] == [q.id for q in mixed_prompts(dev, 3)]
    own = [r for r in rows if r["category"] == "magpie"]
    assert result["questions"] == len(own) == 2 and all(clean(r["prompt"]) == r["prompt"] for r in own)
    shards = {f: f.stat().st_mtime_ns for f in (work / "magpie").iterdir()}
    first = out.read_text()
    out.unlink()
    magpie.make_prompts(model_path, out, 2, work, mix=dev, mix_first=3)  # a rerun answers from the shards
    assert out.read_text() == first and {f: f.stat().st_mtime_ns for f in (work / "magpie").iterdir()} == shards
    for f in shards:
        f.unlink()
    magpie.make_prompts(model_path, out, 2, work, mix=dev, mix_first=3)  # the same seeds write the same questions
    assert out.read_text() == first
    # questions the head never saw, for the exit predictors: none opens like one of `out`'s
    more = tmp_path / "more.jsonl"
    magpie.make_prompts(model_path, more, 2, work, mix=dev, mix_first=5, exclude=out)
    new = [json.loads(line) for line in more.read_text().splitlines()]
    assert [r["id"] for r in new[:2]] == [q.id for q in mixed_prompts(dev, 5)[3:]]  # the 3 in `out` left out
    assert len(new) == 4 and all(r["category"] == "magpie" for r in new[2:])
    assert not {magpie.signature(r["prompt"]) for r in new} & {magpie.signature(r["prompt"]) for r in rows}
    assert not {r["id"] for r in new} & {r["id"] for r in rows}
