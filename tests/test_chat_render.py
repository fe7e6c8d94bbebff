def test_line_breaks_survive_rendering_outside_code_and_code_is_untouched() -> None:
    """A haiku (or a message written with Shift+Enter) keeps its lines in the chat view."""
    from PySide6.QtGui import QTextDocument

    from engine.chats.render import message_segments

    haiku = "An old silent pond\nA frog jumps into the pond\nSplash! Silence again"
    segs = message_segments(f"{haiku}\n```python\nx = 1\ny = 2\n```\nDone.")
    assert [(s.kind, s.text) for s in segs][1:] == [("code", "x = 1\ny = 2\n"), ("text", "Done.")]
    doc = QTextDocument()
    doc.setMarkdown(segs[0].text)
    shown = doc.toPlainText()
    for line in haiku.splitlines():
        assert any(row.strip() == line for row in shown.splitlines()), shown


def test_an_over_long_message_keeps_its_start_and_end(native_build: dict) -> None:
    """A paste longer than the context was cut at the front, losing the instruction at its start."""
    from engine.llm.chat_prompt import ChatPrompt

    chat = ChatPrompt(None, "", "", lambda text: text.split())  # type: ignore[return-value]  # one token per word
    body = " ".join(f"w{i}" for i in range(2000))
    fitted = chat.fit([{"role": "user", "content": f"Summarize this text: {body} What is the main point?"}], 600)
    text = " ".join(fitted.tokens)
    assert len(fitted.tokens) <= 600 and fitted.truncated_last and fitted.cut_chars > 0
    assert "Summarize this text:" in text and "What is the main point?" in text
    assert f"{fitted.cut_chars} characters cut" in text


def test_a_model_without_a_template_gets_its_architectures_format_and_a_base_model_warning(native_build: dict) -> None:
    """A GGUF with no chat template was always formatted as ChatML and answered with <|im_end|> bits."""
    from engine.llm.chat_prompt import _apply_builtin, builtin_template, looks_like_base_model

    assert builtin_template("gemma2", lambda _t: False) == "gemma"
    assert builtin_template("llama", lambda t: t == "<|eot_id|>") == "llama3"
    assert builtin_template("llama", lambda _t: False) == "llama2"
    assert builtin_template("some-new-arch", lambda _t: False) == "chatml"
    messages = [{"role": "user", "content": "Hi there"}]
    assert "<start_of_turn>user\nHi there" in _apply_builtin("gemma", messages)
    assert "<|start_header_id|>user<|end_header_id|>" in _apply_builtin("llama3", messages)
    assert _apply_builtin("chatml", messages).endswith("<|im_start|>assistant\n")
    assert looks_like_base_model("Llama 3.2 1B", has_template=False)
    assert not looks_like_base_model("Llama 3.2 1B Instruct", has_template=False)
    assert not looks_like_base_model("gemma-2-2b-it", has_template=False)
    assert not looks_like_base_model("anything", has_template=True)


def test_messages_split_into_prose_and_code_with_its_language() -> None:
    from engine.chats.render import message_segments

    segs = message_segments("Here:\n```python\ndef f(x):\n    return x\n```\nDone.\nBye.")
    assert [(s.kind, s.language) for s in segs] == [("text", ""), ("code", "python"), ("text", "")]
    assert segs[1].text == "def f(x):\n    return x\n"  # exactly the code: what Copy puts on the clipboard
    assert segs[2].text == "Done.  \nBye."  # the hard-break rule holds in the cards too
    streaming = message_segments("```js\nlet a = 1;")
    assert [(s.kind, s.language, s.text) for s in streaming] == [("code", "js", "let a = 1;\n")]


def test_code_is_highlighted_per_language_and_theme() -> None:
    from engine.chats.render import highlight_code

    light = highlight_code("def f():\n    return 1\n", "python", dark=False)
    dark = highlight_code("def f():\n    return 1\n", "python", dark=True)
    assert light.startswith("<pre") and '<span style="color' in light and ">def</span>" in light
    assert light != dark  # each theme has its own colours
    plain = highlight_code("just <text>", "no-such-language", dark=False)
    assert "&lt;text&gt;" in plain  # unknown languages are shown as text, escaped


def test_a_questions_files_show_under_it_and_an_answer_that_filled_the_context_offers_continue() -> None:
    from engine.chats.attachments import Attachment
    from engine.chats.render import message_footer

    files = [Attachment("paper.pdf", "pdf", 9000, "x", pages=3), Attachment("a.py", "code", 1200, "x = 1", "python")]
    assert message_footer({"role": "user", "attachments": files}) == ["Attached: paper.pdf · 3 pages, a.py · 1.2 KB"]
    assert message_footer({"role": "user", "attachments": []}) == []
    assert message_footer({"role": "assistant", "finish": "context_full"}) == [
        "[stopped: the context is full: Continue writes more]"
    ]


def test_an_answer_being_written_says_so_and_is_not_called_interrupted() -> None:
    """Issue 45 item 1: a streaming answer is stored incomplete (so a crash keeps it), which read as
    '[interrupted: Continue or Regenerate]' for its whole stream."""
    from engine.chats.render import message_footer

    streaming = {"role": "assistant", "content": "", "interrupted": True, "engine": "local:SmolLM2 (vanilla)"}
    assert message_footer(streaming, live=True) == ["SmolLM2 · vanilla", "[writing…]"]
    assert message_footer(streaming) == ["SmolLM2 · vanilla", "[interrupted: Continue or Regenerate]"]  # it ended so
