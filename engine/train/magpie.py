"""Training prompts the target model writes itself (Magpie, arXiv 2406.08464).

Given only its chat template's user-turn prefix, an instruction-tuned model writes a question of the
kind it was tuned on; answered greedily by the same model (engine.train.dataset), those questions
are the distribution the EAGLE head and the exit predictors meet in use, at any volume.

Questions are made in shards of SHARD_SIZE under --work (magpie/shard-NNNNN.jsonl, each written
whole under a temporary name and renamed), each from its own seeded generator, so a stopped run
resumes at the first missing shard and a finished one is reproduced exactly. The prompt file is
then rebuilt from every shard: cleaned, deduplicated (against the mixed-in prompts too), in shard
order.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tqdm import tqdm

from engine.atomic import write_text_atomic
from engine.prompts import BenchPrompt, load_prompts

SHARD_SIZE = 64
MAX_TOKENS = 160  # a question still going after this many tokens is dropped
MIN_CHARS, MAX_CHARS = 16, 1200
SIGNATURE_WORDS = 12  # questions that open with the same words count as one


def signature(text: str) -> str:
    """What two questions must differ in to both be kept: their first words, case and punctuation aside."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower())[:SIGNATURE_WORDS])


def clean(text: str) -> str | None:
    """The question as a prompt, or None for one not worth answering (too short or long, no words,
    template markup, a reply rather than a question)."""
    text = text.strip()
    if not MIN_CHARS <= len(text) <= MAX_CHARS or len(re.findall(r"[A-Za-z]{2,}", text)) < 3:
        return None
    if "<|" in text or "|>" in text or text.lower().startswith(("assistant", "user", "system")):
        return None
    return text


def select(questions: Iterable[str], seen: set[str]) -> list[str]:
    """The clean questions whose signature is new, in order; seen grows with theirs."""
    kept = []
    for q in questions:
        c = clean(q)
        sig = signature(c) if c else ""
        if c and sig and sig not in seen:
            seen.add(sig)
            kept.append(c)
    return kept


def mixed_prompts(path: Path | None, first: int) -> list[BenchPrompt]:
    """The first `first` prompts of a prompt file in the trainers' order (random.Random(0) shuffle,
    as `specee train eagle` and `specee train exits` draw them): with --first-prompt first, the exit
    predictors still train on prompts the head never saw."""
    if path is None:
        return []
    prompts = load_prompts(path)
    random.Random(0).shuffle(prompts)
    return prompts[:first] if first else prompts


def make_prompts(
    model: Path,
    out: Path,
    n: int,
    work: Path,
    mix: Path | None = None,
    mix_first: int = 0,
    seed: int = 0,
    n_threads: int = 0,
    exclude: Path | None = None,
) -> dict:
    """Write `out`: the mixed-in prompts, then at least n new questions of the model's own (fewer only
    if 4x the shards needed, beyond those already made, still do not give n). Prompts, mixed-in or
    written, that open like one of `exclude` are left out: with the head's training prompts there,
    the rest of the mixed-in file and new questions are prompts for the exit predictors that the
    head never saw."""
    from engine.llm.teacher import Teacher

    folder = work / "magpie"
    folder.mkdir(parents=True, exist_ok=True)
    base = mixed_prompts(mix, mix_first)
    teacher: Teacher | None = None
    excluded = load_prompts(exclude) if exclude else []
    left_out = {signature(q.text) for q in excluded}
    base = [q for q in base if signature(q.text) not in left_out]
    seen = left_out | {signature(q.text) for q in base}
    kept: list[str] = []
    made = len(list(folder.glob("shard-*.jsonl")))
    shard, limit = 0, made + max(4 * -(-n // SHARD_SIZE), 1)
    bar = tqdm(total=n, desc="questions", unit="q")
    while len(kept) < n and shard < limit:
        path = folder / f"shard-{shard:05d}.jsonl"
        if not path.exists():
            if teacher is None:
                teacher = Teacher(str(model), n_ctx=MAX_TOKENS + 96, n_threads=n_threads)
            rng = np.random.default_rng([seed, shard])
            raw = teacher.instructions(SHARD_SIZE, MAX_TOKENS, rng)
            write_text_atomic(path, "".join(json.dumps({"text": q}) + "\n" for q in raw))
        new = select((json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()), seen)
        kept += new
        bar.update(min(len(new), n - bar.n))
        shard += 1
    bar.close()
    rows = [{"id": q.id, "category": q.category, "prompt": q.text} for q in base]
    first_id = len(excluded)  # ids that never meet the excluded file's
    rows += [{"id": f"magpie-{first_id + i:05d}", "category": "magpie", "prompt": q} for i, q in enumerate(kept[:n])]
    write_text_atomic(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return {"out": str(out), "mixed": len(base), "questions": min(len(kept), n), "shards": shard}
