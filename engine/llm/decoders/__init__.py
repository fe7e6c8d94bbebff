"""Token sources per acceleration mode. Each turns prompt tokens into a stream of sampled tokens;
the session around them handles text, stop strings, cancel and stats the same way for all.

interface: the Decoder protocol; sampling: the sampler chain and grammar; vanilla, drafter, specee:
one module per mode (native_loop: what the natively looped two share)."""

from engine.llm.decoders.drafter import COPY_ALIKE, COPY_BUCKETS, COPY_MATCH_BUCKETS, DrafterDecoder
from engine.llm.decoders.interface import Decoder, Progress, PromptInterrupted
from engine.llm.decoders.sampling import Grammar, SamplerChain, greedy_alone, make_sampler
from engine.llm.decoders.specee import SpecEEDecoder, exits_would_ignore
from engine.llm.decoders.vanilla import VanillaDecoder

__all__ = [
    "COPY_ALIKE",
    "COPY_BUCKETS",
    "COPY_MATCH_BUCKETS",
    "Decoder",
    "DrafterDecoder",
    "Grammar",
    "Progress",
    "PromptInterrupted",
    "SamplerChain",
    "SpecEEDecoder",
    "VanillaDecoder",
    "exits_would_ignore",
    "greedy_alone",
    "make_sampler",
]
