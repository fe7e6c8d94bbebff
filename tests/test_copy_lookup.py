"""The copy drafter exists twice: native/src/spec/copy-draft.cpp drafts, engine/sequences.py's
CopyLookup replays it offline (engine.bench.copy_ceiling, engine.train.exit_sweep). Both must find
the same match and propose the same tokens for the same history: the context so far, then the
token the step starts with. Checked at every point of real token histories (the default model's
tokens of prose, code and a chat) and on the edge cases of the lookup's bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.sequences import CopyLookup
from tests.conftest import NATIVE_BUILT

pytestmark = pytest.mark.skipif(not NATIVE_BUILT, reason="the native build is not installed in this environment")

REPO = Path(__file__).resolve().parent.parent
MAX_OUT = 16  # the longest draft the worker takes


def _python(history: list[int]) -> tuple[int, int, list[int]]:
    look = CopyLookup(history)
    pos, length = look.longest_match()
    return pos, (length if pos >= 0 else 0), look.ctx[pos + 1 : pos + 1 + MAX_OUT] if pos >= 0 else []


def _native(history: list[int]) -> tuple[int, int, list[int]]:
    from engine.native import copy_lookup

    pos, length, out = copy_lookup(history[:-1], history[-1], MAX_OUT)
    return pos, (length if pos >= 0 else 0), out


def _disagreements(tokens: list[int]) -> list[str]:
    """Every prefix of tokens (2 tokens on) where the two lookups differ."""
    found = []
    for t in range(2, len(tokens) + 1):
        py, cc = _python(tokens[:t]), _native(tokens[:t])
        if py != cc:
            found.append(f"after {t} tokens: python {py}, native {cc}")
    return found


@pytest.fixture(scope="module")
def tokenize(model_path: Path):
    from llama_cpp import Llama

    llm = Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    yield lambda text: llm.tokenize(text.encode(), add_bos=False, special=True)
    llm.close()


CHAT_TURN = "<|im_start|>user\nWhat does {x} do?<|im_end|>\n<|im_start|>assistant\n{x} does what {x} says.<|im_end|>\n"


@pytest.mark.parametrize(
    "source",
    ["docs/acceleration.md", "engine/worker/session.py", "chat"],
)
def test_native_and_python_propose_the_same_tokens_on_real_histories(source: str, tokenize) -> None:
    if source == "chat":
        text = "".join(CHAT_TURN.format(x=x) for x in ["the worker", "the client", "the worker", "auto", "the bench"] * 6)
    else:
        text = (REPO / source).read_text()[:6000]
    tokens = tokenize(text)[:1500]
    assert len(tokens) > 500
    bad = _disagreements(tokens)
    assert not bad, f"{len(bad)} of {len(tokens) - 1} histories differ, first: {bad[:3]}"


EDGE_CASES = {
    "two tokens": [5, 6],
    "one repeated pair": [5, 6, 5, 6],
    "a run of one token": [7] * 12,  # each occurrence ends right before the last: it went on with `last`
    "a run longer than the longest match and than the candidates examined": [7] * 120,
    "a period of three": [1, 2, 3] * 15,
    "a match reaching the start": [4, 5, 6, 9, 4, 5, 6],
    "occurrences that went on differently": [1, 2, 3, 1, 2, 4, 1, 2, 3, 1, 2],
    # 80 earlier occurrences of (1, 2); the longest match is the 64th most recent, the oldest examined
    "a pair seen more often than the candidates examined": [x for i in range(80) for x in (200 + i, 1, 2, 100 + i)] + [216, 1, 2],
    "no earlier occurrence": list(range(40)),
}


@pytest.mark.parametrize("tokens", EDGE_CASES.values(), ids=EDGE_CASES.keys())
def test_native_and_python_agree_on_the_edge_cases(tokens: list[int]) -> None:
    bad = _disagreements(tokens)
    assert not bad, bad[:3]


def test_a_run_proposes_its_own_token() -> None:
    """An occurrence that ends right before the newest token went on with that token: in a run of
    one token the lookup proposes it again (the native drafter skipped it and proposed nothing)."""
    assert _native([7, 7, 7])[::2] == (1, [7])
    assert _python([7, 7, 7])[::2] == (1, [7])
    # the proposal runs on into the newest token: A B A B proposes A B
    assert _native([1, 2, 1, 2])[2] == [1, 2]
