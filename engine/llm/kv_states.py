"""Saved KV caches of conversations the target answered before (issue 24, item 2): llama.cpp's
sequence state (llama_state_seq_get_data) of the tokens then in the cache, kept in memory up to a
byte budget, least recently used first out, and on disk (a folder per model sha256, native build
and context settings: `folder_key`) for states evicted from memory and all of them when the model is
closed (model switch, quit). Switching back to a conversation, also after a restart, restores its
cache, so only what is new is prefilled. A file is named by a hash of its tokens and carries them and
a sha256 of its content: a damaged or truncated one is ignored (and removed) with a log line, and the
conversation is prefilled as without it."""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import struct
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import llama_cpp

from engine.kept_caches import DEFAULT_DISK_BUDGET_BYTES
from engine.sequences import common_prefix

DEFAULT_BUDGET_BYTES = 512 * 1024 * 1024
# a saved state is worth restoring only when it spares this many more tokens than the live cache
MIN_GAIN_TOKENS = 32
MAGIC = b"SPECEE-KV1\n"
# ... with a drafter's own cache beside the target's (an EAGLE head's, tagged with the head it is of)
MAGIC_AUX = b"SPECEE-KV2\n"
# a state as llama.cpp wrote it (a ctypes array) or as read from disk (a view of a bytearray): both
# go back to llama.cpp without a copy; a 3000-token state of the default model is ~78 MB
Buffer = Any
# a drafter's own cache saved beside the target's: (what it is of, e.g. the head file's sha256; its state)
Aux = tuple[str, Buffer]
log = logging.getLogger(__name__)


def seq_state(ctx: Any, seq: int, max_bytes: int | None = None) -> Buffer | None:
    """A context's sequence state (llama_state_seq_get_data), or None: empty, over max_bytes, refused."""
    size = llama_cpp.llama_state_seq_get_size(ctx, seq)
    if size <= 0 or (max_bytes is not None and size > max_bytes):
        return None
    buf = (ctypes.c_uint8 * size)()
    return buf if llama_cpp.llama_state_seq_get_data(ctx, buf, size, seq) == size else None


def set_seq_state(ctx: Any, seq: int, data: Buffer) -> bool:
    """Load a state seq_state() made (a ctypes array, or a view of a file read into a bytearray:
    either goes back to llama.cpp without a copy) into the context's sequence `seq`."""
    buf = data if isinstance(data, ctypes.Array) else (ctypes.c_uint8 * len(data)).from_buffer(data)
    n_read: int = llama_cpp.llama_state_seq_set_data(ctx, buf, len(data), seq)
    return n_read == len(data)


def folder_key(model_sha256: str, build_key: str, n_ctx: int, n_batch: int) -> str:
    """What a saved state is valid for: the model file, our native build and the context settings."""
    return hashlib.sha256(f"{model_sha256}|{build_key}|{n_ctx}|{n_batch}".encode()).hexdigest()[:32]


def _file_name(tokens: tuple[int, ...]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()[:32] + ".kv"


def _write(path: Path, tokens: tuple[int, ...], data: Buffer, aux: Aux | None = None) -> None:
    magic = MAGIC_AUX if aux is not None else MAGIC
    parts = [
        magic + struct.pack("<I", len(tokens)) + struct.pack(f"<{len(tokens)}i", *tokens) + struct.pack("<Q", len(data)),
        data,
    ]
    if aux is not None:
        tag = aux[0].encode()
        parts += [struct.pack("<I", len(tag)) + tag + struct.pack("<Q", len(aux[1])), aux[1]]
    digest = hashlib.sha256()
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        for part in parts:
            digest.update(part)
            f.write(part)
        f.write(digest.digest())
    tmp.replace(path)


def _read_tokens(path: Path) -> tuple[int, ...]:
    with path.open("rb") as f:
        head = f.read(len(MAGIC) + 4)
        if len(head) != len(MAGIC) + 4 or not head.startswith((MAGIC, MAGIC_AUX)):
            raise ValueError("not a saved KV state")
        (n,) = struct.unpack("<I", head[len(MAGIC) :])
        raw = f.read(4 * n)
        if len(raw) != 4 * n:
            raise ValueError("truncated")
        return struct.unpack(f"<{n}i", raw)


def _read(path: Path) -> tuple[tuple[int, ...], memoryview, Aux | None]:
    with path.open("rb") as f:  # into a bytearray: its views go to llama.cpp without a copy
        raw = bytearray(path.stat().st_size)
        f.readinto(raw)
    body = memoryview(raw)
    if len(body) < len(MAGIC) + 4 + 8 + 32 or hashlib.sha256(body[:-32]).digest() != body[-32:]:
        raise ValueError("damaged or truncated (checksum)")
    tokens = _read_tokens(path)
    off = len(MAGIC) + 4 + 4 * len(tokens)
    (size,) = struct.unpack("<Q", body[off : off + 8])
    data = body[off + 8 : off + 8 + size]
    off += 8 + size
    aux = None
    if body[: len(MAGIC_AUX)] == MAGIC_AUX:
        (n_tag,) = struct.unpack("<I", body[off : off + 4])
        tag = bytes(body[off + 4 : off + 4 + n_tag]).decode()
        off += 4 + n_tag
        (n_aux,) = struct.unpack("<Q", body[off : off + 8])
        aux = (tag, body[off + 8 : off + 8 + n_aux])
        off += 8 + n_aux
    if len(data) != size or off + 32 != len(body):
        raise ValueError("damaged (sizes)")
    return tokens, data, aux


class KvStates:
    def __init__(
        self, ctx: Any, budget_bytes: int = DEFAULT_BUDGET_BYTES, folder: Path | None = None,
        disk_budget_bytes: int = DEFAULT_DISK_BUDGET_BYTES,
    ) -> None:  # fmt: skip
        self._ctx = ctx
        self.budget, self.disk_budget = budget_bytes, disk_budget_bytes
        # tokens -> (the target's state, a drafter's beside it or None)
        self._states: OrderedDict[tuple[int, ...], tuple[Buffer, Aux | None]] = OrderedDict()
        self.restored_aux: Aux | None = None  # what the last restore() found beside the target's state
        self.folder = folder
        self._disk: dict[tuple[int, ...], Path] = {}
        self._scan()

    def _scan(self) -> None:
        """Index the folder's states not known yet: at load, and again before each lookup, since
        another process (the engine that quit just before this one started, still writing its
        caches out) may add some later."""
        if self.folder is None or not self.folder.is_dir():
            return
        known = set(self._disk.values())
        for f in self.folder.glob("*.kv"):
            if f in known:
                continue
            try:
                self._disk[_read_tokens(f)] = f
            except (OSError, ValueError, struct.error) as exc:
                self._drop(f, exc)

    @staticmethod
    def _drop(f: Path, why: object) -> None:
        log.warning("ignored the saved KV state %s (%s); that conversation is prefilled again", f, why)
        f.unlink(missing_ok=True)

    def _to_disk(self, key: tuple[int, ...], state: tuple[Buffer, Aux | None], used_at: float | None = None) -> None:
        """used_at: when the state was last used, as its file's time (the budget drops the oldest first)."""
        if self.folder is None or self.disk_budget <= 0:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / _file_name(key)
            _write(path, key, *state)
            if used_at is not None:
                os.utime(path, (used_at, used_at))
            self._disk[key] = path
            files = sorted(self.folder.parent.glob("*/*.kv"), key=lambda f: f.stat().st_mtime)
            total = sum(f.stat().st_size for f in files)
            while files and total > self.disk_budget:  # least recently written out first, all models
                old = files.pop(0)
                total -= old.stat().st_size
                old.unlink(missing_ok=True)
                self._disk = {k: v for k, v in self._disk.items() if v != old}
        except OSError as exc:
            log.warning("could not save a KV state under %s: %s", self.folder, exc)

    def spill(self) -> None:
        """Everything kept in memory to disk (the model is being closed): the most recently used
        first, as an engine that takes too long to quit is killed (the app waits 5 s) and the live
        conversation's state is the one worth most; a state whose file is there already is not
        written again (~80 MB a 3,000-token chat of the default model, hashed as it is written)."""
        now = time.time()
        for rank, (key, state) in enumerate(reversed(list(self._states.items()))):
            if self.folder is not None and (self.folder / _file_name(key)).exists():
                self._disk[key] = self.folder / _file_name(key)
                continue
            self._to_disk(key, state, used_at=now - rank)  # the files' times keep the order of use

    def used_bytes(self) -> int:
        return sum(len(b) + (len(aux[1]) if aux else 0) for b, aux in self._states.values())

    def __len__(self) -> int:
        return len(self._states)

    def save(self, tokens: list[int], seq: int = 0, aux: Aux | None = None) -> None:
        """Keep sequence `seq`'s cache, which holds exactly `tokens` (0: the one-at-a-time path's;
        others: engine/llm/batched.py's), and `aux` beside it (a drafter's own cache of them)."""
        if not tokens:
            return
        buf = seq_state(self._ctx, seq, self.budget)
        if buf is None:
            return
        key = tuple(tokens)
        # a saved prefix of this conversation is superseded by the longer state
        for old in [k for k in self._states if len(k) <= len(key) and key[: len(k)] == k]:
            del self._states[old]
        self._states[key] = (buf, aux)  # no copy into bytes: llama.cpp takes this array back as it is
        while self.used_bytes() > self.budget:
            self._to_disk(*self._states.popitem(last=False))

    def best(self, tokens: list[int]) -> tuple[int, tuple[int, ...] | None]:
        """The saved state sharing the longest prefix with `tokens`, and that prefix's length."""
        self._scan()
        best_n, best_key = 0, None
        for key in [*self._states, *self._disk]:
            n = common_prefix(list(key), tokens)
            if n > best_n:
                best_n, best_key = n, key
        return best_n, best_key

    def restore(self, key: tuple[int, ...], seq: int | None = None) -> list[int] | None:
        """Load a saved state into sequence 0 (the live cache is dropped), or into sequence `seq`
        alone (the others decode on); its tokens, or None (that cache left empty) where llama.cpp
        refused it. `restored_aux` then holds the drafter's state saved beside it, if any."""
        self.restored_aux = None
        if key in self._states:
            data, aux = self._states.pop(key)
        else:
            path = self._disk.pop(key)
            try:
                tokens, data, aux = _read(path)
                if tokens != key:
                    raise ValueError("tokens differ from its index")
            except (OSError, ValueError, struct.error) as exc:
                self._drop(path, exc)
                return None
        mem = llama_cpp.llama_get_memory(self._ctx)

        def drop() -> None:
            if seq is None:
                llama_cpp.llama_memory_clear(mem, True)
            else:
                llama_cpp.llama_memory_seq_rm(mem, seq, -1, -1)

        drop()
        if not set_seq_state(self._ctx, seq or 0, data):
            drop()
            return None
        self._states[key] = (data, aux)  # most recently used now
        self.restored_aux = aux
        return list(key)
