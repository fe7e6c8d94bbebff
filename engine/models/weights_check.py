"""A quick look at a model's weights before anyone calls it "ok": a file whose header is fine but
whose tensor data is garbage (overwritten, wrong file spliced in) loads in llama.cpp and then
chats "…………". Sampled blocks of each tensor must hold finite, sane scales (quantised types) or
values (f32/f16): a few thousand reads, milliseconds."""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from engine.models.gguf_file import GGUFInfo, ModelFileError

# ggml type -> (bytes per block, offset of the block's fp16 scale d); f32/f16 are read as values
_SCALE_AT = {
    2: (18, 0),  # Q4_0
    3: (20, 0),  # Q4_1
    6: (22, 0),  # Q5_0
    7: (24, 0),  # Q5_1
    8: (34, 0),  # Q8_0
    12: (144, 0),  # Q4_K
    13: (176, 0),  # Q5_K
    14: (210, 208),  # Q6_K: d after ql, qh and scales
}
F32, F16 = 0, 1
SAMPLES = 64  # blocks (or values) per tensor
MAX_TENSORS = 48
SANE = 1e3  # trained weights' scales and norm weights are far below this; random bytes are often far above


def check_weights(info: GGUFInfo) -> None:
    """Raise ModelFileError("garbage") when sampled tensor data cannot be trained weights."""
    names = [n for n in info.tensor_types if info.tensor_types[n] in _SCALE_AT or info.tensor_types[n] in (F32, F16)]
    if len(names) > MAX_TENSORS:  # spread over the model: first, last and between
        step = len(names) / MAX_TENSORS
        names = [names[int(i * step)] for i in range(MAX_TENSORS)]
    rng = np.random.default_rng(0)
    bad: list[str] = []
    with info.path.open("rb") as fh:
        for name in names:
            ttype, start = info.tensor_types[name], info.data_offset + info.tensor_offsets.get(name, 0)
            nbytes = info.tensor_bytes[name]
            if ttype in (F32, F16):
                width = 4 if ttype == F32 else 2
                count = nbytes // width
                picks = rng.integers(0, count, size=min(SAMPLES, count))
                values = [_read(fh, start + int(i) * width, width, np.float32 if ttype == F32 else np.float16) for i in picks]
            else:
                block, at = _SCALE_AT[ttype]
                count = nbytes // block
                picks = rng.integers(0, count, size=min(SAMPLES, count))
                values = [_read(fh, start + int(i) * block + at, 2, np.float16) for i in picks]
            arr = np.array(values, dtype=np.float64)
            if arr.size and (not np.all(np.isfinite(arr)) or np.mean(np.abs(arr) > SANE) > 0.1):
                bad.append(name)
    if bad:
        raise ModelFileError(
            "garbage",
            f"{info.path.name} holds invalid weights (non-finite or absurd values in {', '.join(bad[:3])}"
            f"{' and others' if len(bad) > 3 else ''}): the file is damaged or not what its header says. "
            "Download it again.",
        )


def _read(fh: BinaryIO, offset: int, width: int, dtype: type) -> float:
    fh.seek(offset)
    raw = fh.read(width)
    return float(np.frombuffer(raw, dtype=dtype)[0]) if len(raw) == width else float("nan")
