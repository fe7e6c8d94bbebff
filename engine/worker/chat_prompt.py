"""Chat formatting with the model's own template, and fitting a conversation into the context."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

# Used only when a GGUF carries no template: ChatML is what most small instruct models expect.
CHATML_FALLBACK = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

VALID_ROLES = {"system", "user", "assistant"}


class ChatFormatError(ValueError):
    pass


@dataclass
class FittedPrompt:
    tokens: list[int]
    dropped_messages: int
    truncated_last: bool
    cut_chars: int = 0  # characters taken out of the middle of the last message


CUT_MARK = "\n\n[… {n} characters cut here to fit the model's context …]\n\n"


class ChatPrompt:
    def __init__(self, template: str | None, bos: str, eos: str, tokenize: Callable[[str], list[int]]) -> None:
        self.has_template = bool(template)
        self._formatter = Jinja2ChatFormatter(template or CHATML_FALLBACK, eos_token=eos, bos_token=bos)
        self._tokenize = tokenize

    @classmethod
    def for_model(cls, llm: Llama, template: str | None) -> ChatPrompt:
        """The model's template, special tokens and BOS rule: one definition for the worker and
        the trainer, so teacher data sees exactly the prompts users send."""
        model = llm._model
        bos_id, eos_id = model.token_bos(), model.token_eos()
        bos = model.token_get_text(bos_id) if bos_id >= 0 else ""
        eos = model.token_get_text(eos_id) if eos_id >= 0 else ""
        add_bos = model.add_bos_token() and bos_id >= 0

        def tokenize(text: str) -> list[int]:
            # a template that writes the BOS text itself must not get a second one
            return llm.tokenize(text.encode("utf-8"), add_bos=add_bos and not (bos and text.startswith(bos)), special=True)

        return cls(template, bos, eos, tokenize)

    def render(self, messages: list[dict[str, str]]) -> str:
        try:
            return self._formatter(messages=messages).prompt
        except Exception as exc:  # jinja errors of many kinds: the template is the model's, not ours
            raise ChatFormatError(f"the model's chat template failed on this conversation: {exc}") from exc

    def fit(self, messages: list[dict[str, str]], budget: int, continue_answer: bool = False) -> FittedPrompt:
        """Tokens of the conversation, dropping the oldest turns (never the system prompt or the last
        message) until it fits in `budget` tokens; as a last resort the middle of the last message
        is cut, its start and end kept."""
        # continue_answer: the last message is an unfinished answer; the prompt is the conversation
        # before it with the generation prompt, followed by that answer's text
        answer = ""
        if continue_answer:
            if not messages or messages[-1].get("role") != "assistant":
                raise ChatFormatError("continuing an answer needs the unfinished answer as the last message")
            answer, messages = messages[-1]["content"], messages[:-1]
        validate_messages(messages)
        system = [m for m in messages if m["role"] == "system"][:1]
        turns = [m for m in messages if m["role"] != "system"]
        dropped = 0
        while True:
            tokens = self._tokenize(self.render(system + turns) + answer)
            if len(tokens) <= budget or len(turns) <= 1:
                break
            # Drop a whole exchange at once so the history never starts with an assistant reply.
            cut = 2 if len(turns) > 2 and turns[0]["role"] == "user" and turns[1]["role"] == "assistant" else 1
            turns = turns[cut:]
            dropped += cut
        if len(tokens) <= budget:
            return FittedPrompt(tokens, dropped, False)
        # One message longer than the context: cut its middle. The start usually says what to do
        # ("Summarize this text: ...") and the end is what was asked last; both are kept, and the
        # model is told where text is missing.
        last = dict(turns[-1])
        content = last["content"]
        keep = len(content)
        while len(tokens) > budget and keep > 0:
            keep = int(keep * (0.75 if len(tokens) > 2 * budget else 0.95))
            head, tail = content[: keep // 2], content[len(content) - (keep - keep // 2) :] if keep else ""
            last["content"] = head + CUT_MARK.format(n=len(content) - keep) + tail
            tokens = self._tokenize(self.render([*system, last]) + answer)
        if len(tokens) > budget:
            raise ChatFormatError(f"the system prompt alone needs more than the {budget} tokens available; shorten it")
        return FittedPrompt(tokens, dropped, True, len(content) - keep)


def validate_messages(messages: list[dict[str, str]]) -> None:
    if not messages:
        raise ChatFormatError("the conversation is empty")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in VALID_ROLES or not isinstance(m.get("content"), str):
            raise ChatFormatError(f"each message needs a role (system/user/assistant) and text content, got {str(m)[:80]}")
    if messages[-1]["role"] != "user":
        raise ChatFormatError("the last message must be the user's")
