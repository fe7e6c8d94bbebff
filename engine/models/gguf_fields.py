"""GGUF metadata fields with their values and types, read from a memory map, and a copy of a GGUF with
some fields replaced (the tensors' bytes untouched, or quantized matrices re-quantized).

gguf.GGUFReader builds a numpy view per array item: seconds for a 150k-token vocabulary, which this
reads in a fraction of a second. engine.models.gguf_file is the checker that skips those arrays.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter, quants

# GGUF metadata value types (gguf.GGUFValueType) -> struct format of the fixed-size ones
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32
# block-quantized matrix types gguf-py both reads and writes (re-quantization: a head's matrices)
REQUANTIZABLE = {
    GGMLQuantizationType.Q4_0,
    GGMLQuantizationType.Q4_1,
    GGMLQuantizationType.Q5_0,
    GGMLQuantizationType.Q5_1,
    GGMLQuantizationType.Q8_0,
}
# tensor types whose data numpy holds natively; any other is copied as raw bytes
_NUMPY = {0: np.float32, 1: np.float16, 24: np.int8, 25: np.int16, 26: np.int32, 27: np.int64, 28: np.float64}


class GGUFFieldError(Exception):
    pass


@dataclass
class GGUFField:
    key: str
    value: Any  # strings (also inside arrays) as bytes: tokens need not be valid UTF-8
    vtype: int
    sub_type: int | None = None


@dataclass
class TensorInfo:
    name: str
    dims: list[int]  # ggml order (ne[0] first)
    ttype: int
    offset: int  # from the start of the data section

    @property
    def nbytes(self) -> int:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(self.ttype)]
        return int(np.prod(self.dims, dtype=np.int64)) // block * size


@dataclass
class GGUFHeader:
    fields: dict[str, GGUFField]
    tensors: list[TensorInfo]
    data_offset: int


def read_header(path: Path, keep: Callable[[str], bool] = lambda key: True) -> GGUFHeader:
    """Fields whose key `keep` accepts (the others are skipped, not decoded) and every tensor's info."""
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise GGUFFieldError(f"{path.name} is not a GGUF file")

        def string(at: int) -> tuple[bytes, int]:
            (n,) = struct.unpack_from("<Q", buf, at)
            if at + 8 + n > len(buf):
                raise struct.error("string past the end")
            return bytes(buf[at + 8 : at + 8 + n]), at + 8 + n

        def value(vtype: int, at: int, want: bool) -> tuple[Any, int]:
            if vtype in _SCALAR:
                fmt = _SCALAR[vtype]
                return (struct.unpack_from(fmt, buf, at)[0] if want else None), at + struct.calcsize(fmt)
            if vtype == STRING:
                return string(at)
            if vtype != ARRAY:
                raise GGUFFieldError(f"{path.name}: unknown metadata type {vtype}")
            sub, count = struct.unpack_from("<IQ", buf, at)
            at += 12
            if sub in _SCALAR:
                fmt = _SCALAR[sub]
                items = list(struct.unpack_from(f"<{count}{fmt[1]}", buf, at)) if want else None
                return items, at + struct.calcsize(fmt) * count
            out = []
            for _ in range(count):
                item, at = value(sub, at, want)
                out.append(item)
            return out, at

        try:
            n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
            pos = 24
            fields: dict[str, GGUFField] = {}
            for _ in range(n_kv):
                raw_key, pos = string(pos)
                key = raw_key.decode()
                (vtype,) = struct.unpack_from("<I", buf, pos)
                sub = struct.unpack_from("<I", buf, pos + 4)[0] if vtype == ARRAY else None
                wanted = keep(key)
                val, pos = value(vtype, pos + 4, wanted)
                if wanted:
                    fields[key] = GGUFField(key, val, vtype, sub)
            tensors = []
            for _ in range(n_tensors):
                raw_name, pos = string(pos)
                (n_dims,) = struct.unpack_from("<I", buf, pos)
                dims = list(struct.unpack_from(f"<{n_dims}Q", buf, pos + 4))
                pos += 4 + 8 * n_dims
                ttype, offset = struct.unpack_from("<IQ", buf, pos)
                pos += 12
                tensors.append(TensorInfo(raw_name.decode(), dims, ttype, offset))
        except struct.error:
            raise GGUFFieldError(f"{path.name} is truncated inside its header") from None
    align_field = fields.get("general.alignment")
    align = int(align_field.value) if align_field is not None and align_field.value else DEFAULT_ALIGNMENT
    return GGUFHeader(fields, tensors, (pos + align - 1) // align * align)


def finish_atomically(w: GGUFWriter, tmp: Path, out: Path) -> Path:
    """Write a GGUFWriter opened on `tmp` to disk, sync it and move it to `out` in one step."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    tmp.replace(out)
    return out


def rewrite(src: Path, out: Path, arch: str, fields: list[GGUFField], requantize: GGMLQuantizationType | None = None) -> Path:
    """Write `src`'s tensors, unchanged, with exactly `fields` as metadata (general.architecture =
    `arch` first) to `out`, atomically. With `requantize`, matrices of the REQUANTIZABLE types are stored
    in that type instead."""
    header = read_header(src, keep=lambda key: False)
    tmp = out.with_name(f".{out.name}.part")
    w = GGUFWriter(str(tmp), arch=arch)
    for f in fields:
        if f.key != "general.architecture":
            w.add_key_value(
                f.key, f.value, GGUFValueType(f.vtype), sub_type=None if f.sub_type is None else GGUFValueType(f.sub_type)
            )
    size = src.stat().st_size
    for t in header.tensors:
        start = header.data_offset + t.offset
        if start + t.nbytes > size:
            raise GGUFFieldError(f"{src.name} is truncated: tensor {t.name} ends past the end of the file")
        raw = np.fromfile(src, dtype=np.uint8, count=t.nbytes, offset=start)
        shape = list(reversed(t.dims))
        if requantize is not None and t.ttype in REQUANTIZABLE and t.ttype != requantize:
            values = quants.dequantize(raw.reshape([*shape[:-1], -1]), GGMLQuantizationType(t.ttype))
            w.add_tensor(t.name, quants.quantize(values, requantize), raw_dtype=requantize)
        elif t.ttype in _NUMPY:
            w.add_tensor(t.name, raw.view(_NUMPY[t.ttype]).reshape(shape))
        else:  # quantized or bf16: rows of raw bytes, the writer derives the element shape
            w.add_tensor(t.name, raw.reshape([*shape[:-1], -1]), raw_dtype=GGMLQuantizationType(t.ttype))
    return finish_atomically(w, tmp, out)
