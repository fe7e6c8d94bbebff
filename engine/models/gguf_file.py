"""Fast GGUF header inspection: identify a model file and reject broken ones before llama.cpp sees them.

llama.cpp answers a bad file with a bare "failed to load"; we want "truncated: 49.9 of 98.4 MB
present, re-download it". The header is parsed by hand because gguf.GGUFReader materialises every
tokenizer array (5 s for a 49k vocabulary); the type sizes come from the gguf package.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types -> struct format (scalars)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
# Arrays we keep in full; others are skipped (tokenizer vocabularies are large).
_KEEP_ARRAYS = {"general.languages", "general.tags", "eagle3.target_layers"}  # the last: which layers a head reads
_TOKENIZER_KEYS = {"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.merges"}
# Lengths beyond this mean a corrupt header, not a big model (a short read means truncation).
_MAX_LEN = 1 << 31


class ModelFileError(Exception):
    """A model file that cannot be used, with a message that says what to do."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # missing | not_gguf | truncated | unsupported | unreadable


@dataclass
class GGUFInfo:
    path: Path
    version: int
    metadata: dict[str, Any]
    tensor_count: int
    data_offset: int
    data_end: int  # bytes the tensors need; a complete file is at least this long
    file_size: int
    tensor_types: dict[str, int] = field(default_factory=dict)
    tensor_bytes: dict[str, int] = field(default_factory=dict)
    # sha256 of the tokenizer's model, vocabulary and merges as stored: equal means a draft model
    # proposes token ids the target reads the same way
    tokenizer_sha256: str = ""
    tensor_dims: dict[str, list[int]] = field(default_factory=dict)
    tensor_offsets: dict[str, int] = field(default_factory=dict)  # from data_offset

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(f"{self.architecture}.{key}", default)

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name") or self.path.stem)

    @property
    def n_layer(self) -> int:
        return int(self.arch_value("block_count", 0))

    @property
    def n_embd(self) -> int:
        return int(self.arch_value("embedding_length", 0))

    @property
    def n_ctx_train(self) -> int:
        return int(self.arch_value("context_length", 0))

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return str(value) if value else None


class _Reader:
    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh, self.size = fh, size

    def take(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise EOFError
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("Q")
        if n > _MAX_LEN:
            raise ValueError(f"implausible string length {n}")
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, keep: bool = True) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            itype, count = self.unpack("I"), self.unpack("Q")
            if count > _MAX_LEN:
                raise ValueError(f"implausible array length {count}")
            if itype in _SCALARS and not keep:
                self.fh.seek(struct.calcsize(_SCALARS[itype]) * count, 1)
                return count
            items = [self.value(itype, keep) for _ in range(count)]
            return items if keep else count
        raise ValueError(f"unknown metadata value type {vtype}")


# Parsed headers by (path, size, mtime, inode): a load reads the same header for the worker's checks,
# the placement plan and the acceleration pack (~0.12 s each for the default model's 49k-token
# vocabulary); a file that changed has another key. Treat the infos as read-only.
_INFO_CACHE: dict[tuple, GGUFInfo] = {}
_INFO_CACHE_SIZE = 16


def inspect_gguf(path: str | Path) -> GGUFInfo:
    """Parse the header and check the file holds all its tensor data. Raises ModelFileError."""
    path = Path(path)
    try:
        st = path.stat()
        key: tuple | None = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino) if path.is_file() else None
    except OSError:
        key = None
    if key is not None and key in _INFO_CACHE:
        return _INFO_CACHE[key]
    info = _inspect_gguf(path)
    if key is not None:
        if len(_INFO_CACHE) >= _INFO_CACHE_SIZE:
            _INFO_CACHE.pop(next(iter(_INFO_CACHE)))
        _INFO_CACHE[key] = info
    return info


def _inspect_gguf(path: Path) -> GGUFInfo:
    if not path.exists():
        raise ModelFileError("missing", f"Model file not found: {path}. Choose another file or download the model again.")
    if not path.is_file():
        raise ModelFileError("unreadable", f"{path} is not a file.")
    size = path.stat().st_size
    try:
        with path.open("rb") as fh:
            r = _Reader(fh, size)
            if fh.read(4) != GGUF_MAGIC:
                raise ModelFileError(
                    "not_gguf", f"{path.name} is not a GGUF model file (wrong magic bytes). SpecEE Chat runs GGUF models only."
                )
            version = r.unpack("I")
            if version not in (2, 3):
                raise ModelFileError("unsupported", f"{path.name} uses GGUF version {version}; versions 2 and 3 are supported.")
            tensor_count, kv_count = r.unpack("Q"), r.unpack("Q")
            metadata: dict[str, Any] = {}
            tokenizer_spans = []
            for _ in range(kv_count):
                key = r.string()
                vtype = r.unpack("I")
                start = fh.tell()
                metadata[key] = r.value(vtype, keep=vtype != _ARRAY or key in _KEEP_ARRAYS)
                if key in _TOKENIZER_KEYS:
                    tokenizer_spans.append((key, start, fh.tell()))
            alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT
            data_end_rel, types, sizes, all_dims, offsets = 0, {}, {}, {}, {}
            for _ in range(tensor_count):
                name = r.string()
                n_dims = r.unpack("I")
                if not 1 <= n_dims <= 4:
                    raise ValueError(f"tensor {name} claims {n_dims} dimensions")
                dims = [r.unpack("Q") for _ in range(n_dims)]
                ttype, offset = r.unpack("I"), r.unpack("Q")
                sizes[name] = _tensor_bytes(name, ttype, dims)
                if sizes[name] > MAX_TENSOR_BYTES or offset > MAX_TENSOR_BYTES:
                    # garbled dimensions, not a short file: say so (not "terabytes needed")
                    raise ValueError(f"tensor {name} claims shape {dims}, larger than any model file")
                all_dims[name], offsets[name] = dims, offset
                data_end_rel = max(data_end_rel, offset + sizes[name])
                types[name] = ttype
            header_end = fh.tell()
            tok_hash = hashlib.sha256()
            for key, start, end in sorted(tokenizer_spans):
                fh.seek(start)
                tok_hash.update(key.encode() + b"\0" + r.take(end - start))
    except EOFError:
        raise ModelFileError(
            "truncated", f"{path.name} is truncated inside its header ({size} bytes). Download it again."
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelFileError("not_gguf", f"{path.name} has a corrupt GGUF header ({exc}). Download it again.") from None
    except OSError as exc:
        raise ModelFileError("unreadable", f"Cannot read {path}: {exc.strerror or exc}.") from None
    data_offset = (header_end + alignment - 1) // alignment * alignment
    data_end = data_offset + data_end_rel
    if size < data_end:
        raise ModelFileError(
            "truncated",
            f"{path.name} is truncated: {size / 1e6:.1f} MB present of {data_end / 1e6:.1f} MB needed. "
            "The download was probably interrupted; download it again.",
        )
    tokenizer = tok_hash.hexdigest() if tokenizer_spans else ""
    info = GGUFInfo(
        path, version, metadata, tensor_count, data_offset, data_end, size, types, sizes, tokenizer, all_dims, offsets
    )
    _check_shapes(info)
    return info


# no real tensor comes near this (a 1 TB tensor); a header claiming more has garbled numbers, which
# must not be reported as a download short of petabytes
MAX_TENSOR_BYTES = 1 << 40


def _check_shapes(info: GGUFInfo) -> None:
    """Tensor shapes against the architecture's own hyperparameters: a header whose numbers were
    damaged is caught here with a clear message, before llama.cpp sees it."""
    n_embd = info.arch_value("embedding_length")
    if not isinstance(n_embd, int):
        return
    for name, dims in info.tensor_dims.items():
        if (name == "token_embd.weight" or name.endswith(".attn_norm.weight")) and dims[0] != n_embd:
            raise ModelFileError(
                "corrupt",
                f"{info.path.name} is damaged: tensor {name} has shape {dims} but the model's embedding length is "
                f"{n_embd}. Download it again.",
            )


def _tensor_bytes(name: str, ttype: int, dims: list[int]) -> int:
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
    except (ValueError, KeyError):
        raise ModelFileError(
            "unsupported", f"tensor {name} has unknown type {ttype}; this llama.cpp is too old for it."
        ) from None
    n = 1
    for d in dims:
        n *= d
    return n // block * type_size
