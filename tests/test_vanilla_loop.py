"""Vanilla's own decode loop (engine/llm/decoders/vanilla.py VanillaDecoder: llama_decode + llama.cpp's sampler
chain per token, no Python generate loop) answers token for token as llama-cpp-python's generate did,
from a cold cache and after reusing a cached prefix, on the default model and a tiny qwen2 model."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path

import pytest

from engine import protocol as p
from tests.tiny_models import write_tiny_gguf

N = 24


@pytest.fixture(scope="module")
def tiny_qwen2(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "qwen2.gguf", "qwen2", tokenizer_from=model_path)


def _reference(llm, tokens: list[int]) -> list[int]:
    """llama-cpp-python's own loop, greedy, from an empty cache."""
    llm.reset()
    gen = llm.generate(tokens, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0)
    return list(itertools.islice(gen, N))


@pytest.mark.parametrize("which", ["default", "qwen2"])
def test_vanilla_loop_matches_llama_cpp_pythons_generate(which: str, model_path: Path, tiny_qwen2: Path, native_build) -> None:
    from llama_cpp import Llama

    from engine.llm.decoders import VanillaDecoder
    from engine.llm.target import Target

    path = model_path if which == "default" else tiny_qwen2
    ref = Llama(model_path=str(path), n_ctx=1024, n_batch=64, n_threads=2, verbose=False)
    llm = Target.load(path, n_ctx=1024, n_batch=64, n_threads=2)
    first = llm.tokenize(b"The history of the printing press in Europe began", add_bos=True)
    want_first = _reference(ref, first)

    dec = VanillaDecoder(llm)
    try:
        got = list(itertools.islice(dec.stream(first, p.Sampling.greedy()), N))
        assert got == want_first
        assert math.isfinite(dec.last_margin()) and dec.last_margin() >= 0
        # a second turn: the first turn's prompt and answer are cached, only the rest is prefilled
        # (over a chunk boundary: n_batch is 64)
        second = first + got + llm.tokenize(b" And then, two centuries later, a second revolution came:", add_bos=False) * 3
        assert dec.cached_prefix(second) == len(first) + N - 1
        reused = list(itertools.islice(dec.stream(second, p.Sampling.greedy()), N))
        dec.forget()
        assert dec.kv_used() == 0 and dec.cached_prefix(second) == 0
        cold = list(itertools.islice(dec.stream(second, p.Sampling.greedy()), N))
        assert reused == cold == _reference(ref, second)
    finally:
        dec.close()
        llm.close()
        ref.close()


def test_sampled_answers_match_llama_cpp_pythons_generate(model_path: Path, native_build) -> None:
    """The sampler chain (engine/llm/decoders/sampling.py make_sampler, over llama.h) and the seed it
    reads from the target: a sampled answer is token for token the one llama-cpp-python's generate
    samples with the same settings and seed."""
    from llama_cpp import Llama

    from engine.llm.decoders import VanillaDecoder
    from engine.llm.target import Target

    ref = Llama(model_path=str(model_path), n_ctx=512, n_batch=64, n_threads=2, verbose=False)
    llm = Target.load(model_path, n_ctx=512, n_batch=64, n_threads=2)
    dec = VanillaDecoder(llm)
    tokens = llm.tokenize(b"Once upon a time, in a village by the sea,", add_bos=True)
    s = p.Sampling(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, presence_penalty=0.2, seed=11)
    try:
        for seed in (11, 12345):
            ref.reset()
            ref.set_seed(seed)
            gen = ref.generate(tokens, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p, temp=s.temperature,
                               repeat_penalty=s.repeat_penalty, presence_penalty=s.presence_penalty)  # fmt: skip
            want = list(itertools.islice(gen, N))
            llm.set_seed(seed)
            dec.forget()
            assert list(itertools.islice(dec.stream(tokens, s), N)) == want
    finally:
        dec.close()
        llm.close()
        ref.close()


def test_a_grammar_constrains_the_answer_and_logprobs_are_the_models(model_path: Path, native_build) -> None:
    from engine.llm.decoders import VanillaDecoder
    from engine.llm.target import Target

    llm = Target.load(model_path, n_ctx=512, n_batch=64, n_threads=2)
    prompt = llm.tokenize(b"<|im_start|>user\nIs the sky blue?<|im_end|>\n<|im_start|>assistant\n", add_bos=False, special=True)
    dec = VanillaDecoder(llm)
    try:
        out = []
        for tok in dec.stream(prompt, p.Sampling.greedy(), 'root ::= ("yes" | "no") "!"'):
            if llm.is_eog(tok):  # the grammar lets it come only once complete
                break
            out.append(tok)
            logprob, top = dec.logprobs(tok, 5)
            assert logprob <= 0 and [lp for _t, lp in top] == sorted((lp for _t, lp in top), reverse=True)
            assert sum(math.exp(lp) for _t, lp in top) <= 1 + 1e-9
            assert len(out) < 10
        assert llm.detokenize(out) in (b"yes!", b"no!")
        # unconstrained and greedy: the chosen token is the most likely
        tok = next(dec.stream(prompt, p.Sampling.greedy()))
        logprob, top = dec.logprobs(tok, 3)
        assert top[0] == (tok, pytest.approx(logprob)) and logprob > top[1][1]
        with pytest.raises(p.SettingsError, match="grammar"):
            next(dec.stream(prompt, p.Sampling.greedy(), "root ::= undefined-rule"))
    finally:
        dec.close()
        llm.close()


@pytest.mark.parametrize("which", ["default", "qwen2"])
def test_greedy_pick_is_the_greedy_samplers_token(which: str, model_path: Path, tiny_qwen2: Path, native_build) -> None:
    """Plain greedy decoding takes the arg max natively (specee_greedy) instead of llama.cpp's chain:
    at every step of three answers the chain, asked about the same logits, picks the same token (the
    tiny model's random weights give near-ties)."""
    import llama_cpp

    from engine.llm.decoders import VanillaDecoder, greedy_alone, make_sampler
    from engine.llm.target import Target

    path = model_path if which == "default" else tiny_qwen2
    llm = Target.load(path, n_ctx=512, n_batch=64, n_threads=2)
    dec = VanillaDecoder(llm)
    chain = make_sampler(llm, p.Sampling.greedy())
    steps = 0
    try:
        for text in (b"Once upon a time", b"def fibonacci(n):", b"The capital of France is"):
            dec.forget()
            for tok in itertools.islice(dec.stream(llm.tokenize(text, add_bos=True), p.Sampling.greedy()), 48):
                assert tok == llama_cpp.llama_sampler_sample(chain.sampler, llm.ctx, -1)
                steps += 1
    finally:
        dec.close()
        llm.close()
    assert steps == 144
    assert greedy_alone(p.Sampling.greedy())
    for other in (
        replace(p.Sampling.greedy(), repeat_penalty=1.1),
        replace(p.Sampling.greedy(), presence_penalty=0.5),
        replace(p.Sampling.greedy(), logit_bias={"5": 1.0}),
        p.Sampling(temperature=0.7),
    ):
        assert not greedy_alone(other)
    assert not greedy_alone(p.Sampling.greedy(), 'root ::= "a"')


@pytest.mark.parametrize("which", ["default", "qwen2"])
def test_native_steps_answer_as_one_token_at_a_time(which: str, model_path: Path, tiny_qwen2: Path, native_build) -> None:
    """Several tokens a native call (step_us > 0) give the same answer as one token a call, greedy and
    sampled with a seed, and a second turn that reuses a cache left decoded past where its consumer
    stopped answers as a cold one; at most max_tokens come, and the last of them is not decoded."""
    from engine.llm.decoders import VanillaDecoder
    from engine.llm.target import Target

    path = model_path if which == "default" else tiny_qwen2
    llm = Target.load(path, n_ctx=512, n_batch=64, n_threads=2)
    dec = VanillaDecoder(llm)
    first = llm.tokenize(b"The history of the printing press in Europe began", add_bos=True)
    sampled = p.Sampling(temperature=0.8, top_k=40, top_p=0.95, seed=7, repeat_penalty=1.1, max_tokens=N)
    try:
        for s in (p.Sampling.greedy(N), sampled):
            answers = []
            for step_us in (0, 10**9):  # one token a call; the whole answer in one call
                dec.forget()
                llm.set_seed(7)
                got = list(dec.stream(first, s, step_us=step_us))
                assert len(got) == N and dec.kv_used() == len(first) + N - 1
                answers.append(got)
            assert answers[0] == answers[1]
        # the consumer stops after 5 tokens of a call that decoded 20: the cache says what it holds
        dec.forget()
        got = list(itertools.islice(dec.stream(first, p.Sampling.greedy(20), step_us=10**9), 5))
        assert dec.kv_tokens()[: len(first) + 5] == first + got and dec.kv_used() == len(first) + 19
        second = first + got + llm.tokenize(b" Two centuries later, a second revolution came:", add_bos=False)
        assert dec.cached_prefix(second) >= len(first) + 5
        reused = list(dec.stream(second, p.Sampling.greedy(N), step_us=10**9))
        dec.forget()
        assert reused == list(dec.stream(second, p.Sampling.greedy(N)))
        # a context with room for 3 more tokens: 3 come, as one token a call gives them
        room = VanillaDecoder(llm, n_ctx=len(first) + 3)
        room.forget()
        assert len(list(room.stream(first, p.Sampling.greedy(), step_us=10**9))) == 3
        room.close()
    finally:
        dec.close()
        llm.close()
