from pathlib import Path

import pytest

from engine.models.gguf_file import ModelFileError, inspect_gguf


def test_default_model_header(model_path: Path) -> None:
    info = inspect_gguf(model_path)
    assert info.architecture == "llama"
    assert (info.n_layer, info.n_embd) == (30, 576)
    assert info.data_end == info.file_size == model_path.stat().st_size
    assert info.chat_template and "<|im_start|>" in info.chat_template


def test_truncated_file_is_named_truncated(truncated_model: Path) -> None:
    with pytest.raises(ModelFileError) as err:
        inspect_gguf(truncated_model)
    assert err.value.kind == "truncated"
    assert "download it again" in str(err.value)


def test_file_cut_inside_the_header(model_path: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model_path.read_bytes()[:5000])
    with pytest.raises(ModelFileError) as err:
        inspect_gguf(cut)
    assert err.value.kind == "truncated"


def test_non_gguf_and_missing(not_a_model: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelFileError) as err:
        inspect_gguf(not_a_model)
    assert err.value.kind == "not_gguf"
    with pytest.raises(ModelFileError) as err:
        inspect_gguf(tmp_path / "nowhere.gguf")
    assert err.value.kind == "missing"
