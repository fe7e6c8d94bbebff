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


def _with_dim(model_path: Path, out: Path, tensor: bytes, dim_index: int, value: int) -> Path:
    """A copy whose header gives `tensor` another size along one dimension."""
    import struct

    data = bytearray(model_path.read_bytes())
    at = data.index(struct.pack("<Q", len(tensor)) + tensor) + 8 + len(tensor)
    n_dims = struct.unpack_from("<I", data, at)[0]
    assert dim_index < n_dims
    struct.pack_into("<Q", data, at + 4 + 8 * dim_index, value)
    out.write_bytes(bytes(data))
    return out


def test_garbled_tensor_dimensions_are_called_damage_not_a_huge_download(model_path: Path, tmp_path: Path) -> None:
    """A garbled dimension used to read "is truncated: ... 361550014853497114579813561008128.0 MB needed"."""
    huge = _with_dim(model_path, tmp_path / "huge.gguf", b"blk.3.ffn_up.weight", 1, 2**62)
    with pytest.raises(ModelFileError) as err:
        inspect_gguf(huge)
    assert err.value.kind != "truncated" and "larger than any model file" in str(err.value) and "MB needed" not in str(err.value)
    wrong = _with_dim(model_path, tmp_path / "wrong.gguf", b"blk.0.attn_norm.weight", 0, 512)
    with pytest.raises(ModelFileError, match="embedding length") as err:
        inspect_gguf(wrong)
    assert err.value.kind == "corrupt"


def test_garbage_weights_under_a_sound_header_are_refused(model_path: Path, tmp_path: Path) -> None:
    """Such a file was accepted as "ok" and chatted "…………"."""
    import numpy as np

    from engine.models.weights_check import check_weights

    check_weights(inspect_gguf(model_path))  # the real model passes
    info = inspect_gguf(model_path)
    data = bytearray(model_path.read_bytes())
    rng = np.random.default_rng(1)
    data[info.data_offset :] = rng.integers(0, 256, size=len(data) - info.data_offset, dtype=np.uint8).tobytes()
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="invalid weights") as err:
        check_weights(inspect_gguf(bad))
    assert err.value.kind == "garbage"
