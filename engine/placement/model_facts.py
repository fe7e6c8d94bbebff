"""What a model needs in memory and bandwidth, read from its GGUF metadata (no weights loaded)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

KV_BYTES = 2  # f16 K and V cache
# Share of the measured read bandwidth the CPU's dot products reach per weight type, without the
# runtime repacking we turn off for batch invariance (engine/llm/target.py): K-quants decode
# compute-bound on this 2-core EPYC (Qwen2.5-Coder-1.5B Q4_K/Q6_K: 41.8 ms per token where 1.1 GB at
# the full bandwidth would take 30). Other types stream at the measured bandwidth.
CPU_TYPE_EFFICIENCY = {"Q2_K": 0.7, "Q3_K": 0.7, "Q4_K": 0.7, "Q5_K": 0.7, "Q6_K": 0.7}
# Where the worker loads the weights repacked (weights_layout.repack_is_exact), ggml's interleaved
# gemv streams Q4_K at the measured bandwidth (Qwen2.5-Coder-1.5B: 43 -> 33 ms per token).
CPU_TYPE_EFFICIENCY_REPACKED = {**CPU_TYPE_EFFICIENCY, "Q4_K": 1.0}


@dataclass
class ModelFacts:
    name: str
    n_layer: int
    layer_bytes: list[int]  # weights of each repeating layer
    output_bytes: int  # final norm + lm_head (the tied embedding when there is no output.weight)
    kv_bytes_per_token_layer: int  # K + V of one token in one layer
    # an untied input embedding: held in RAM (llama.cpp keeps it on the CPU), one row read per token
    embd_bytes: int = 0
    # what the CPU's kernels make of each layer and the head: bytes / CPU_TYPE_EFFICIENCY (default: bytes)
    layer_cpu_cost: list[float] | None = None
    output_cpu_cost: float | None = None

    @property
    def weights_bytes(self) -> int:
        return sum(self.layer_bytes) + self.output_bytes + self.embd_bytes

    def kv_bytes(self, n_ctx: int, n_layers: int) -> int:
        return self.kv_bytes_per_token_layer * n_ctx * n_layers


def facts_from_gguf(path: Path) -> ModelFacts:
    """From the GGUF header alone (engine.models.gguf_file: ~0.1 s, where gguf.GGUFReader took ~2 s)."""
    from engine.models.gguf_file import inspect_gguf
    from engine.placement.weights_layout import repack_is_exact

    info = inspect_gguf(path)
    efficiency = CPU_TYPE_EFFICIENCY_REPACKED if repack_is_exact(info) else CPU_TYPE_EFFICIENCY

    def field(key: str, default: int = 0) -> int:
        return int(info.arch_value(key, default))

    n_layer = field("block_count")
    n_embd = field("embedding_length")
    n_head = field("attention.head_count")
    n_head_kv = field("attention.head_count_kv", n_head)
    head_dim = field("attention.key_length", n_embd // max(n_head, 1))
    from gguf.constants import GGMLQuantizationType

    layer_bytes = [0] * n_layer
    layer_cost = [0.0] * n_layer
    output, output_cost, embd, embd_cost = 0, 0.0, 0, 0.0
    for name, n in info.tensor_bytes.items():
        eff = efficiency.get(GGMLQuantizationType(info.tensor_types[name]).name, 1.0)
        if name.startswith("blk."):
            layer = int(name.split(".")[1])
            layer_bytes[layer] += n
            layer_cost[layer] += n / eff
        elif name.startswith(("output", "output_norm")):
            output += n
            output_cost += n / eff
        elif name == "token_embd.weight":
            embd, embd_cost = n, n / eff
    tied = "output.weight" not in info.tensor_bytes
    if tied:
        output += embd  # the lm_head reads the embedding matrix
        output_cost += embd_cost
    kv = 2 * n_head_kv * head_dim * KV_BYTES
    return ModelFacts(info.name, n_layer, layer_bytes, output, kv, 0 if tied else embd, layer_cost, output_cost)


def synthetic(name: str, n_layer: int, params_b: float, bits: float, n_embd: int, n_head_kv: int, head_dim: int) -> ModelFacts:
    """A model class from its shape (for planning what is not on disk): 1B, 3B, 7B, 8B..."""
    total = params_b * 1e9 * bits / 8
    vocab_share = 0.06 if params_b > 2 else 0.15  # the lm_head's share of the weights
    output = int(total * vocab_share)
    per_layer = int((total - output) / n_layer)
    return ModelFacts(name, n_layer, [per_layer] * n_layer, output, 2 * n_head_kv * head_dim * KV_BYTES)


MODEL_CLASSES: dict[str, Callable[[], ModelFacts]] = {
    "1B (Llama 3.2 1B, Q4_K_M)": lambda: synthetic("Llama-3.2-1B Q4_K_M", 16, 1.24, 4.85, 2048, 8, 64),
    "3B (Llama 3.2 3B, Q4_K_M)": lambda: synthetic("Llama-3.2-3B Q4_K_M", 28, 3.2, 4.85, 3072, 8, 128),
    "7B (Mistral 7B, Q4_K_M)": lambda: synthetic("Mistral-7B Q4_K_M", 32, 7.24, 4.85, 4096, 8, 128),
    "8B (Llama 3.1 8B, Q4_K_M)": lambda: synthetic("Llama-3.1-8B Q4_K_M", 32, 8.03, 4.85, 4096, 8, 128),
}
