"""Chat formatting with the model's own template, and fitting a conversation into the context."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import llama_cpp

from engine.llm.target import Jinja2ChatFormatter, Target

# Used only when a GGUF carries no template: ChatML is what most small instruct models expect.
CHATML_FALLBACK = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

VALID_ROLES = {"system", "user", "assistant"}

# A GGUF without a template: the format its architecture's chat models use, by llama.cpp's name for
# it (llama_chat_apply_template's built-ins); ChatML where llama.cpp knows none.
BUILTIN_BY_ARCH = {
    "gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "phi3": "phi3", "command-r": "command-r",
    "cohere2": "command-r", "deepseek": "deepseek", "deepseek2": "deepseek2", "chatglm": "chatglm4",
    "glm4": "chatglm4", "exaone": "exaone3", "exaone4": "exaone4", "granite": "granite", "minicpm": "minicpm",
    "qwen2": "chatml", "qwen3": "chatml", "llama4": "llama4",
}  # fmt: skip
BASE_MODEL_HINTS = ("instruct", "chat", "-it", "_it", " it", "sft", "rlhf", "dpo", "assistant")


def builtin_template(architecture: str, vocab_has: Callable[[str], bool]) -> str:
    """llama.cpp's built-in chat format for a model that carries no template of its own."""
    if architecture == "llama":  # Llama 3 marks turns with <|eot_id|>; Llama 2 and Mistral with [INST]
        return "llama3" if vocab_has("<|eot_id|>") else "llama2"
    return BUILTIN_BY_ARCH.get(architecture, "chatml")


def looks_like_base_model(name: str, has_template: bool) -> bool:
    """No template and no chat/instruct in its name: most likely a base model, which continues text
    rather than answering."""
    return not has_template and not any(h in f" {name.lower()}" for h in BASE_MODEL_HINTS)


class ChatFormatError(ValueError):
    pass


class ContextOverflow(ChatFormatError):
    """A prompt longer than its budget, where trimming is not wanted (the HTTP server's requests)."""

    def __init__(self, n_tokens: int, budget: int, what: str = "conversation") -> None:
        super().__init__(
            f"the {what} is {n_tokens} tokens; at most {budget} fit beside the answer in the context; shorten it"
            " or lower max_tokens"
        )
        self.n_tokens, self.budget = n_tokens, budget


@dataclass
class FittedPrompt:
    tokens: list[int]
    dropped_messages: int
    truncated_last: bool
    cut_chars: int = 0  # characters taken out of the middle of the last message
    answer_cut: int = 0  # continuing an answer longer than the room: characters of its start left out


CUT_MARK = "\n\n[… {n} characters cut here to fit the model's context …]\n\n"


class ChatPrompt:
    def __init__(
        self,
        template: str | None,
        bos: str,
        eos: str,
        tokenize: Callable[[str], list[int]],
        builtin: Callable[[list[dict[str, str]]], str] | None = None,
        builtin_name: str = "",
        tokenize_plain: Callable[[str], list[int]] | None = None,
    ) -> None:
        self.has_template = bool(template)
        self._formatter = Jinja2ChatFormatter(template or CHATML_FALLBACK, eos_token=eos, bos_token=bos)
        self._tokenize = tokenize
        self._tokenize_plain = tokenize_plain or tokenize
        # no template of its own: llama.cpp's built-in format for the architecture, when given
        self._builtin = None if template else builtin
        self.format_name = "the model's own template" if template else (builtin_name or "chatml")

    @classmethod
    def for_model(cls, llm: Target, template: str | None) -> ChatPrompt:
        """The model's template, special tokens and BOS rule: one definition for the worker and
        the trainer, so teacher data sees exactly the prompts users send."""
        bos_id, eos_id = llm.token_bos(), llm.token_eos()
        bos = llm.token_text(bos_id) if bos_id >= 0 else ""
        eos = llm.token_text(eos_id) if eos_id >= 0 else ""
        add_bos = llm.add_bos_token() and bos_id >= 0

        def tokenize(text: str) -> list[int]:
            # a template that writes the BOS text itself must not get a second one
            return llm.tokenize(text.encode("utf-8"), add_bos=add_bos and not (bos and text.startswith(bos)), special=True)

        def tokenize_plain(text: str) -> list[int]:  # a message's own tokens: no BOS, no special tokens
            return llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

        if template:
            return cls(template, bos, eos, tokenize, tokenize_plain=tokenize_plain)
        name = builtin_template(_architecture(llm), lambda piece: _vocab_has(llm, piece))
        return cls(None, bos, eos, tokenize, lambda messages: _apply_builtin(name, messages), name, tokenize_plain)

    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt text of a conversation. Every system message reaches it: one that is not the
        leading one keeps its place where the template renders it there, else all of them are merged,
        a blank line apart, into one system message at the start (many templates take only that one,
        or raise on any other)."""
        if not _extra_system(messages):
            return self._render(messages)
        try:
            text = self._render(messages)
            # a template may also skip what it does not expect, silently
            if all(m["content"].strip() in text for m in messages if m["role"] == "system"):
                return text
        except ChatFormatError:
            pass
        return self._render(merge_system(messages))

    def _render(self, messages: list[dict[str, str]]) -> str:
        try:
            if self._builtin is not None:
                return self._builtin(messages)
            prompt: str = self._formatter(messages=messages).prompt
            return prompt
        except Exception as exc:  # jinja errors of many kinds: the template is the model's, not ours
            raise ChatFormatError(f"the model's chat template failed on this conversation: {exc}") from exc

    def fit(self, messages: list[dict[str, str]], budget: int, continue_answer: bool = False, trim: bool = True) -> FittedPrompt:
        """Tokens of the conversation, dropping the oldest turns (never a system message or the last
        message) until it fits in `budget` tokens; as a last resort the middle of the last message
        is cut, its start and end kept. trim=False: ContextOverflow instead of any of that."""
        # continue_answer: the last message is an unfinished answer; the prompt is the conversation
        # before it with the generation prompt, followed by that answer's text
        answer = ""
        if continue_answer:
            if not messages or messages[-1].get("role") != "assistant":
                raise ChatFormatError("continuing an answer needs the unfinished answer as the last message")
            answer, messages = messages[-1]["content"], messages[:-1]
        validate_messages(messages)
        dropped = 0
        while True:
            tokens = self._tokenize(self.render(messages) + answer)
            if len(tokens) <= budget or sum(m["role"] != "system" for m in messages) <= 1:
                break
            if not trim:
                raise ContextOverflow(len(tokens), budget)
            messages, cut = _drop_oldest(messages)
            dropped += cut
        if len(tokens) <= budget:
            return FittedPrompt(tokens, dropped, False)
        if not trim:
            raise ContextOverflow(len(tokens), budget)
        system = [m for m in messages if m["role"] == "system"]
        if answer:  # continuing an answer that filled the context: the question and the answer's latest part
            keep = len(answer)
            while len(tokens) > budget and keep > 0:
                keep = int(keep * 0.9)
                tokens = self._tokenize(self.render(messages) + answer[len(answer) - keep :])
            if len(tokens) <= budget:
                return FittedPrompt(tokens, dropped, False, answer_cut=len(answer) - keep)
            answer = ""  # not even the question fits beside it: cut the question as below, no answer
        # One message longer than the context: cut its middle. The start usually says what to do
        # ("Summarize this text: ...") and the end is what was asked last; both are kept, and the
        # model is told where text is missing.
        last = dict(messages[-1])
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

    def count(self, messages: list[dict[str, str]], text: str) -> tuple[int, int]:
        """(the text's own tokens, the whole prompt's with the text as the next user message), uncut."""
        n_text = len(self._tokenize_plain(text)) if text else 0
        return n_text, len(self._tokenize(self.render([*messages, {"role": "user", "content": text}])))

    def user_turn_prefix(self) -> list[int]:
        """The tokens a conversation starts with up to where the user's first message would begin
        (system turn included where the template adds one): from there the model writes a question
        of its own (Magpie, arXiv 2406.08464)."""
        mark = "\x00QUESTION\x00"
        text = self.render([{"role": "user", "content": mark}])
        return self._tokenize(text[: text.index(mark)])

    def fit_text(self, text: str, budget: int) -> FittedPrompt:
        """A raw prompt (text completion): tokenized as is, no template. Nothing of it is cut: which
        part matters is the caller's to say, so one that does not fit is refused."""
        tokens = self._tokenize(text)
        if len(tokens) > budget:
            raise ContextOverflow(len(tokens), budget, "prompt")
        return FittedPrompt(tokens, 0, False)


def validate_messages(messages: list[dict[str, str]]) -> None:
    if not messages:
        raise ChatFormatError("the conversation is empty")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in VALID_ROLES or not isinstance(m.get("content"), str):
            raise ChatFormatError(f"each message needs a role (system/user/assistant) and text content, got {str(m)[:80]}")
    if messages[-1]["role"] != "user":
        raise ChatFormatError("the last message must be the user's")


def _extra_system(messages: list[dict[str, str]]) -> bool:
    """Any system message other than a leading one."""
    return any(m["role"] == "system" for m in messages[1:])


def merge_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """Every system message's text joined, a blank line apart, into one system message at the start."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [m for m in messages if m["role"] != "system"]
    return [{"role": "system", "content": "\n\n".join(system)}, *rest] if system else rest


def _drop_oldest(messages: list[dict[str, str]]) -> tuple[list[dict[str, str]], int]:
    """The conversation without its oldest exchange (a question and its reply at once, so the history
    never starts with a reply); system messages stay. Returns it and how many messages went."""
    turns = [i for i, m in enumerate(messages) if m["role"] != "system"]
    pair = len(turns) > 2 and messages[turns[0]]["role"] == "user" and messages[turns[1]]["role"] == "assistant"
    cut = set(turns[: 2 if pair else 1])
    return [m for i, m in enumerate(messages) if i not in cut], len(cut)


def _architecture(llm: Target) -> str:
    return llm.meta("general.architecture")


def _vocab_has(llm: Target, piece: str) -> bool:
    toks = llm.tokenize(piece.encode(), add_bos=False, special=True)
    return len(toks) == 1


def _apply_builtin(name: str, messages: list[dict[str, str]]) -> str:
    """llama.cpp's own rendering of a built-in chat format (llama_chat_apply_template)."""
    keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
    chat = (llama_cpp.llama_chat_message * len(keep))()
    for i, (role, content) in enumerate(keep):
        chat[i].role, chat[i].content = role, content
    size = 2 * sum(len(r) + len(c) for r, c in keep) + 256
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(name.encode(), chat, len(keep), True, buf, size)
        if n < 0:
            raise ChatFormatError(f"llama.cpp has no chat format named {name}")
        if n <= size:
            return buf.raw[:n].decode("utf-8", errors="replace")
        size = n + 1
    raise ChatFormatError("the chat format's output did not fit")
