"""The placement plan: which layers go on the GPU, which mode to run, and why.

Decode is memory-bound, so a layer costs its bytes over the bandwidth of the device holding it.
With early exit, a token that exits after layer L never touches the layers above L: putting the
FIRST layers on the GPU (SpecEE's layout) makes the layers that exits skip the slow CPU ones,
while upstream's last-layers layout makes exits skip the fast GPU ones. The planner compares both
layouts, with and without exits, within the memory each device has free (minus headroom), and
returns the fastest with a one-paragraph explanation.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from engine.models.memory import COMPUTE_BUFFER, GB, RAM_HEADROOM, fits, ram_room, vram_room
from engine.paths import RESOURCES_DIR
from engine.placement.model_facts import ModelFacts

PROFILES = RESOURCES_DIR / "hardware_profiles.json"
CPU_EFF, GPU_EFF = 0.6, 0.7  # share of a NOMINAL bandwidth decode sustains (a measured one is used as is)
TOKEN_OVERHEAD_MS = 0.4  # sampling, graph launch, bookkeeping
# Each layer on the CPU also costs its ops' dispatch and thread barriers, whatever its size: fitted
# with the measured read bandwidth to this 2-core EPYC's decode of SmolLM2-135M (30 layers, 7.6 ms
# per token) and Qwen2.5-Coder-1.5B (28 layers, 31 ms); both then predict within 5%.
CPU_LAYER_MS = 0.165
CROSSING_MS = 0.08  # the hidden state moving between devices


@dataclass
class Gpu:
    name: str
    backend: str
    vram_gb: float
    vram_free_gb: float
    bw_gbs: float
    unified: bool = False


@dataclass
class HardwareProfile:
    name: str
    ram_gb: float
    ram_free_gb: float
    cpu_bw_gbs: float
    physical_cores: int
    gpu: Gpu | None = None
    cpu_bw_measured: bool = False  # by specee_measure_read_bandwidth (sustained), not a data-sheet figure


@dataclass
class Exits:
    """p[L]: share of tokens that exit after layer L; the rest run every layer and the lm_head.
    draft_bytes: what the candidate drafter reads per token."""

    p: list[float]
    draft_bytes: int = 0


@dataclass
class Plan:
    profile: str
    model: str
    layout: str  # "cpu" | "first" (SpecEE) | "last" (upstream)
    n_gpu_layers: int
    output_on_gpu: bool
    mode: str  # "specee" | "vanilla"
    n_ctx: int
    n_threads: int
    predicted_tok_s: float
    gpu_bytes: int
    cpu_bytes: int
    fits: bool
    alternatives: dict[str, float] = field(default_factory=dict)
    explanation: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def load_profiles() -> list[HardwareProfile]:
    raw = json.loads(PROFILES.read_text())["profiles"]
    out = []
    for p in raw:
        gpu = Gpu(**p["gpu"]) if p.get("gpu") else None
        out.append(HardwareProfile(p["name"], p["ram_gb"], p["ram_free_gb"], p["cpu_bw_gbs"], p["physical_cores"], gpu))
    return out


def _token_ms(m: ModelFacts, gpu_layers: set[int], output_gpu: bool, hw: HardwareProfile, exits: Exits | None) -> float:
    cpu_bw = hw.cpu_bw_gbs * GB * (1.0 if hw.cpu_bw_measured else CPU_EFF)
    gpu_bw = hw.gpu.bw_gbs * GB * GPU_EFF if hw.gpu else cpu_bw

    def cost(layer: int) -> float:
        if layer in gpu_layers:
            return m.layer_bytes[layer] / gpu_bw * 1000
        cpu = m.layer_cpu_cost[layer] if m.layer_cpu_cost else m.layer_bytes[layer]
        return cpu / cpu_bw * 1000 + CPU_LAYER_MS

    prefix = [0.0]
    crossings = [0]
    for layer in range(m.n_layer):
        prefix.append(prefix[-1] + cost(layer))
        moved = layer > 0 and ((layer in gpu_layers) != (layer - 1 in gpu_layers))
        crossings.append(crossings[-1] + int(moved))
    head_cpu = m.output_cpu_cost if m.output_cpu_cost is not None else m.output_bytes
    head = (m.output_bytes / gpu_bw if output_gpu else head_cpu / cpu_bw) * 1000
    head_cross = int(output_gpu != ((m.n_layer - 1) in gpu_layers))
    full = prefix[-1] + head + (crossings[-1] + head_cross) * CROSSING_MS
    if exits is None:
        return full + TOKEN_OVERHEAD_MS
    p_exit = sum(exits.p)
    t = sum(p * (prefix[layer + 1] + crossings[layer + 1] * CROSSING_MS) for layer, p in enumerate(exits.p))
    t += (1 - p_exit) * full
    draft = exits.draft_bytes / (gpu_bw if hw.gpu else cpu_bw) * 1000
    return t + draft + TOKEN_OVERHEAD_MS


def _gpu_fit(m: ModelFacts, hw: HardwareProfile, n_ctx: int, output_gpu: bool, draft_bytes: int) -> int:
    """How many layers fit in the GPU's free memory with the head (and drafter) there or not."""
    if hw.gpu is None:
        return 0
    budget = vram_room(hw.gpu.vram_free_gb * GB)
    budget -= (m.output_bytes + draft_bytes) if output_gpu else 0
    per = [m.layer_bytes[i] + m.kv_bytes(n_ctx, 1) for i in range(m.n_layer)]
    k = 0
    while k < m.n_layer and budget >= per[k]:
        budget -= per[k]
        k += 1
    return k


Candidate = tuple[float, int, str, int, bool, str]  # tok/s, preference, layout, GPU layers, head on the GPU, mode


def _candidates(m: ModelFacts, hw: HardwareProfile, exits: Exits | None, ctx: int) -> list[Candidate]:
    """Each layout and mode that fits this context in the memory the devices have free."""
    candidates: list[Candidate] = []
    for output_gpu in (False, True) if hw.gpu else (False,):
        k = _gpu_fit(m, hw, ctx, output_gpu, exits.draft_bytes if exits else 0)
        if hw.gpu and hw.gpu.unified:
            k = min(k, m.n_layer)
        for layout in ("first", "last") if hw.gpu and k else ("cpu",):
            on_gpu = set(range(k)) if layout == "first" else set(range(m.n_layer - k, m.n_layer))
            cpu_bytes = sum(m.layer_bytes[i] + m.kv_bytes(ctx, 1) for i in range(m.n_layer) if i not in on_gpu)
            cpu_bytes += (0 if output_gpu else m.output_bytes) + m.embd_bytes
            if hw.gpu and hw.gpu.unified:
                cpu_bytes += sum(m.layer_bytes[i] for i in on_gpu)  # the same memory
            if cpu_bytes > ram_room(hw.ram_free_gb * GB):
                continue
            for mode, ex in (("vanilla", None), ("specee", exits)) if exits else (("vanilla", None),):
                ms = _token_ms(m, on_gpu, output_gpu, hw, ex)
                # ties (everything on one device) go to the SpecEE layout and to vanilla
                pref = (layout == "first") + (mode == "vanilla")
                candidates.append((round(1000 / ms, 6), pref, layout, k, output_gpu, mode))
    return candidates


def plan(
    m: ModelFacts, hw: HardwareProfile, exits: Exits | None = None, n_ctx: int = 4096, ctx_auto: bool = True, n_threads: int = 0
) -> Plan:
    """The fastest layout and mode that fits; the context shrinks (if auto) before layers leave the GPU.
    n_threads: the decode threads asked for (0: the physical cores)."""
    ctx = n_ctx
    if ctx_auto and hw.gpu is not None:
        # An auto context gives way first: halve it (not below 4096) while that keeps more layers
        # on the GPU, before any layer is moved to the CPU.
        draft = exits.draft_bytes if exits else 0
        while ctx > 4096 and _gpu_fit(m, hw, ctx, False, draft) < m.n_layer:
            if _gpu_fit(m, hw, ctx // 2, False, draft) <= _gpu_fit(m, hw, ctx, False, draft):
                break
            ctx //= 2
    vram = hw.gpu.vram_free_gb * GB if hw.gpu else 0.0
    while True:
        # the one fits() (the model manager's badge asks it too): what does not fit both devices has no layout
        whole = fits(m.weights_bytes, hw.ram_free_gb * GB, vram, m.kv_bytes(ctx, m.n_layer))
        candidates = _candidates(m, hw, exits, ctx) if whole else []
        if candidates or not ctx_auto or ctx <= 512:
            break
        ctx //= 2
    threads = n_threads or hw.physical_cores
    if not candidates:
        need = (m.weights_bytes + m.kv_bytes(ctx, m.n_layer) + COMPUTE_BUFFER) / GB
        where = f"{hw.ram_free_gb:.1f} GB RAM free" + (f" and {hw.gpu.vram_free_gb:.1f} GB on {hw.gpu.name}" if hw.gpu else "")
        return Plan(hw.name, m.name, "cpu", 0, False, "vanilla", ctx, threads, 0.0, 0, 0, False,
                    explanation=f"{m.name} does not fit: it needs ~{need:.1f} GB at {ctx} tokens of context, {hw.name} has "
                                f"{where}, and we keep {RAM_HEADROOM / GB:.1f} GB of RAM for the system.")  # fmt: skip
    best = max(candidates)
    tok_s, _pref, layout, k, output_gpu, mode = best
    alternatives: dict[str, float] = {}
    for c in candidates:
        key = f"{c[2]}-layers/{c[5]}" if c[2] != "cpu" else f"cpu/{c[5]}"
        alternatives[key] = max(alternatives.get(key, 0.0), round(c[0], 1))
    on_gpu = set(range(k)) if layout == "first" else set(range(m.n_layer - k, m.n_layer)) if layout == "last" else set()
    gpu_bytes = sum(m.layer_bytes[i] + m.kv_bytes(ctx, 1) for i in on_gpu) + (m.output_bytes if output_gpu else 0)
    cpu_bytes = sum(m.layer_bytes[i] + m.kv_bytes(ctx, 1) for i in range(m.n_layer) if i not in on_gpu)
    cpu_bytes += (0 if output_gpu else m.output_bytes) + m.embd_bytes
    p = Plan(
        hw.name, m.name, layout, k, output_gpu, mode, ctx, threads, round(tok_s, 1), gpu_bytes, cpu_bytes, True, alternatives
    )
    p.explanation = explain(p, m, hw, exits, n_ctx)
    return p


def threads_text(n: int) -> str:
    return "1 thread" if n == 1 else f"{n} threads"


def explain(p: Plan, m: ModelFacts, hw: HardwareProfile, exits: Exits | None, requested_ctx: int) -> str:
    parts = []
    if p.layout == "cpu" or not hw.gpu:
        parts.append(f"All {m.n_layer} layers on the CPU ({p.cpu_bytes / GB:.1f} GB), {threads_text(p.n_threads)}")
    else:
        where = "first" if p.layout == "first" else "last"
        parts.append(
            f"{p.n_gpu_layers} of {m.n_layer} layers ({where}) on {hw.gpu.name} ({p.gpu_bytes / GB:.1f} GB), "
            f"{m.n_layer - p.n_gpu_layers} on the CPU; output head on the {'GPU' if p.output_on_gpu else 'CPU'}"
        )
        if p.mode == "specee" and exits and p.layout == "first" and p.n_gpu_layers < m.n_layer:
            cpu_layers = range(p.n_gpu_layers, m.n_layer)
            skipped = sum(sum(exits.p[:layer]) for layer in cpu_layers) / max(len(cpu_layers), 1)
            parts.append(f"SpecEE expected to skip {skipped:.0%} of CPU layers")
    others = ", ".join(f"{k} {v:.0f} tok/s" for k, v in sorted(p.alternatives.items(), key=lambda kv: -kv[1]))
    parts.append(f"predicted {p.predicted_tok_s:.0f} tok/s in {p.mode} mode (all options: {others})")
    if p.n_ctx < requested_ctx:
        parts.append(f"context shrunk from {requested_ctx} to {p.n_ctx} tokens to keep layers on the GPU")
    return "; ".join(parts) + "."


def exits_from_manifest(manifest: dict, n_layer: int) -> Exits | None:
    """The shipped predictors' held-out exit distribution, as the planner's Exits."""
    ex = manifest.get("exits", {})
    hist = ex.get("heldout_exit_hist")
    if not hist:
        return None
    total = max(sum(hist), 1)
    p = [h / total for h in hist[:n_layer]]
    return Exits(p, int(ex.get("draft_bytes", 0)))
