"""The EAGLE trainer end to end on a tiny budget, and the lossless `eagle` mode it enables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine import protocol as p
from engine.client import WorkerClient, WorkerError

torch = pytest.importorskip("torch", reason="the trainer needs the `train` extra: pip install -e '.[train]'")

from engine.train.pipeline import train_eagle  # noqa: E402

QUESTIONS = [
    "Explain what a rainbow is in two sentences.",
    "Write a short poem about a lighthouse.",
    "List three uses of a paperclip.",
]


@pytest.fixture(scope="module")
def tiny_head(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A head trained in seconds on a few hundred teacher tokens (useless drafts, valid format)."""
    root = tmp_path_factory.mktemp("tiny-head")
    out = root / "acceleration" / "tiny" / "eagle.gguf"
    train_eagle(model_path, out, n_prompts=4, eval_prompts=2, max_new=24, epochs=1, draft_vocab=512, steps=3, work=root / "work")
    return out


def test_trainer_writes_a_head_and_manifest(tiny_head: Path, model_path: Path) -> None:
    from engine.models.acceleration import check_eagle_head
    from engine.models.gguf_file import inspect_gguf

    info = inspect_gguf(tiny_head)
    assert info.architecture == "eagle3"
    assert info.metadata["eagle3.target_layers"] is not None
    check_eagle_head(tiny_head, model_path)  # bound to this exact model
    manifest = json.loads((tiny_head.parent / "manifest.json").read_text())
    ev = manifest["eagle"]["dev_eval"]
    assert manifest["eagle"]["train_tokens"] > 100 and 0.0 <= ev["top1"] <= ev["top4"] <= 1.0
    assert manifest["eagle"]["train_dtype"] in ("bfloat16", "float32")
    assert not list(tiny_head.parent.glob("*.part"))


@pytest.fixture
def no_shipped_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only weights the test installs itself are visible (here and in worker processes)."""
    monkeypatch.setenv("SPECEE_TEST_SHIPPED_ACCEL_DIR", str(tmp_path / "no-shipped-weights"))


def _install(head: Path, data_dir: Path) -> None:
    dest = data_dir / "acceleration" / "tiny"
    dest.mkdir(parents=True, exist_ok=True)
    for f in head.parent.iterdir():
        shutil.copy(f, dest / f.name)


def _answers(client: WorkerClient, sampling: p.Sampling) -> list[tuple[list[int], dict]]:
    out = []
    for q in QUESTIONS:
        events = list(client.stream([{"role": "user", "content": q}], sampling))
        stats = [e for e in events if isinstance(e, p.Stats)][-1]
        out.append((events[-1].tokens, stats.accel))  # type: ignore[attr-defined]
    return out


def test_eagle_mode_is_lossless_even_with_a_weak_head(
    tiny_head: Path, model_path: Path, isolated_data: Path, no_shipped_weights: None
) -> None:
    _install(tiny_head, isolated_data)
    with WorkerClient() as vanilla, WorkerClient() as eagle:
        vanilla.load(model_path, p.Placement(n_ctx=1024), mode="vanilla")
        # a fixed chain: every step verifies the weak head's 3 drafts (gated, it would draft little)
        assert eagle.load(model_path, p.Placement(n_ctx=1024), mode="eagle", n_draft=3).mode == "eagle"
        greedy = p.Sampling.greedy(48)
        for (v_tokens, _), (e_tokens, accel) in zip(_answers(vanilla, greedy), _answers(eagle, greedy), strict=True):
            assert e_tokens == v_tokens
            assert accel["acceptance_length"] >= 1.0 and accel["drafted"] > 0
        # sampling with a seed is reproducible in eagle mode too, and multi-turn reuse works
        hot = p.Sampling(temperature=0.9, seed=7, max_tokens=24)
        assert _answers(eagle, hot)[0][0] == _answers(eagle, hot)[0][0]
        history = [{"role": "user", "content": QUESTIONS[0]}]
        first = list(eagle.stream(history, greedy))[-1]
        history += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Now in French."}]  # type: ignore[attr-defined]
        v2 = list(vanilla.stream(history, greedy))[-1]
        e2 = list(eagle.stream(history, greedy))[-1]
        assert e2.tokens == v2.tokens  # type: ignore[attr-defined]


def test_a_head_for_another_model_is_refused(
    tiny_head: Path, copied_model: Path, isolated_data: Path, no_shipped_weights: None
) -> None:
    # a different file (one changed byte in its name metadata is enough for another sha256)
    data = bytearray(copied_model.read_bytes())
    idx = data.find(b"Smollm2 135M")
    data[idx] = ord("X")
    copied_model.write_bytes(bytes(data))
    dest = isolated_data / "acceleration" / "other"
    dest.mkdir(parents=True)
    shutil.copy(tiny_head, dest / "eagle.gguf")
    manifest = json.loads((tiny_head.parent / "manifest.json").read_text())
    from engine.models.acceleration import model_sha256

    manifest["target_sha256"] = model_sha256(copied_model)  # the pack claims the other model ...
    (dest / "manifest.json").write_text(json.dumps(manifest))
    with WorkerClient() as client, pytest.raises(WorkerError) as err:
        client.load(copied_model, mode="eagle")  # ... but the head itself names its real target
    assert err.value.kind == "wrong_head" and "trained for another model" in str(err.value)


def test_a_truncated_head_is_refused(tiny_head: Path, model_path: Path, isolated_data: Path, no_shipped_weights: None) -> None:
    dest = isolated_data / "acceleration" / "tiny"
    dest.mkdir(parents=True)
    shutil.copy(tiny_head.parent / "manifest.json", dest / "manifest.json")
    (dest / "eagle.gguf").write_bytes(tiny_head.read_bytes()[: tiny_head.stat().st_size // 2])
    with WorkerClient() as client:
        with pytest.raises(WorkerError) as err:
            client.load(model_path, mode="eagle")
        assert err.value.kind == "bad_head" and "truncated" in str(err.value)


def test_eagle_without_a_head_explains_how_to_get_one(model_path: Path, isolated_data: Path, no_shipped_weights: None) -> None:
    with WorkerClient() as client:
        with pytest.raises(WorkerError) as err:
            client.load(model_path, mode="eagle")
        assert err.value.kind == "no_acceleration" and "specee train eagle" in str(err.value)
        assert client.load(model_path, mode="auto").mode == "vanilla"


def test_auto_measures_in_the_background_and_explains_its_choice(
    tiny_head: Path, model_path: Path, isolated_data: Path, no_shipped_weights: None
) -> None:
    _install(tiny_head, isolated_data)
    question = [{"role": "user", "content": QUESTIONS[0]}]
    with WorkerClient() as client:
        loaded = client.load(model_path, p.Placement(n_ctx=1024), mode="auto")
        # the load and the first answer never wait for the measurement
        assert loaded.mode == "vanilla" and "in the background" in loaded.mode_reason and not loaded.trainable
        assert list(client.stream(question, p.Sampling.greedy(8)))[-1].n_generated == 8  # type: ignore[attr-defined]
        decided = client.wait_for(p.AutoDecided, timeout=300)
        assert isinstance(decided, p.AutoDecided)
        assert decided.mode_reason.startswith("auto: measured here vanilla")
        speeds = decided.measured_tok_s
        assert set(speeds) == {"vanilla", "eagle", "ngram"}  # every mode this model can run here
        fastest = max(speeds, key=lambda m: speeds[m])
        assert decided.mode == (fastest if speeds[fastest] > 1.03 * speeds["vanilla"] else "vanilla")
        again = client.load(model_path, p.Placement(n_ctx=1024), mode="auto")
        assert (again.mode, again.mode_reason) == (decided.mode, decided.mode_reason)  # the cached decision
        done = list(client.stream(question, p.Sampling.greedy(8)))[-1]
        assert done.n_generated == 8  # type: ignore[attr-defined]
        # an explicitly chosen mode gets the same measurements, so its meter shows the ratio to vanilla
        assert client.load(model_path, p.Placement(n_ctx=1024), mode="ngram").measured_tok_s == speeds


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_training_stopped_mid_epoch_resumes_to_the_very_same_head(
    tiny_head: Path, model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str
) -> None:
    """A long run is stopped and restarted many times (issue 25): stopped between two batches of an
    epoch, it resumes from its last checkpoint and ends with the head an unstopped run gives, under
    bf16 autocast (the default where the CPU has bf16) as in fp32."""
    from engine.train import eagle_train as et

    data = tiny_head.parents[2] / "work" / "train-data"
    monkeypatch.setattr(et, "CHECKPOINT_EVERY_S", 0.0)  # a checkpoint after every batch
    kw = {"epochs": 2, "draft_vocab": 512, "max_tokens": 64, "train_dtype": dtype}
    straight = et.train_head(str(model_path), data, tmp_path / "straight", **kw)["head"].state_dict()
    real, calls = et.loss_fn, []

    def stopped_at_the_third_batch(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(et, "loss_fn", stopped_at_the_third_batch)
    with pytest.raises(KeyboardInterrupt):
        et.train_head(str(model_path), data, tmp_path / "stopped", **kw)
    ckpt = torch.load(tmp_path / "stopped" / "checkpoint.pt", weights_only=False)
    assert (ckpt["epoch"], ckpt["batch"]) == (0, 2)  # mid-epoch
    monkeypatch.setattr(et, "loss_fn", real)
    resumed = et.train_head(str(model_path), data, tmp_path / "stopped", **kw)["head"].state_dict()
    assert straight.keys() == resumed.keys()
    for key, value in straight.items():
        assert torch.equal(value, resumed[key]), key


def test_a_checkpoint_from_other_data_is_set_aside_not_resumed(
    tiny_head: Path, model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A job whose teacher data grew since its last training (more prompts answered) trains afresh:
    resuming would carry the old run's epochs, optimizer and best head over to other data."""
    from engine.train import eagle_train as et

    data = tiny_head.parents[2] / "work" / "train-data"
    kw = {"epochs": 1, "draft_vocab": 512, "max_tokens": 64, "train_dtype": "fp32"}
    et.train_head(str(model_path), data, tmp_path / "run", **kw)
    real = et.load_sequences
    monkeypatch.setattr(et, "load_sequences", lambda folder: real(folder)[:-1])
    et.train_head(str(model_path), data, tmp_path / "run", **kw)
    out = capsys.readouterr().out
    assert "training starts over" in out and "resumed from" not in out
    assert (tmp_path / "run" / "stale-checkpoint.pt").is_file()
    monkeypatch.setattr(et, "load_sequences", real)  # the same data again: resumed, not retrained
    et.train_head(str(model_path), data, tmp_path / "run", **kw)
    assert "training starts over" in capsys.readouterr().out
    et.train_head(str(model_path), data, tmp_path / "run", **kw)
    again = capsys.readouterr().out
    assert "resumed from" in again and "starts over" not in again


def test_training_dtype_is_checked_and_auto_follows_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.train import eagle_train as et

    with pytest.raises(ValueError, match="one of auto, bf16, fp32"):
        et.training_dtype("fp16")
    monkeypatch.setattr(et, "native_bf16", lambda: False)
    assert et.training_dtype("auto") == torch.float32
    monkeypatch.setattr(et, "native_bf16", lambda: True)
    assert (et.training_dtype("auto"), et.training_dtype("fp32")) == (torch.bfloat16, torch.float32)


def test_a_requantized_head_keeps_its_metadata_and_its_weights_within_q4_0_rounding(tmp_path: Path) -> None:
    from gguf import GGMLQuantizationType, GGUFReader, quants

    from engine.models.gguf_fields import read_header
    from engine.paths import RESOURCES_DIR
    from engine.train.eagle_export import requantize_head

    src = tmp_path / "q8.gguf"
    shutil.copy(RESOURCES_DIR / "acceleration" / "smollm2-135m-instruct-q4_1" / "eagle.gguf", src)
    q8 = tmp_path / "q8-made.gguf"
    requantize_head(src, q8, GGMLQuantizationType.Q8_0)  # the shipped head is Q4_0: back to Q8_0 first
    out = requantize_head(q8, tmp_path / "q4.gguf", GGMLQuantizationType.Q4_0)
    assert out.stat().st_size < 0.7 * q8.stat().st_size
    a, b = read_header(q8), read_header(out)
    assert a.fields == b.fields
    before, after = GGUFReader(q8).tensors, GGUFReader(out).tensors
    assert [t.name for t in before] == [t.name for t in after]
    for t, u in zip(before, after, strict=True):
        if t.tensor_type == GGMLQuantizationType.Q8_0:
            assert u.tensor_type == GGMLQuantizationType.Q4_0
            x = quants.dequantize(t.data, t.tensor_type)
            y = quants.dequantize(u.data, u.tensor_type)
            # Q4_0: a block of 32 weights on 16 levels of its largest / 8 (the far side clipped at 7 of
            # them), so each weight within one level of where it was
            tol = np.abs(x.reshape(-1, 32)).max(1, keepdims=True) / 8 * 1.01 + 1e-6
            assert np.all(np.abs(y - x).reshape(-1, 32) <= tol)
        else:
            assert u.tensor_type == t.tensor_type and np.array_equal(np.asarray(u.data), np.asarray(t.data))


def test_an_exported_head_imports_to_the_weights_it_runs_with_and_evaluates_on_shared_data(
    tiny_head: Path, model_path: Path, tmp_path: Path
) -> None:
    """Two heads are compared on the same teacher data (issue 25: the new head against today's) even
    when one's training run is gone: its GGUF imports back to the module, exported again bit for bit,
    and evaluates as its run did, up to its stored quantization."""
    from gguf import GGUFReader

    from engine.models.acceleration import model_sha256
    from engine.train.eagle_export import export_head, import_head
    from engine.train.eagle_train import target_tensors
    from engine.train.pipeline import evaluate_heads

    embed = torch.from_numpy(target_tensors(str(model_path))["token_embd.weight"].astype(np.float32))
    head = import_head(tiny_head, embed)
    again = export_head(head, str(model_path), model_sha256(model_path), tmp_path / "again.gguf")
    before, after = GGUFReader(tiny_head).tensors, GGUFReader(again).tensors
    assert [t.name for t in before] == [t.name for t in after]
    for t, u in zip(before, after, strict=True):
        assert t.tensor_type == u.tensor_type and np.array_equal(np.asarray(t.data), np.asarray(u.data)), t.name

    work = tiny_head.parents[2] / "work"  # the training run's own dev data
    got = evaluate_heads(model_path, [tiny_head, again], work, eval_prompts=2, max_new=24)
    trained = json.loads((tiny_head.parent / "manifest.json").read_text())["eagle"]["dev_eval"]
    a, b = got[str(tiny_head)], got[str(again)]
    assert a == b and a["rows"] == trained["rows"]
    assert abs(a["top1"] - trained["top1"]) <= 0.1 and abs(a["top4"] - trained["top4"]) <= 0.1, (a, trained)


def test_train_eagle_command_passes_every_option(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model_path: Path) -> None:
    """The command line reaches the pipeline (a renamed flag once left cmd_train_eagle reading an
    attribute the parser no longer set, found only when a 50-minute job reached that stage)."""
    from engine import cli
    from engine.train import pipeline

    seen: list[tuple] = []
    monkeypatch.setattr(pipeline, "train_eagle", lambda *a: seen.append(a) or {"eagle": {"dev_eval": {"top1": 0.5}}})
    argv = ["train", "eagle", "--model", str(model_path), "--out", str(tmp_path / "h.gguf"), "--dtype", "fp32",
            "--head-ff", "256", "--epochs", "2"]  # fmt: skip
    assert cli.main(argv) == 0
    (args,) = seen
    assert args[-2:] == (256, "fp32") and args[6] == 2
