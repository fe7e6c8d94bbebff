"""llama.cpp's sampler chain for a request's sampling settings, and the grammar that may lead it."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import llama_cpp

from engine import protocol as p
from engine.llm.target import Target


@dataclass(frozen=True)
class Grammar:
    """A GBNF grammar (root rule "root") and how it applies (Generate.grammar_*): from the start,
    after reading `prefill` (a chat template's generation prompt it starts at), or lazily, from the
    first match of a trigger pattern (a regex over the answer's text) or token on."""

    text: str
    lazy: bool = False
    trigger_patterns: tuple[str, ...] = ()
    trigger_tokens: tuple[int, ...] = ()
    prefill: tuple[int, ...] = ()

    @classmethod
    def of(cls, req: p.Generate) -> Grammar:
        return cls(
            req.grammar, req.grammar_lazy, tuple(req.grammar_trigger_patterns), tuple(req.grammar_trigger_tokens),
            tuple(req.grammar_prefill),
        )  # fmt: skip

    def sampler(self, llm: Target) -> Any:
        """llama.cpp's grammar sampler for it; SettingsError for a grammar llama.cpp cannot parse."""
        vocab = llm.vocab
        if self.lazy:
            patterns = (ctypes.c_char_p * len(self.trigger_patterns))(*(x.encode() for x in self.trigger_patterns))
            tokens = (llama_cpp.llama_token * len(self.trigger_tokens))(*self.trigger_tokens)
            smpl = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
                vocab, self.text.encode(), b"root", patterns, len(patterns), tokens, len(tokens)
            )
        else:
            smpl = llama_cpp.llama_sampler_init_grammar(vocab, self.text.encode(), b"root")
        if not smpl:
            raise p.SettingsError("grammar: llama.cpp could not parse the grammar (the worker's log says where)")
        for token in self.prefill:
            llama_cpp.llama_sampler_accept(smpl, token)
        return smpl


class SamplerChain:
    """A llama.cpp sampler chain (llama_sampler_chain_init) and the samplers it owns, freed with it
    when this goes (as llama-cpp-python's LlamaSampler did). `sampler`: the chain's pointer, for
    llama_sampler_sample and native code."""

    def __init__(self) -> None:
        self.sampler: Any = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())

    def add(self, smpl: Any) -> None:
        """Append a sampler; the chain owns it from here."""
        llama_cpp.llama_sampler_chain_add(self.sampler, smpl)

    def close(self) -> None:
        if getattr(self, "sampler", None) is not None:
            llama_cpp.llama_sampler_free(self.sampler)
            self.sampler = None

    def __del__(self) -> None:
        self.close()


def make_sampler(llm: Target, s: p.Sampling, grammar: str | Grammar = "") -> SamplerChain:
    """llama.cpp's sampler chain for `s`, as llama-cpp-python's Llama._init_sampler built it (same
    samplers, same order: answers stay token-identical to it), with a logit bias first when asked, then
    a grammar (GBNF, root rule "root"): it rules out every token that cannot continue it, the
    end-of-generation tokens until it is complete, before any other sampler sees the candidates."""
    chain = SamplerChain()
    n_vocab = llm.n_vocab()
    if s.logit_bias:
        biases = (llama_cpp.llama_logit_bias * len(s.logit_bias))(*_logit_biases(s.logit_bias, n_vocab))
        # llama.cpp copies the biases: the array need not outlive this call
        chain.add(llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(biases), biases))
    grammar = Grammar(grammar) if isinstance(grammar, str) else grammar
    if grammar.text:
        chain.add(grammar.sampler(llm))
    chain.add(
        llama_cpp.llama_sampler_init_penalties(
            n_vocab, llm.last_n_tokens_size, s.repeat_penalty, s.frequency_penalty, s.presence_penalty
        )
    )
    if s.temperature == 0.0:
        chain.add(llama_cpp.llama_sampler_init_greedy())
        return chain
    chain.add(llama_cpp.llama_sampler_init_top_k(s.top_k))
    chain.add(llama_cpp.llama_sampler_init_typical(1.0, 1))
    chain.add(llama_cpp.llama_sampler_init_top_p(s.top_p, 1))
    chain.add(llama_cpp.llama_sampler_init_min_p(s.min_p, 1))
    chain.add(llama_cpp.llama_sampler_init_temp(s.temperature))
    chain.add(llama_cpp.llama_sampler_init_dist(llm.seed))
    return chain


def greedy_alone(s: p.Sampling, grammar: str | Grammar = "") -> bool:
    """Whether make_sampler's chain for `s` is llama.cpp's greedy sampler alone (no bias, grammar or
    penalty before it): then native.lib().specee_greedy picks the same token (the first of equal
    maxima) without the chain's copy of every logit into a candidate array (~0.1 ms a token here)."""
    text = grammar.text if isinstance(grammar, Grammar) else grammar
    neutral = s.repeat_penalty == 1.0 and s.frequency_penalty == 0.0 and s.presence_penalty == 0.0
    return s.temperature == 0.0 and neutral and not s.logit_bias and not text


def _logit_biases(logit_bias: dict[str, float], n_vocab: int) -> list[tuple[int, float]]:
    """Sampling.logit_bias (validated: decimal keys) as (token, bias) pairs; SettingsError for a token
    this model's vocabulary does not have."""
    pairs = [(int(token), float(bias)) for token, bias in logit_bias.items()]
    for token, _bias in pairs:
        if token >= n_vocab:
            raise p.SettingsError(f"logit_bias: token {token} is not in this model's vocabulary (0..{n_vocab - 1})")
    return pairs
