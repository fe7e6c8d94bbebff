import ast
import json
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from engine import protocol as p
from engine.client import WorkerClient, WorkerError

ROOT = Path(__file__).resolve().parents[1]


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
        p.Generate("r2", prompt="x", grammar='root ::= "a"', logprobs=True, top_logprobs=3),
        p.Token("r2", "é", 1, 3.0, [p.TokenLogprob(7, [195, 169], -0.25, [p.TopLogprob(7, [195, 169], -0.25)])]),
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


def test_generate_checks_its_grammar_and_logprobs_fields() -> None:
    p.Generate(logprobs=True, top_logprobs=p.TOP_LOGPROBS_MAX).validate()
    assert not p.Generate().needs_vanilla and p.Generate(grammar="root ::= x").needs_vanilla
    assert p.Generate(logprobs=True).needs_vanilla
    for bad in ({"top_logprobs": 21}, {"top_logprobs": -1}, {"logprobs": 1}, {"grammar": 3}):
        with pytest.raises(p.SettingsError):
            p.Generate(**bad).validate()
    # nested logprobs come back as dataclasses
    token = p.decode(p.encode(p.Token("r", "a", 0, 0.0, [p.TokenLogprob(1, [97], -1.0, [p.TopLogprob(1, [97], -1.0)])])))
    assert isinstance(token, p.Token) and isinstance(token.logprobs[0].top[0], p.TopLogprob)


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
        {"max_tokens": -1},
        {"max_tokens": 2_000_000},
        {"max_tokens": 1.5},
        {"seed": -5},
        {"stop": [""]},
    ],
)
def test_absurd_sampling_settings_are_refused_with_a_reason(change: dict) -> None:
    sampling = p.Sampling(**change)
    with pytest.raises(p.SettingsError) as err:
        sampling.validate()
    assert next(iter(change)).split("_")[0] in str(err.value)


def test_max_tokens_zero_means_the_contexts_room_and_keeps_the_answer_reserve() -> None:
    """No silent length cap (issue 23, item 15): 0 lets the answer run until the context is full;
    fitting the prompt still keeps ANSWER_RESERVE tokens free for it (never over half the context)."""
    p.Sampling(max_tokens=0).validate()
    assert p.prompt_budget(4096, 0) == 4096 - p.ANSWER_RESERVE
    assert p.prompt_budget(512, 0) == 256
    assert p.prompt_budget(4096, 100) == 3996


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


# -- typed values -------------------------------------------------------------------------------

ENUM_FIELDS = [  # (message with the value at `path`, path, its enum)
    (lambda v: p.Load("/m.gguf", mode=v), ("mode",), p.Mode),
    (lambda v: p.Load("/m.gguf", p.Placement(layout=v)), ("placement", "layout"), p.Layout),
    (lambda v: p.Loaded(mode=v), ("mode",), p.Mode),
    (lambda v: p.AutoDecided(mode=v), ("mode",), p.Mode),
    (lambda v: p.Stats("r1", mode=v), ("mode",), p.Mode),
    (lambda v: p.Done("r1", v), ("finish_reason",), p.FinishReason),
    (lambda v: p.Error("r1", v, "why"), ("kind",), p.ErrorKind),
]


def _at(obj: object, path: tuple[str, ...]) -> object:
    for name in path:
        obj = getattr(obj, name) if not isinstance(obj, dict) else obj[name]
    return obj


@pytest.mark.parametrize(("make", "path", "enum"), ENUM_FIELDS, ids=lambda x: getattr(x, "__name__", None))
def test_every_enum_value_travels_as_its_plain_string_and_comes_back_a_member(make, path, enum) -> None:
    for member in enum:
        line = p.encode(make(member.value))  # a plain string given by a caller becomes the member too
        assert _at(json.loads(line), path) == member.value
        got = _at(p.decode(line), path)
        assert got is member and isinstance(got, enum) and got == member.value  # type: ignore[attr-defined]


@pytest.mark.parametrize(("make", "path", "enum"), ENUM_FIELDS, ids=lambda x: getattr(x, "__name__", None))
def test_a_value_outside_its_enum_is_refused_naming_the_field_and_the_choices(make, path, enum) -> None:
    data = json.loads(p.encode(make(next(iter(enum)).value)))
    holder = data
    for name in path[:-1]:
        holder = holder[name]
    holder[path[-1]] = "warp-speed"
    with pytest.raises(p.ProtocolError) as err:
        p.decode(json.dumps(data))
    text = str(err.value)
    assert ".".join(path) in text and "'warp-speed'" in text and enum.__name__ in text
    assert all(m.value in text for m in enum)


def test_acceleration_flags_round_trip_and_bad_modes_in_them_are_refused() -> None:
    acc = p.Acceleration(True, True, False, True, "small.gguf", ["vanilla", "ngram", "eagle"])  # type: ignore[list-item]
    assert acc.modes == [p.Mode.VANILLA, p.Mode.NGRAM, p.Mode.EAGLE]
    msg = p.decode(p.encode(p.Loaded(trainable=False, acceleration=acc)))
    assert isinstance(msg, p.Loaded) and msg.acceleration == acc and all(isinstance(m, p.Mode) for m in msg.acceleration.modes)
    with pytest.raises(p.ProtocolError, match=r"acceleration\.modes\[1\]"):
        p.decode(p.encode(p.Loaded(acceleration=p.Acceleration(modes=["vanilla", "turbo"]))))  # type: ignore[list-item]


def test_the_error_kinds_include_the_remote_engines_and_every_kind_has_a_title_for_people() -> None:
    from engine.chats.session import ERROR_TITLES

    for kind in ("unreachable", "unauthorized", "timeout", "bad_response", "model_file", "worker_died", "internal"):
        assert p.ErrorKind(kind) == kind
    assert set(ERROR_TITLES) == set(p.ErrorKind)
    assert ERROR_TITLES["unauthorized"] == "The server refused the API key"


def test_remote_is_a_mode_the_engine_reports_but_no_local_load_or_setting_offers() -> None:
    assert p.Mode.REMOTE == "remote" and "remote" not in p.MODES
    assert p.MODES == ("auto", "vanilla", "eagle", "specee", "ngram", "draft", "combined")
    assert p.decode(p.encode(p.Stats("r1", mode="remote"))).mode is p.Mode.REMOTE  # type: ignore[attr-defined]


# -- Load.validate --------------------------------------------------------------------------------


def test_a_sane_load_is_valid() -> None:
    p.Load("/m.gguf").validate()
    p.Load("/m.gguf", p.Placement(n_ctx=p.N_CTX_MAX, n_threads=p.N_THREADS_MAX), "ngram", n_draft=p.N_DRAFT_MAX,
           drafter="ngram-mod").validate()  # fmt: skip
    for mode in p.MODES:
        p.Load("/m.gguf", mode=mode).validate()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"model_path": ""}, "no model file"),
        ({"mode": "remote"}, "remote engines"),
        ({"mode": "turbo"}, "unknown acceleration mode 'turbo'; choose one of auto, vanilla"),
        ({"n_draft": 17}, "draft chain length must be 0"),
        ({"n_draft": -1}, "draft chain length"),
        ({"n_draft": True}, "draft chain length"),
        ({"exit_check_every": -2}, "exit_check_every"),
        ({"exits": "yes"}, "exits must be true or false"),
        ({"n_parallel": 0}, "parallel requests must be 1 to 16, got 0"),
        ({"n_parallel": 17}, "parallel requests must be 1 to 16"),
        ({"drafter": "Ngram Simple"}, "drafter"),
        ({"placement": p.Placement(n_ctx=100)}, "context length must be 256..1048576"),
        ({"placement": p.Placement(n_threads=-1)}, "threads"),
        ({"placement": p.Placement(layout="middle")}, "layout"),
    ],
)
def test_a_load_outside_the_limits_is_refused_with_a_reason(change: dict, words: str) -> None:
    with pytest.raises(p.SettingsError) as err:
        replace(p.Load("/m.gguf"), **change).validate()
    assert words in str(err.value)


# -- versions -------------------------------------------------------------------------------------


def test_a_load_or_ready_of_another_protocol_version_is_refused_before_anything_else() -> None:
    assert p.PROTOCOL_VERSION == 7 and p.Load().protocol_version == 7
    old_load = json.loads(p.encode(p.Load("/m.gguf", mode="vanilla")))
    del old_load["protocol_version"]  # version 1 sent none
    old_load["mode"] = "whatever-v1-had"
    with pytest.raises(p.VersionMismatch) as err:
        p.decode(json.dumps(old_load))
    assert "the app speaks protocol version 1" in str(err.value) and "speaks 7" in str(err.value)
    with pytest.raises(p.VersionMismatch, match="the engine speaks protocol version 5"):
        p.decode(p.encode(p.Ready(pid=1, protocol_version=5)))  # the version before Load.n_parallel


OLD_WORKER = 'import sys; print(\'{"type": "ready", "pid": 1, "protocol_version": 1}\', flush=True); sys.stdin.read()'


def test_the_client_refuses_and_stops_an_engine_of_another_protocol_version() -> None:
    """An engine left from another install (here: a process that answers like version 1 did)."""
    client = WorkerClient(command=[sys.executable, "-c", OLD_WORKER])
    with pytest.raises(WorkerError) as err:
        client.start(timeout=30)
    assert err.value.kind == p.ErrorKind.VERSION_MISMATCH and "different installs" in str(err.value)
    assert client.ready is None
    deadline = time.monotonic() + 10
    while client.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not client.alive
    client.stop()


def test_a_client_with_an_event_handler_gets_the_refusal_as_an_error_event_not_worker_died() -> None:
    events: list[p.Message] = []
    client = WorkerClient(on_event=events.append, command=[sys.executable, "-c", OLD_WORKER])
    before = set(threading.enumerate())
    client.start()
    (reader,) = [t for t in threading.enumerate() if t not in before and t.name == "worker-events"]
    # the reader kills the refused engine and ends at its exit: a worker_died would come before that
    reader.join(30)
    assert not reader.is_alive()
    client.stop()
    assert [type(e) for e in events] == [p.Error] and events[0].kind == p.ErrorKind.VERSION_MISMATCH  # type: ignore[attr-defined]


# -- one list of modes, one set of limits ---------------------------------------------------------


def test_the_modes_and_limits_exist_once_in_the_protocol() -> None:
    import engine.cli
    import engine.settings
    from engine.settings import AppSettings

    assert engine.settings.MODES is p.MODES
    parser = engine.cli.build_parser()
    subs = next(a for a in parser._actions if a.choices and "chat" in a.choices).choices
    assert list(subs["chat"]._option_string_actions["--mode"].choices) == list(p.MODES)  # type: ignore[index]
    assert list(subs["bench"]._option_string_actions["--layout"].choices) == list(p.LAYOUTS)  # type: ignore[index]
    # the settings file accepts exactly what a Load accepts
    AppSettings(n_ctx=p.N_CTX_MAX, n_threads=p.N_THREADS_MAX).validate()
    for bad in (AppSettings(n_ctx=p.N_CTX_MAX + 1), AppSettings(n_threads=p.N_THREADS_MAX + 1), AppSettings(mode="remote")):
        with pytest.raises(p.SettingsError):
            bad.validate()
    # no other module spells out the list of modes
    mode_names = set(p.MODES)
    for path in [*ROOT.glob("engine/**/*.py"), *ROOT.glob("app/**/*.py")]:
        if path.parent == ROOT / "engine" / "protocol":  # the modes' one home
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                names = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                assert len(names & mode_names) < 4, f"{path.relative_to(ROOT)}:{node.lineno} lists the modes again"
