"""encode / decode: the only (de)serialisers, so both sides agree by construction."""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import asdict, fields
from enum import StrEnum
from typing import Any

from engine.protocol.errors import ProtocolError, VersionMismatch
from engine.protocol.events import Ready
from engine.protocol.message import _REGISTRY, Message
from engine.protocol.typed import _hints
from engine.protocol.version import PROTOCOL_VERSION


def encode(msg: Message) -> str:
    data = asdict(msg)
    data["type"] = msg.TYPE
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _value(value: Any, hint: Any, where: str) -> Any:
    """A JSON value as the field's type: enum members (known values only) and nested dataclasses."""
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        if not isinstance(value, str) or value not in hint._value2member_map_:
            choices = ", ".join(m.value for m in hint)
            raise ProtocolError(f"{where}: {value!r} is not a known {hint.__name__} (one of {choices})")
        return hint(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ProtocolError(f"{where} must be an object")
        return _build(hint, value, where)
    if typing.get_origin(hint) is list and typing.get_args(hint):
        if not isinstance(value, list):
            raise ProtocolError(f"{where} must be a list")
        (item,) = typing.get_args(hint)
        return [_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    hints = _hints(cls)
    known = {f.name for f in fields(cls)}
    # newer peer: fields we do not know are ignored
    kwargs = {k: _value(v, hints[k], f"{where}.{k}") for k, v in data.items() if k in known}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ProtocolError(f"{where}: {exc}") from exc


def decode(line: str | bytes) -> Message:
    """The message on one line. ProtocolError for anything else: not JSON, an unknown type, a value
    outside its enum; VersionMismatch (checked first) for a Load or Ready of another version."""
    try:
        data = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("type") not in _REGISTRY:
        raise ProtocolError(f"unknown message: {str(line)[:200]}")
    cls = _REGISTRY[data.pop("type")]
    if "protocol_version" in {f.name for f in fields(cls)}:
        version = data.get("protocol_version", 1)  # version 1 sent no version in Load
        if version != PROTOCOL_VERSION:
            raise VersionMismatch(version, "the engine" if cls is Ready else "the app")
    msg: Message = _build(cls, data, cls.TYPE)
    return msg
