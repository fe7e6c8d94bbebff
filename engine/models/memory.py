"""Does a model fit this machine's memory? One answer for the model manager's badge (a file's size,
from the catalogue or the hub) and the placement planner (a GGUF's layers and KV cache, device by
device): the same headroom kept for the system, the same share of a GPU kept free, the same compute
buffer on each device."""

from __future__ import annotations

GB = 1e9
RAM_HEADROOM = 1.5 * GB  # keep the system usable
VRAM_HEADROOM_FRAC = 0.08
COMPUTE_BUFFER = 0.3 * GB  # per device, order of llama.cpp's compute buffers at 4k context
# The KV cache at a usual context as a share of the weights, where only a file's size is known.
CONTEXT_SHARE = 0.2


def ram_room(ram_bytes: float) -> float:
    """What weights and KV cache may take of this much RAM: the system's headroom and the CPU's
    compute buffer stay free."""
    return ram_bytes - RAM_HEADROOM - COMPUTE_BUFFER


def vram_room(vram_bytes: float) -> float:
    """What weights and KV cache may take of a GPU with this much free memory (0 without one)."""
    return vram_bytes * (1 - VRAM_HEADROOM_FRAC) - COMPUTE_BUFFER if vram_bytes > 0 else 0.0


def fits(weights_bytes: float, ram_bytes: float, vram_bytes: float = 0, kv_bytes: float | None = None) -> bool:
    """Whether a model's weights and KV cache fit in this RAM and GPU memory together. kv_bytes: the
    cache at the context asked for; None (only the file's size is known): CONTEXT_SHARE of the weights.
    The planner places layers within the same rooms, so a model it places always fits here."""
    kv = weights_bytes * CONTEXT_SHARE if kv_bytes is None else kv_bytes
    return weights_bytes + kv <= ram_room(ram_bytes) + max(vram_room(vram_bytes), 0.0)
