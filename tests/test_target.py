"""engine/llm/target.py: the target model and context through llama.h. Its parameters are those
llama-cpp-python's Llama(...) passed (answers stay token-identical), with the settings Llama had
no argument for set directly; its vocabulary calls answer as Llama's did."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest
from llama_cpp import llama_cpp as C

from engine.llm.target import Target


def _fields(params: Any) -> dict[str, Any]:
    """A params struct's plain fields (pointers and callbacks left out)."""
    out = {}
    for name, kind in params._fields_:
        value = getattr(params, name)
        if isinstance(value, int | float | bool) and not issubclass(kind, ctypes._Pointer | ctypes.c_void_p):
            out[name] = value
    return out


def _llama_params(monkeypatch: pytest.MonkeyPatch, model_path: Path, **kwargs: Any) -> tuple[dict, dict]:
    """The model and context params llama-cpp-python's Llama passes to llama.cpp for kwargs."""
    from llama_cpp import Llama

    seen: dict[str, dict] = {}
    load, init = C.llama_model_load_from_file, C.llama_init_from_model

    def load_spy(path: bytes, params: Any) -> Any:
        seen["model"] = _fields(params)
        return load(path, params)

    def init_spy(model: Any, params: Any) -> Any:
        seen["ctx"] = _fields(params)
        return init(model, params)

    monkeypatch.setattr(C, "llama_model_load_from_file", load_spy)
    monkeypatch.setattr(C, "llama_init_from_model", init_spy)
    Llama(model_path=str(model_path), verbose=False, **kwargs).close()
    monkeypatch.undo()
    return seen["model"], seen["ctx"]


def _target_params(monkeypatch: pytest.MonkeyPatch, model_path: Path, **kwargs: Any) -> tuple[dict, dict]:
    seen: dict[str, dict] = {}
    load, init = C.llama_model_load_from_file, C.llama_init_from_model
    monkeypatch.setattr(C, "llama_model_load_from_file", lambda p, mp: (seen.setdefault("model", _fields(mp)), load(p, mp))[1])
    monkeypatch.setattr(C, "llama_init_from_model", lambda m, cp: (seen.setdefault("ctx", _fields(cp)), init(m, cp))[1])
    Target.load(model_path, **kwargs).close()
    monkeypatch.undo()
    return seen["model"], seen["ctx"]


def test_the_target_loads_with_the_params_llamas_llama_passed(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = dict(n_ctx=640, n_batch=512, n_threads=2, n_threads_batch=2, n_gpu_layers=0, flash_attn=True)
    theirs_model, theirs_ctx = _llama_params(monkeypatch, model_path, **args)
    ours_model, ours_ctx = _target_params(monkeypatch, model_path, **args)
    assert ours_model == theirs_model
    assert ours_ctx == theirs_ctx
    # the settings Llama had no argument for (engine/llm/load.py patched llama.cpp's defaults for them)
    ours_model, ours_ctx = _target_params(monkeypatch, model_path, **args, repack=False, n_seq_max=4)
    assert ours_model == {**theirs_model, "use_extra_bufts": False}
    assert ours_ctx == {**theirs_ctx, "n_seq_max": 4, "kv_unified": False}


def test_the_vocabulary_answers_as_llamas_did(model_path: Path) -> None:
    from llama_cpp import Llama

    theirs = Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    ours = Target.vocab_only(model_path)
    try:
        for text, bos, special in [(b"Hello, world!", True, False), (b"<|im_start|>user\nhi<|im_end|>", False, True),
                                   ("naïve café 日本".encode(), True, False), (b"", True, False)]:  # fmt: skip
            toks = ours.tokenize(text, add_bos=bos, special=special)
            assert toks == theirs.tokenize(text, add_bos=bos, special=special)
            assert ours.detokenize(toks) == theirs.detokenize(toks)
            assert ours.detokenize(toks, special=True) == theirs.detokenize(toks, special=True)
        assert ours.n_vocab() == theirs.n_vocab()
        assert (ours.token_bos(), ours.token_eos()) == (theirs.token_bos(), theirs.token_eos())
        assert ours.meta("general.architecture") == "llama"
        assert ours.meta("no.such.key") == ""
    finally:
        ours.close()
        theirs.close()
