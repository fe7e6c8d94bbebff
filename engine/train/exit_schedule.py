"""The exit schedule from predictor logits on held-out steps: per-layer thresholds calibrated to a
precision, the decode they imply, its cost per token, and which layers pay for their checks."""

from __future__ import annotations

import numpy as np


def calibrate(z: np.ndarray, y: np.ndarray, target: float, min_exits: int = 30, first_layer: int = 0) -> np.ndarray:
    """Per-layer thresholds, in layer order over the steps still running: the lowest threshold
    whose exits on held-out steps keep precision >= target (with one assumed miss, so a layer
    with few exits must be perfect on many). +inf where none qualifies and below first_layer."""
    n, n_layer = z.shape
    running = np.ones(n, bool)
    thr = np.full(n_layer, np.inf, np.float32)
    for layer in range(first_layer, n_layer):
        zs, ys = z[running, layer], y[running, layer]
        order = np.argsort(-zs)
        tp = np.cumsum(ys[order])
        k = np.arange(1, len(order) + 1)
        prec = tp / (k + 1.0)
        ok = np.nonzero((prec >= target) & (k >= min_exits))[0]
        if len(ok):
            cut = ok.max()
            thr[layer] = float(zs[order[cut]]) - 1e-6
            running &= ~(z[:, layer] > thr[layer])
    return thr


def simulate(z: np.ndarray, y: np.ndarray, thr: np.ndarray, schedule: list[int], n_layer: int) -> dict[str, float]:
    n = z.shape[0]
    exit_layer = np.full(n, n_layer)
    correct = np.ones(n, bool)
    running = np.ones(n, bool)
    for layer in schedule:
        hit = running & (z[:, layer] > thr[layer])
        exit_layer[hit] = layer
        correct[hit] = y[hit, layer]
        running &= ~hit
    exits = exit_layer < n_layer
    layers_run = np.where(exits, exit_layer + 1, n_layer)
    return {
        "exit_hist": np.bincount(exit_layer, minlength=n_layer + 1).tolist(),
        "exit_rate": float(exits.mean()),
        "precision": float(correct[exits].mean()) if exits.any() else 1.0,
        "mean_layers": float(layers_run.mean()),
    }


def step_cost(
    z: np.ndarray, y: np.ndarray, thr: np.ndarray, schedule: list[int], n_layer: int, head_cost: float, check_cost: float
) -> float:
    """Expected cost per token in layer units: layers run, the full head when no exit, checks."""
    n = z.shape[0]
    cost = np.zeros(n)
    running = np.ones(n, bool)
    for layer in schedule:
        cost[running] += check_cost
        hit = running & (z[:, layer] > thr[layer])
        cost[hit] += layer + 1
        running &= ~hit
    cost[running] += n_layer + head_cost
    return float(cost.mean())


def choose_schedule(
    z: np.ndarray, y: np.ndarray, thr: np.ndarray, n_layer: int, head_cost: float, check_cost: float
) -> list[int]:
    """Drop layers whose checks cost more than their exits save (greedy backward elimination)."""
    schedule = [layer for layer in range(n_layer) if np.isfinite(thr[layer])]
    best = step_cost(z, y, thr, schedule, n_layer, head_cost, check_cost)
    improved = True
    while improved and schedule:
        improved = False
        for layer in list(schedule):
            trial = [x for x in schedule if x != layer]
            c = step_cost(z, y, thr, trial, n_layer, head_cost, check_cost)
            if c < best - 1e-9:
                best, schedule, improved = c, trial, True
    return schedule


# What checking one layer costs, in layers of the default model on a 2-core AVX2 CPU: the candidates'
# logits at that layer and the one before (the features compare them) and two more graph splits.
# Measured by dropping L23 from the [23, 29] schedule, arms interleaved per prompt: 2.8% of a step,
# ~0.9 of a layer (not the 0.15 the arithmetic alone suggests; the splits cost the barriers and graph work).
CHECK_COST_LAYERS = 0.9

# How many layers an exit may skip. An exit after layer L fills the K/V of layers L+1.. for its token
# from its hidden state at L (exit-graph.cpp): exact for layer L+1, an approximation beyond it that
# every later token attends to. Measured on SmolLM2-135M (24 dev prompts, 128 tokens,
# `specee bench --modes vanilla,specee`), answers identical to vanilla's: exits after the last layer
# 22/24, no early ending; skipping 1 layer (L28, held-out precision 0.9973) 20/24, 2 early endings,
# its exits alone wrong more often than held out; skipping 3 (L26, 0.9976) 6/24, 10 early endings.
MAX_SKIP_LAYERS = 0
