"""A chat's generation controls, Qt-free: sampling (temperature, top-p, top-k, min-p, repeat
penalty), the answer's length limit, the context length it asks for and its system prompt preset.
Each conversation keeps its own (the store's conversations.generation); the window's Generation
dialog and `specee chat`'s flags and /set both change them through ChatSession.set_generation, and
validate() checks them with the protocol's own limits (Sampling.validate, N_CTX_MIN..N_CTX_MAX)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from engine import protocol as p

# name -> (temperature, top_p): the composer's quick choice; any other value reads "Custom"
SAMPLING_PRESETS: dict[str, tuple[float, float]] = {
    "Precise": (0.2, 0.9),
    "Balanced": (0.7, 0.95),
    "Creative": (1.0, 0.98),
}
CUSTOM = "Custom"

# name -> system prompt: starting points the user may edit (the chat keeps the text itself)
SYSTEM_PRESETS: dict[str, str] = {
    "None": "",
    "Helpful assistant": "You are a helpful assistant. Answer clearly and accurately.",
    "Concise": "Answer in as few words as will do. No preamble, no repetition of the question.",
    "Programmer": "You are an expert programmer. Give working code in fenced blocks with the language named, "
    "then explain briefly.",
    "Teacher": "You are a patient teacher. Explain step by step with a small example, and check the key idea at the end.",
    "Translator": "Translate the user's text. Into English when it is in another language, otherwise into the language "
    "they name. Reply with the translation only.",
}

# what users read for each field, in the protocol's messages and the window's labels
LABELS = {
    "temperature": "Temperature",
    "top_p": "Top-p",
    "top_k": "Top-k",
    "min_p": "Min-p",
    "repeat_penalty": "Repeat penalty",
    "max_tokens": "Max answer length",
    "n_ctx": "Context length",
}


@dataclass(frozen=True)
class Generation:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    max_tokens: int = 0  # 0: as long as the context has room (Continue writes more)
    n_ctx: int = 0  # 0: the app's context length (Settings); else this chat loads the model with its own

    @property
    def preset(self) -> str:
        """The sampling preset these values are, or CUSTOM."""
        for name, (temp, top_p) in SAMPLING_PRESETS.items():
            if (self.temperature, self.top_p) == (temp, top_p):
                return name
        return CUSTOM

    def with_preset(self, name: str) -> Generation:
        temp, top_p = SAMPLING_PRESETS[name]
        return replace(self, temperature=temp, top_p=top_p)

    def sampling(self, base: p.Sampling | None = None) -> p.Sampling:
        """The protocol's Sampling for a request (seed and stop strings from base)."""
        base = base or p.Sampling()
        return replace(
            base, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p,
            repeat_penalty=self.repeat_penalty, max_tokens=self.max_tokens,
        )  # fmt: skip

    def validate(self) -> None:
        """SettingsError naming the first value outside what the engine accepts, in the words users read."""
        for f in fields(self):
            value = getattr(self, f.name)
            want_int = f.type in ("int", int)
            if isinstance(value, bool) or not isinstance(value, int if want_int else (int, float)):
                kind = "a whole number" if want_int else "a number"
                raise p.SettingsError(f"{LABELS[f.name]} must be {kind}, got {value!r}")
        try:
            self.sampling().validate()
        except p.SettingsError as exc:
            raise p.SettingsError(_readable(str(exc))) from None
        if self.n_ctx and not p.N_CTX_MIN <= self.n_ctx <= p.N_CTX_MAX:
            raise p.SettingsError(
                f"Context length must be 0 (the app's setting) or {p.N_CTX_MIN}..{p.N_CTX_MAX} tokens, got {self.n_ctx}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object) -> Generation:
        """What a conversation stored (or an import carried): known fields only; anything that does
        not validate falls back to the defaults, so a bad value never blocks opening a chat."""
        if not isinstance(data, dict):
            return cls()
        known = {f.name for f in fields(cls)}
        try:
            gen = cls(**{k: v for k, v in data.items() if k in known})
            gen.validate()
            return gen
        except (TypeError, p.SettingsError):
            return cls()


def _readable(message: str) -> str:
    """The protocol's message with the field's name as users read it."""
    for name, label in LABELS.items():
        if message.startswith(name + " "):
            message = label + message[len(name) :]
    return message
