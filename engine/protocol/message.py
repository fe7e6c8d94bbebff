"""The base of every message: its "type" tag, and the registry decode finds a tag's class in (each
subclass with a TYPE registers itself)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from engine.protocol.typed import _Typed

_REGISTRY: dict[str, type[Message]] = {}


@dataclass
class Message(_Typed):
    TYPE: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.TYPE:
            _REGISTRY[cls.TYPE] = cls
