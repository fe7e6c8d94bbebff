"""Embeddings from the loaded chat model (the HTTP server's /v1/embeddings, for Continue's codebase
search and Open WebUI's documents): the mean of the model's last hidden states (after its output
norm) over an input's tokens, scaled to unit length as OpenAI's are.

A small llama context of its own on the same weights (EngineSession.embed makes it at the first
request): the chat's KV cache is never touched. llama.cpp's own mean pooling needs a whole input in
one micro-batch, whose output buffer then holds n_vocab logits per token (~0.6 GB for 1,000 tokens
of a 151k-token vocabulary); here the input goes in chunks of EMBED_CHUNK tokens, each chunk's
hidden states (pooling "none") are summed, and the buffers stay at a chunk's size. The context is
freed before the model (EngineSession.close calls close()).
"""

from __future__ import annotations

from typing import Any

import llama_cpp
import numpy as np

from engine import protocol as p
from engine.llm.target import Target

EMBED_CHUNK = 128  # tokens a decode reads (its buffers: this many tokens' logits and hidden states)
EMBED_CTX_MAX = 8192  # the longest input embedded (OpenAI's limit is 8191), where the context allows


class EmbedInputError(Exception):
    def __init__(self, kind: p.ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Embedder:
    def __init__(self, llm: Target, n_ctx: int, n_threads: int) -> None:
        self._llm = llm
        self.n_ctx = min(n_ctx, EMBED_CTX_MAX)
        self.n_embd = llama_cpp.llama_model_n_embd_out(llm.model)
        self.n_vocab = llm.n_vocab()
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = params.n_ubatch = EMBED_CHUNK
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = n_threads
        params.embeddings = True
        params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_NONE  # summed here, chunk by chunk
        self._ctx: Any = llama_cpp.llama_init_from_model(llm.model, params)
        if not self._ctx:
            raise EmbedInputError(p.ErrorKind.INTERNAL, "the embedding context could not be made: Failed to create llama_context")
        self._batch: Any = llama_cpp.llama_batch_init(EMBED_CHUNK, 0, 1)

    def embed(self, req: p.Embed) -> p.Embeddings:
        if req.texts:
            inputs = [self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=False) for text in req.texts]
        else:
            inputs = [list(tokens) for tokens in req.token_lists]
        for i, tokens in enumerate(inputs):
            if not tokens:
                raise EmbedInputError(p.ErrorKind.BAD_REQUEST, f"input[{i}] is empty: there is nothing to embed")
            if len(tokens) > self.n_ctx:
                raise EmbedInputError(
                    p.ErrorKind.CONTEXT_LENGTH_EXCEEDED,
                    f"input[{i}] is {len(tokens)} tokens; this server embeds at most {self.n_ctx} tokens per input:"
                    " split it into shorter pieces",
                )
            bad = next((t for t in tokens if not 0 <= t < self.n_vocab), None)
            if bad is not None:
                raise EmbedInputError(p.ErrorKind.BAD_REQUEST, f"input[{i}] holds {bad}, not a token id of this model")
        return p.Embeddings(req.request_id, [self._vector(tokens) for tokens in inputs], [len(t) for t in inputs])

    def _vector(self, tokens: list[int]) -> list[float]:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self._ctx), True)
        total = np.zeros(self.n_embd, dtype=np.float64)
        b = self._batch
        for start in range(0, len(tokens), EMBED_CHUNK):
            chunk = tokens[start : start + EMBED_CHUNK]
            b.n_tokens = len(chunk)
            for i, tok in enumerate(chunk):  # every token's hidden state out
                b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, start + i, 1, True
                b.seq_id[i][0] = 0
            rc = llama_cpp.llama_decode(self._ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            out = llama_cpp.llama_get_embeddings(self._ctx)
            total += np.ctypeslib.as_array(out, shape=(len(chunk) * self.n_embd,)).reshape(len(chunk), self.n_embd).sum(0)
        mean = total / len(tokens)
        norm = float(np.linalg.norm(mean))
        return (mean / norm if norm > 0 else mean).astype(np.float32).tolist()

    def close(self) -> None:
        """Free the context and batch (before the model they belong to)."""
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
