"""/v1/embeddings: OpenAI's request (input: a string, a list of strings, a token array or a list of
token arrays; encoding_format float or base64) -> the worker's Embed, and its Embeddings -> OpenAI's
list of vectors (engine/worker/embeddings.py computes them from the loaded model)."""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field
from typing import Any

from engine import protocol as p
from engine.serve.errors import ApiError
from engine.serve.schema import _shown, _text

MAX_INPUTS = 2048  # OpenAI's limit on inputs per request
FORMATS = ("float", "base64")


@dataclass
class EmbeddingRequest:
    texts: list[str] = field(default_factory=list)
    token_lists: list[list[int]] = field(default_factory=list)
    encoding_format: str = "float"

    def embed(self) -> p.Embed:
        return p.Embed(texts=self.texts, token_lists=self.token_lists)


def _is_tokens(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def parse_embeddings(body: Any, served_model: str) -> EmbeddingRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model not in (None, "", served_model):
        raise ApiError(
            404, f"model {_shown(model)} is not served here; this server serves {served_model!r}", "model", "model_not_found"
        )
    fmt = body.get("encoding_format") or "float"
    if fmt not in FORMATS:
        raise ApiError(400, f"encoding_format must be 'float' or 'base64', got {_shown(fmt)}", param="encoding_format")
    if body.get("dimensions") is not None:
        raise ApiError(
            400, "dimensions is not supported: the vectors have the model's own size", param="dimensions",
            code="unsupported_parameter",
        )  # fmt: skip
    raw = body.get("input")
    req = EmbeddingRequest(encoding_format=fmt)
    if isinstance(raw, str) or _is_tokens(raw):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "input must be a string, a list of strings, or token arrays (lists of integers)", param="input")
    if len(raw) > MAX_INPUTS:
        raise ApiError(400, f"at most {MAX_INPUTS} inputs per request, got {len(raw)}", param="input")
    if all(isinstance(x, str) for x in raw):
        for i, text in enumerate(raw):
            if not text:
                raise ApiError(400, f"input[{i}] is empty: there is nothing to embed", param="input")
            req.texts.append(_text(text, "input"))
    elif all(_is_tokens(x) for x in raw):
        req.token_lists = [list(x) for x in raw]
    else:
        raise ApiError(400, "input must be strings or token arrays (non-empty lists of integers), not a mix", param="input")
    return req


def _encoded(vector: list[float], fmt: str) -> list[float] | str:
    if fmt == "base64":  # what OpenAI sends: the float32 values, little-endian, in base64
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


def embeddings_response(out: p.Embeddings, req: EmbeddingRequest, model: str) -> dict[str, Any]:
    data = [
        {"object": "embedding", "index": i, "embedding": _encoded(vector, req.encoding_format)}
        for i, vector in enumerate(out.vectors)
    ]
    n = sum(out.n_tokens)
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": n, "total_tokens": n}}
