import pytest

from engine import protocol as p


@pytest.mark.parametrize(
    "msg",
    [
        p.Load("/m.gguf", p.Placement(n_ctx=1024, n_threads=2, n_gpu_layers=3), "vanilla"),
        p.Generate("r1", [{"role": "user", "content": "hé ✓"}], p.Sampling(temperature=0.2, stop=["\n\n"])),
        p.Cancel("r1"),
        p.Unload(),
        p.Shutdown(),
        p.Ready(pid=7, native={"build_key": "abc"}),
        p.Loaded(model_path="/m", name="x", n_layer=30),
        p.Token("r1", "piece", 3, 12.5),
        p.Stats("r1", decode_tok_s=100.0),
        p.Done("r1", "stop", "text", 5, 3, [1, 2, 3]),
        p.Error("r1", "model_file", "bad"),
        p.Notice("r1", "context_trimmed", "dropped"),
    ],
)
def test_every_message_round_trips(msg: p.Message) -> None:
    line = p.encode(msg)
    assert "\n" not in line
    assert p.decode(line) == msg


def test_unknown_fields_are_ignored_and_bad_lines_rejected() -> None:
    assert p.decode('{"type": "cancel", "request_id": "a", "from_the_future": 1}') == p.Cancel("a")
    for bad in ["not json", '{"type": "nope"}', "[1,2]", '{"type": "load", "placement": 3}']:
        with pytest.raises(p.ProtocolError):
            p.decode(bad)


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": -1},
        {"temperature": float("nan")},
        {"top_p": 0},
        {"top_p": 1.5},
        {"min_p": 1.0},
        {"top_k": -3},
        {"repeat_penalty": 100},
        {"max_tokens": 0},
        {"seed": -5},
        {"stop": [""]},
    ],
)
def test_absurd_sampling_settings_are_refused_with_a_reason(change: dict) -> None:
    sampling = p.Sampling(**change)
    with pytest.raises(p.SettingsError) as err:
        sampling.validate()
    assert next(iter(change)).split("_")[0] in str(err.value)


def test_defaults_and_greedy_are_valid() -> None:
    p.Sampling().validate()
    p.Sampling.greedy().validate()
    p.Placement().validate()
    with pytest.raises(p.SettingsError):
        p.Placement(n_ctx=10).validate()


def test_placement_defaults_to_the_workers_plan_and_round_trips_in_loaded() -> None:
    assert p.Placement().layout == "auto"
    with pytest.raises(p.SettingsError, match="layout"):
        p.Placement(layout="middle").validate()
    pl = p.Placement(n_ctx=1024, n_gpu_layers=8, layout="first", output_on_gpu=True)
    msg = p.decode(p.encode(p.Loaded(placement=pl, plan="explicit")))
    assert isinstance(msg, p.Loaded) and msg.placement == pl and msg.plan == "explicit"
    # the EAGLE head goes where the target's last layer is
    assert not pl.last_layer_on_gpu(30) and p.Placement(n_gpu_layers=30, layout="first").last_layer_on_gpu(30)
    assert p.Placement(n_gpu_layers=2, layout="last").last_layer_on_gpu(30)
    assert not p.Placement(n_gpu_layers=0, layout="last").last_layer_on_gpu(30)
