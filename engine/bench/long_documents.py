"""The documents `specee bench --long` reads: long natural text cut to an exact prompt length.

The text is the Python reference's own prose as the standard library ships it (pydoc_data.topics:
~465,000 characters of the language reference, the same on every machine with this Python), so
nothing has to be downloaded and no prompt of ours (dev or training) is in it. A document is one
user message, "Document N:" and a stretch of that text, whose chat-formatted prompt is exactly the
asked number of tokens of the model's own tokenizer; document N starts where N-1 ended, so no two
samples share a prefix beyond the chat template's own first tokens."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from engine.llm.chat_prompt import ChatPrompt

# Lengths of the targets (1k, 4k, 16k tokens); a model that holds less gets its context
# less LONG_ROOM in place of each that does not fit (the default model, 8k: 1k, 4k and 7k).
LONG_LENGTHS = (1024, 4096, 16384)
LONG_ROOM = 1024
ASK = "Summarise the document above in three sentences."
# between the document and the question: where every cut of the text straddles the length (tokens
# merging across it), another of these gives it
JOINS = ("\n\n", "\n\n\n", "\n", " \n\n")


class DocumentError(ValueError):
    pass


def long_lengths(n_ctx_train: int) -> list[int]:
    """The prompt lengths to read on a model that was trained for n_ctx_train tokens."""
    cap = n_ctx_train - LONG_ROOM if n_ctx_train > LONG_ROOM else n_ctx_train // 2
    return sorted({min(n, cap) for n in LONG_LENGTHS})


def context_for(lengths: list[int], n_ctx_train: int) -> int:
    """One context length for every side: the longest prompt, the answer's room, a multiple of 256."""
    need = max(lengths) + 64
    return max(need, min(n_ctx_train, -(-(max(lengths) + LONG_ROOM) // 256) * 256)) if n_ctx_train else need


@cache
def corpus() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k].strip() for k in sorted(topics))


class Documents:
    """Documents of exact prompt lengths for one model's tokenizer and chat template, in order."""

    def __init__(self, chat: ChatPrompt, tokenize: Callable[[str], list[int]], detokenize: Callable[[list[int]], str]) -> None:
        self._chat, self._detokenize = chat, detokenize
        self._tokens = tokenize(corpus())
        self._next = 0  # where the next document's text starts in the corpus' tokens
        self._count = 0

    def prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        return self._chat.fit(messages, 1 << 30, trim=False).tokens

    def next(self, length: int) -> tuple[list[dict[str, str]], list[int]]:
        """(the conversation, its prompt's tokens): exactly `length` tokens. DocumentError if the
        text cannot be cut to that length (a length shorter than the template and the question)."""
        header = f"Document {self._count + 1}:\n\n"

        def text(n: int) -> str:
            start = self._next % len(self._tokens)
            stretch = (self._tokens * (2 + n // len(self._tokens)))[start : start + n] if n > 0 else []
            return self._detokenize(stretch).rstrip()

        def build(body: str, join: str = JOINS[0]) -> tuple[list[dict[str, str]], list[int]]:
            messages = [{"role": "user", "content": header + body + join + ASK}]
            return messages, self.prompt_tokens(messages)

        n = max(0, length - len(build("")[1]))
        counts: dict[int, int] = {}
        for _ in range(10):  # a cut stretch re-tokenizes to about as many tokens: a few steps converge
            counts[n] = len(build(text(n))[1])
            if counts[n] == length or n + length - counts[n] in counts:
                break
            n = max(0, n + length - counts[n])
        if counts[n] == length:
            made = build(text(n))
            self._next += n
            self._count += 1
            return made
        # where tokens merge across the cut (a run of spaces), no cut may give the length: a cut that is
        # too long loses characters from its end, each tried with every join, until one fits
        first = min((m for m, c in counts.items() if c > length), default=n)
        for m in range(first, first + 16):
            body = text(m)
            for end in range(len(body), max(0, len(body) - 400), -1):
                tried = [build(body[:end], join) for join in JOINS]
                for messages, tokens in tried:
                    if len(tokens) == length:
                        self._next += m
                        self._count += 1
                        return messages, tokens
                if all(len(tokens) < length for _, tokens in tried):
                    break
        raise DocumentError(f"could not cut a document to exactly {length} prompt tokens (a cut of {n} gave {counts.get(n)})")
