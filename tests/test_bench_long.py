"""`specee bench --long`: long documents read cold, ours beside plain llama-server (issue 46).
The real worker, a real `specee serve` and the real llama-server, on documents of a few dozen tokens."""

import json
from pathlib import Path

import pytest

from engine.bench.long_documents import Documents, context_for, long_lengths
from engine.cli import main as cli
from engine.llm.chat_prompt import ChatPrompt
from engine.llm.load import vocab_only
from engine.models.gguf_file import inspect_gguf


def test_lengths_follow_the_models_context() -> None:
    assert long_lengths(8192) == [1024, 4096, 7168]  # the default model: 1k, 4k and 7k
    assert long_lengths(32768) == long_lengths(131072) == [1024, 4096, 16384]
    assert long_lengths(2048) == [1024]
    assert context_for([1024, 4096, 7168], 8192) == 8192
    assert context_for([1024, 4096, 16384], 32768) == 17408
    assert context_for([64, 96], 8192) == 1280  # tiny documents: a small context, the answer's room kept


def _documents(model_path: Path) -> Documents:
    vocab = vocab_only(model_path)
    chat = ChatPrompt.for_model(vocab, inspect_gguf(model_path).chat_template)
    return Documents(
        chat,
        lambda text: vocab.tokenize(text.encode(), add_bos=False, special=False),
        lambda toks: vocab.detokenize(toks).decode("utf-8", "replace"),
    )


def test_documents_have_the_exact_length_and_never_share_a_start(model_path: Path) -> None:
    docs, again = _documents(model_path), _documents(model_path)
    made = [docs.next(n) for n in (64, 1024, 1024, 4096)]
    assert [len(tokens) for _, tokens in made] == [64, 1024, 1024, 4096]
    assert [docs.prompt_tokens(messages) for messages, _ in made] == [tokens for _, tokens in made]
    assert [again.next(n) for n in (64, 1024, 1024, 4096)] == made  # the same documents on every run
    bodies = [messages[0]["content"] for messages, _ in made]
    assert len({b[:200] for b in bodies}) == len(bodies)
    assert all("Summarise the document above" in b for b in bodies)


def test_long_bench_reads_the_same_tokens_on_every_side(
    model_path: Path, llama_server_binary: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "long.json"
    argv = ["bench", "--long", "--model", str(model_path), "--long-lengths", "64,96", "--modes", "vanilla,serve:parallel=1,peer",
            "--peer-server", str(llama_server_binary), "--warmup", "0", "--json", str(out)]  # fmt: skip
    assert cli(argv) == 0
    report = json.loads(out.read_text())
    assert report["lengths"] == [64, 96] and report["peer"] == "peer" and report["n_ctx"] == 1280
    assert set(report["sides"]) == {"vanilla", "serve:parallel=1", "peer"}
    assert "llama-server -t" in report["sides"]["peer"] and "--parallel 1" in report["sides"]["serve:parallel=1"]
    for row in report["rows"]:
        sides = row["sides"]
        assert set(sides) == {"vanilla", "serve:parallel=1", "peer"}
        for got in sides.values():
            # cold: every side read the whole document, nothing of it from a cache
            assert got["n_prompt"] == got["n_read"] == row["length"], (row["length"], got)
            assert got["ttft_ms"] > 0 and got["prefill_tok_s"] > 0
        assert sides["peer"]["ttft_vs_peer"] == 1.0
        assert sides["vanilla"]["ttft_vs_peer"] == round(sides["vanilla"]["ttft_ms"] / sides["peer"]["ttft_ms"], 3)
    assert len(report["samples"]) == 2 * 3
    text = capsys.readouterr().out
    assert "TTFT s" in text and "prompt tok/s" in text and "vs peer" in text
    assert f"{report['rows'][0]['sides']['peer']['ttft_ms'] / 1000:.2f}" in text


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--long-lengths", "1k"], "--long-lengths takes token counts"),
        (["--long-lengths", "8"], "32 tokens at least"),
    ],
)
def test_bad_long_flags_say_what_to_give(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["bench", "--long", *argv]) == 2
    assert said in capsys.readouterr().err


def test_unknown_sides_are_refused_before_anything_runs(model_path: Path) -> None:
    with pytest.raises(SystemExit, match="unknown side"):
        cli(["bench", "--long", "--model", str(model_path), "--long-lengths", "64", "--modes", "eagle"])
    with pytest.raises(SystemExit, match="unknown side option"):
        cli(["bench", "--long", "--model", str(model_path), "--long-lengths", "64", "--modes", "vanilla:parallel=2"])


def test_a_sides_options_and_the_prompt_batch_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.bench.long_prompts import parse_options
    from engine.llm.load import prompt_batch

    assert parse_options("serve:parallel=1+threads=2+batch=2048") == ("serve", {"parallel": "1", "threads": "2", "batch": "2048"})
    assert parse_options("vanilla:batch=2048") == ("vanilla", {"batch": "2048"})
    assert parse_options("peer:-ub 2048 -b 2048") == ("peer", {"flags": "-ub 2048 -b 2048"})
    assert prompt_batch(8192) == 512 and prompt_batch(256) == 256  # llama.cpp's ubatch, never past the context
    monkeypatch.setenv("SPECEE_TEST_PROMPT_BATCH", "2048")
    assert prompt_batch(8192) == 2048 and prompt_batch(1024) == 1024
    monkeypatch.setenv("SPECEE_TEST_PROMPT_BATCH", "lots")
    assert prompt_batch(8192) == 512


def test_every_document_in_a_long_run_is_cut_exactly(model_path: Path) -> None:
    """The third 1,024-token document in a row could not be cut (every cut of its text straddled the
    length: 1,025 tokens, then 1,023) and the whole run stopped before it began."""
    docs = _documents(model_path)
    lengths = [1024, 1024, 1024, *[64, 96, 100, 128, 256] * 4]
    assert [len(docs.next(n)[1]) for n in lengths] == lengths
