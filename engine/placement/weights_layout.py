"""Whether the target's weights may take the CPU backend's repacked layout.

ggml-cpu repacks some quantisation types into interleaved blocks at load and runs them through
gemv (1-3 rows) and gemm (4+ rows) kernels. Speculative decoding is lossless only if a row gets
bit-identical logits whether it is decoded alone or inside a verify batch; upstream's gemv and
gemm round differently. Patch 0008 makes them agree for Q4_K on x86 (AVX2/AVX-512), the type of
most Q4_K_M files; models holding any other repackable type keep the file layout (vec_dot path).
Measured on Qwen2.5-Coder-1.5B Q4_K_M: one-token decode 43 -> 33 ms, verify rows unchanged."""

from __future__ import annotations

import platform

from engine import knobs
from engine.models.gguf_file import GGUFInfo

# ggml type ids (ggml.h)
Q4_0, Q8_0, Q2_K, Q4_K, IQ4_NL, MXFP4 = 2, 8, 10, 12, 20, 39
# what ggml-cpu repacks on x86 (repack.cpp: ggml_repack_get_optimal_repack_type)
REPACKED_ON_X86 = {Q4_0, Q2_K, Q4_K, IQ4_NL, MXFP4}
# ... and of those, the types whose repacked kernels are batch-invariant (patch 0008)
BATCH_INVARIANT = {Q4_K}


def repack_is_exact(info: GGUFInfo) -> bool:
    """True when repacking speeds this model up without making verify rows differ from decodes.
    SPECEE_TEST_CPU_REPACK=1/0 overrides (measurements)."""
    forced = knobs.CPU_REPACK.flag()
    if forced is not None:
        return forced
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    repacked = set(info.tensor_types.values()) & REPACKED_ON_X86
    return bool(repacked) and repacked <= BATCH_INVARIANT
