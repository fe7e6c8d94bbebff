"""engine.llm.teacher: the features captured while answering are the ones a single pass gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.llm.teacher import Teacher


def test_answers_come_with_the_features_and_predictions_of_a_single_pass(model_path: Path) -> None:
    teacher = Teacher(str(model_path), n_ctx=256, n_threads=2)
    try:
        texts = ["Name three colours.", "What is 2 + 2? Answer with one number.", "Say hello in French."]
        seqs = teacher.sequences(texts, max_new=24, n_seq=2)  # two groups: one of 2, one of 1
        assert [s.n_prompt < len(s.tokens) for s in seqs] == [True] * 3
        for s in seqs:
            ref = teacher.features(s.tokens.tolist(), s.n_prompt)
            n = len(s.tokens)
            assert s.features.shape == ref.features.shape == (n, 3, teacher.n_embd)
            # the same rows, computed in another context's batches (its own kernels, KV cache and
            # attention): equal up to rounding; a row off by one would read a cosine of ~0.6
            a, b = s.features.astype(np.float32), ref.features.astype(np.float32)
            cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
            assert cos.min() > 0.99 and cos.mean() > 0.999, (cos.min(), cos.mean())
            # every answer row's top prediction is the token written next; the last row's top-4 is known
            np.testing.assert_array_equal(s.target_top[s.n_prompt : n - 1, 0], s.tokens[s.n_prompt + 1 :])
            assert (s.target_top[n - 1] >= 0).all() and (s.target_top[s.n_prompt : n - 1, 1:] == -1).all()
            # prompt rows: each one's top prediction is among the single pass's top-4 (a prompt's
            # template rows are near ties, so the order within them may differ)
            near = (s.target_top[: s.n_prompt, :1] == ref.target_top[: s.n_prompt]).any(-1).mean()
            assert near > 0.97, near
    finally:
        teacher.close_generation()
