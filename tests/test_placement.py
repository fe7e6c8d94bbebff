"""The placement planner and the first-layers layout: plans never exceed free memory, prefer
first-layers-on-GPU when exits are frequent, and the plan for this machine (GPU or not) is what the
worker loads unless the caller overrides it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import protocol as p
from engine.client import WorkerClient
from engine.models.memory import COMPUTE_BUFFER, GB, RAM_HEADROOM, VRAM_HEADROOM_FRAC, fits
from engine.placement.auto import placement_for
from engine.placement.machine import ALLOW_SOFTWARE_GPU_ENV, devices, this_machine
from engine.placement.model_facts import MODEL_CLASSES, facts_from_gguf
from engine.placement.planner import Exits, load_profiles, plan
from tests.conftest import HAS_GPU, NO_GPU, ON_LAVAPIPE, PLANNER_GPU


def _frequent_exits(n_layer: int) -> Exits:
    """Half the tokens exit at 55% depth: the case SpecEE's layout is for."""
    p_ = [0.0] * n_layer
    p_[int(n_layer * 0.55)] = 0.5
    return Exits(p_, draft_bytes=50_000_000)


@pytest.mark.parametrize("profile", load_profiles(), ids=lambda pr: pr.name)
def test_plans_never_exceed_free_memory(profile, model_path: Path) -> None:
    models = [facts_from_gguf(model_path)] + [make() for make in MODEL_CLASSES.values()]
    for m in models:
        for exits in (None, _frequent_exits(m.n_layer)):
            pl = plan(m, profile, exits)
            if not pl.fits:
                assert "does not fit" in pl.explanation
                continue
            ram = pl.cpu_bytes + COMPUTE_BUFFER + (pl.gpu_bytes if profile.gpu and profile.gpu.unified else 0)
            assert ram <= profile.ram_free_gb * GB - RAM_HEADROOM, (m.name, pl.as_dict())
            if profile.gpu:
                assert pl.gpu_bytes + COMPUTE_BUFFER <= profile.gpu.vram_free_gb * GB * (1 - VRAM_HEADROOM_FRAC) + 1
            else:
                assert pl.n_gpu_layers == 0 and pl.layout == "cpu"
            assert pl.predicted_tok_s > 0 and str(round(pl.predicted_tok_s)) in pl.explanation


def test_the_badge_and_the_planner_ask_one_fits() -> None:
    """The model manager's "fits" badge (a file's size) and the planner (layers, KV cache, devices)
    share engine.models.memory.fits: a model the planner places fits by the badge's rule at its
    context, and one that fits nowhere is refused by both."""
    assert fits(100 << 20, 8 << 30) and not fits(7 << 30, 8 << 30) and fits(7 << 30, 8 << 30, 4 << 30)
    for profile in load_profiles():
        vram = profile.gpu.vram_free_gb * GB if profile.gpu else 0
        for make in MODEL_CLASSES.values():
            m = make()
            pl = plan(m, profile, None, n_ctx=4096, ctx_auto=False)
            whole = fits(m.weights_bytes, profile.ram_free_gb * GB, vram, m.kv_bytes(4096, m.n_layer))
            assert whole or not pl.fits, (profile.name, m.name)
    m = MODEL_CLASSES["8B (Llama 3.1 8B, Q4_K_M)"]()
    tiny = next(pr for pr in load_profiles() if not pr.gpu)
    tiny.ram_free_gb = m.weights_bytes / GB  # the weights alone: no room for the system
    assert not plan(m, tiny).fits and not fits(m.weights_bytes, tiny.ram_free_gb * GB)


def test_frequent_exits_put_the_first_layers_on_the_gpu() -> None:
    profile = next(pr for pr in load_profiles() if "3050" in pr.name)
    m = MODEL_CLASSES["8B (Llama 3.1 8B, Q4_K_M)"]()
    with_exits = plan(m, profile, _frequent_exits(m.n_layer))
    assert 0 < with_exits.n_gpu_layers < m.n_layer  # a real split
    assert with_exits.layout == "first" and with_exits.mode == "specee"
    assert with_exits.alternatives["first-layers/specee"] > with_exits.alternatives["last-layers/specee"]
    assert "SpecEE expected to skip" in with_exits.explanation
    assert plan(m, profile, None).mode == "vanilla"


def test_context_shrinks_before_layers_leave_the_gpu_only_when_auto() -> None:
    profile = next(pr for pr in load_profiles() if "M1" in pr.name)
    m = MODEL_CLASSES["3B (Llama 3.2 3B, Q4_K_M)"]()
    auto = plan(m, profile, None, n_ctx=131072, ctx_auto=True)
    assert auto.fits and auto.n_ctx < 131072 and "context shrunk" in auto.explanation
    assert not plan(m, profile, None, n_ctx=131072, ctx_auto=False).fits


def test_detection_here_is_stable_and_matches_ggml(native_build: dict) -> None:
    devs = devices()
    assert devs and all(d["type"] in ("cpu", "gpu", "igpu", "accel") for d in devs)
    assert any(d["type"] == "cpu" for d in devs)
    a, b = this_machine(), this_machine()
    assert (a.name, a.physical_cores, a.ram_gb, a.gpu) == (b.name, b.physical_cores, b.ram_gb, b.gpu)
    assert (a.gpu is not None) == PLANNER_GPU


def test_the_plan_here_is_what_the_worker_loads_by_default(model_path: Path) -> None:
    """One placement for app, CLI, bench and tests: the worker plans it ("auto") and says so; a
    vanilla load is planned without SpecEE's exits (the plan never picks the mode)."""
    want, pl = placement_for(model_path, 2048, 0, may_exit=False)
    with WorkerClient() as client:
        loaded = client.load(model_path, p.Placement(n_ctx=2048), mode="vanilla")
        assert (loaded.placement.n_gpu_layers, loaded.placement.layout) == (want.n_gpu_layers, want.layout)
        assert loaded.plan == pl.explanation and loaded.n_threads == pl.n_threads and loaded.n_ctx == 2048
        if not PLANNER_GPU:
            assert loaded.placement.n_gpu_layers == 0 and "layers on the CPU" in loaded.plan
        done = list(client.stream([{"role": "user", "content": "Hi"}], p.Sampling.greedy(4)))[-1]
        assert done.n_generated > 0  # type: ignore[attr-defined]
        # an explicit placement overrides the plan
        override = p.Placement(n_ctx=1024, n_gpu_layers=0, layout="first")
        loaded = client.load(model_path, override, mode="vanilla")
        assert loaded.placement == override and loaded.plan.startswith("explicit placement")


@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
def test_on_a_gpu_the_plan_offloads_and_the_head_follows_the_last_layer(model_path: Path, monkeypatch) -> None:
    if ON_LAVAPIPE:  # the planner takes lavapipe only when told to (here and in the worker started below)
        monkeypatch.setenv(ALLOW_SOFTWARE_GPU_ENV, "1")
    want, _pl = placement_for(model_path, 2048, 0, may_exit=False)  # eagle: no exits
    assert want.n_gpu_layers != 0, "the default model fits on any GPU"
    assert p.Placement(n_gpu_layers=4, layout="first").last_layer_on_gpu(30) is False
    assert p.Placement(n_gpu_layers=4, layout="last").last_layer_on_gpu(30) is True
    with WorkerClient() as client:
        loaded = client.load(model_path, p.Placement(n_ctx=2048), mode="eagle")
        assert loaded.placement.n_gpu_layers == want.n_gpu_layers and loaded.mode == "eagle"


def test_this_machines_bandwidth_is_measured_natively_and_cached(native_build: dict) -> None:
    """Decode reads every weight once per token from every thread: the planner's CPU speed is a
    multi-threaded native read benchmark (numpy's single-threaded sum saw half of it here)."""
    from engine import native
    from engine.placement.machine import measure_cpu_bandwidth

    gbs = native.lib().specee_measure_read_bandwidth(2, 64 << 20)
    assert 0.5 < gbs < 2000
    hw = this_machine(measure=True)
    assert hw.cpu_bw_measured and hw.cpu_bw_gbs == measure_cpu_bandwidth() > 0.5
    assert this_machine().cpu_bw_measured  # later loads read the cached figure


def test_a_first_start_without_a_gpu_does_not_wait_for_the_bandwidth_benchmark(
    native_build: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmark reads 1 GB five times (~1-2.5 s here, most of a first start's time to its first answer,
    issue 23 item 18); with no GPU to split with, the plan is all-CPU whatever it finds."""
    from engine.placement import machine

    monkeypatch.setenv("SPECEE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(machine, "usable_gpus", lambda: ([], []))
    monkeypatch.setattr(machine, "measure_cpu_bandwidth", lambda: pytest.fail("measured on a machine without a GPU"))
    hw = machine.this_machine()
    assert not hw.cpu_bw_measured and hw.cpu_bw_gbs == machine.DEFAULT_CPU_BW_GBS


def test_doctor_plan_prints_an_explained_plan_for_every_profile(capsys, model_path: Path) -> None:
    from engine.cli import main

    assert main(["doctor", "--plan", str(model_path), "--profile", "all", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    names = {pl["profile"] for pl in plans}
    assert len(names) == len(load_profiles()) + 1  # + this machine
    assert all(pl["explanation"] for pl in plans)
    assert main(["doctor", "--plan", str(model_path)]) == 0
    assert ("layers (" if PLANNER_GPU else "layers on the CPU") in capsys.readouterr().out  # "N of M layers (first) on <GPU>"


def test_the_planners_sizes_agree_with_llama_cpps_dry_run(model_path: Path) -> None:
    """Model bytes and KV come from GGUF metadata in the planner; llama.cpp's own no-alloc
    measurement (what --fit uses) must agree, so plans are right for real."""
    from engine.placement.machine import measure_memory
    from engine.placement.planner import COMPUTE_BUFFER

    facts = facts_from_gguf(model_path)
    small, big = measure_memory(model_path, 1024), measure_memory(model_path, 4096)
    assert abs(small["host"]["model"] - facts.weights_bytes) / facts.weights_bytes < 0.2
    kv_step = big["host"]["context"] - small["host"]["context"]
    assert abs(kv_step - facts.kv_bytes(3072, facts.n_layer)) / kv_step < 0.05
    assert 0 < big["host"]["compute"] <= COMPUTE_BUFFER
    assert (big["device"]["model"], big["device"]["context"]) == (0, 0)  # no layer offloaded
    if HAS_GPU:
        gpu = measure_memory(model_path, 4096, n_gpu_layers=-1)
        assert abs(gpu["device"]["model"] - facts.weights_bytes) / facts.weights_bytes < 0.25
    else:
        assert big["device"]["compute"] == 0
