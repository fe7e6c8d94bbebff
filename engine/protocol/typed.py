"""Type hints of the protocol's dataclasses, read once per class: the decoder builds fields by
them, and enum-typed fields given as plain strings become members."""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from enum import StrEnum
from functools import cache
from typing import Any


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _enum_fields(cls: type) -> dict[str, type[StrEnum]]:
    hints = _hints(cls)
    return {f.name: hints[f.name] for f in fields(cls) if isinstance(hints[f.name], type) and issubclass(hints[f.name], StrEnum)}


@dataclass
class _Typed:
    """Enum-typed fields given as plain strings become members (unknown strings stay as given, for
    validate() or the peer's decode to refuse with a clear message)."""

    def __post_init__(self) -> None:
        cls: type = type(self)  # hashable, as every class is (mypy reads a dataclass's unset __hash__ as the class's)
        for name, enum in _enum_fields(cls).items():
            value = getattr(self, name)
            if isinstance(value, str) and not isinstance(value, enum) and value in enum._value2member_map_:
                setattr(self, name, enum(value))
