"""SpecEE exit predictors: one small MLP per layer, stored as a GGUF next to the EAGLE head.

Layout (architecture "specee-exits"): per predictor layer L the tensors exit.L.w1 [n_hidden x 14],
exit.L.b1, exit.L.w2; metadata holds the layers, their b2 and thresholds, k (candidates) and the
sha256 of the model they were trained for. The native engine gets plain float arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.models.acceleration import TARGET_SHA_KEY, AccelerationError, model_sha256

ARCH = "specee-exits"


@dataclass
class LayerPredictor:
    w1: np.ndarray  # [n_hidden, 14 features] float32
    b1: np.ndarray  # [n_hidden]
    w2: np.ndarray  # [n_hidden]
    b2: float
    threshold: float  # exit when the logit z exceeds it


@dataclass
class ExitPredictors:
    n_cand: int
    n_layer: int
    target_sha256: str
    layers: dict[int, LayerPredictor] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    # after the last layer: (w[3], b, threshold) of the draft-vocabulary head's linear predictor
    vocab_head: tuple[list[float], float, float] | None = None


def save_predictors(preds: ExitPredictors, path: Path) -> None:
    """Write atomically: a killed export never leaves a file that looks complete."""
    import gguf

    tmp = path.with_name(path.name + ".partial")
    w = gguf.GGUFWriter(str(tmp), ARCH)
    w.add_string(TARGET_SHA_KEY, preds.target_sha256)
    w.add_uint32("specee.exits.n_cand", preds.n_cand)
    w.add_uint32("specee.exits.n_layer", preds.n_layer)
    layers = sorted(preds.layers)
    if layers:
        w.add_array("specee.exits.layers", [int(x) for x in layers])
        w.add_array("specee.exits.b2", [float(preds.layers[x].b2) for x in layers])
        w.add_array("specee.exits.threshold", [float(preds.layers[x].threshold) for x in layers])
    if preds.vocab_head is not None:
        vw, vb, vt = preds.vocab_head
        w.add_array("specee.exits.vocab_head", [float(v) for v in (*vw, vb, vt)])
    for x in layers:
        pr = preds.layers[x]
        w.add_tensor(f"exit.{x}.w1", np.ascontiguousarray(pr.w1, dtype=np.float32))
        w.add_tensor(f"exit.{x}.b1", np.ascontiguousarray(pr.b1, dtype=np.float32))
        w.add_tensor(f"exit.{x}.w2", np.ascontiguousarray(pr.w2, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)


def load_predictors(path: Path, model_path: Path | None = None) -> ExitPredictors:
    """Read and check a predictor file; refuse (AccelerationError) a damaged one or one trained for
    another model than model_path."""
    import gguf

    try:
        r = gguf.GGUFReader(str(path))
    except (OSError, ValueError, IndexError, KeyError) as exc:
        raise AccelerationError("bad_predictors", f"exit predictors {path.name} are unreadable or truncated ({exc}).") from None

    def field_value(key: str) -> Any:
        f = r.fields.get(key)
        if f is None:
            raise AccelerationError("bad_predictors", f"exit predictors {path.name} lack {key}; re-export them.")
        if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            return [f.parts[i].tolist()[0] for i in f.data]
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode()
        return f.parts[f.data[0]].tolist()[0]

    arch = field_value("general.architecture")
    if arch != ARCH:
        raise AccelerationError("bad_predictors", f"{path.name} is not a SpecEE predictor file (architecture {arch!r}).")
    sha = field_value(TARGET_SHA_KEY)
    if model_path is not None:
        want = model_sha256(model_path)
        if sha != want:
            raise AccelerationError(
                "wrong_predictors",
                f"{path.name} was trained for another model (sha256 {sha[:12]}…), not {model_path.name} ({want[:12]}…). "
                f"Train predictors for it with `specee train exits --model {model_path}`.",
            )
    tensors = {t.name: np.array(t.data, dtype=np.float32) for t in r.tensors}
    preds = ExitPredictors(int(field_value("specee.exits.n_cand")), int(field_value("specee.exits.n_layer")), sha)
    # an empty schedule (no layer's checks pay off) is written without these arrays
    if "specee.exits.layers" in r.fields:
        layers, b2s, thrs = (
            field_value("specee.exits.layers"),
            field_value("specee.exits.b2"),
            field_value("specee.exits.threshold"),
        )
    else:
        layers, b2s, thrs = [], [], []
    n_feat = 14  # native/src/specee.h SPECEE_EE_N_FEATURES
    for layer, b2, thr in zip(layers, b2s, thrs, strict=True):
        try:
            w1 = tensors[f"exit.{layer}.w1"].reshape(-1, n_feat)
            b1, w2 = tensors[f"exit.{layer}.b1"], tensors[f"exit.{layer}.w2"]
        except (KeyError, ValueError):
            raise AccelerationError(
                "bad_predictors", f"{path.name}: predictor of layer {layer} is missing or malformed."
            ) from None
        if not (0 <= layer < preds.n_layer) or b1.shape[0] != w1.shape[0] or w2.shape[0] != w1.shape[0]:
            raise AccelerationError("bad_predictors", f"{path.name}: predictor of layer {layer} has inconsistent shapes.")
        preds.layers[int(layer)] = LayerPredictor(
            np.ascontiguousarray(w1), np.ascontiguousarray(b1), np.ascontiguousarray(w2), float(b2), float(thr)
        )
    vh = r.fields.get("specee.exits.vocab_head")
    if vh is not None:
        vals = [float(vh.parts[i].tolist()[0]) for i in vh.data]
        if len(vals) != 5:
            raise AccelerationError("bad_predictors", f"{path.name}: the draft-vocabulary head predictor is malformed.")
        preds.vocab_head = (vals[:3], vals[3], vals[4])
    return preds
