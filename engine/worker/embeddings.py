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

import llama_cpp
import numpy as np
from llama_cpp import Llama
from llama_cpp._internals import LlamaBatch, LlamaContext

from engine import protocol as p

EMBED_CHUNK = 128  # tokens a decode reads (its buffers: this many tokens' logits and hidden states)
EMBED_CTX_MAX = 8192  # the longest input embedded (OpenAI's limit is 8191), where the context allows


class EmbedInputError(Exception):
    def __init__(self, kind: p.ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Embedder:
    def __init__(self, llm: Llama, n_ctx: int, n_threads: int) -> None:
        self._llm = llm
        self.n_ctx = min(n_ctx, EMBED_CTX_MAX)
        model = llm._model.model
        self.n_embd = llama_cpp.llama_model_n_embd_out(model)
        self.n_vocab = llm._model.n_vocab()
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = params.n_ubatch = EMBED_CHUNK
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = n_threads
        params.embeddings = True
        params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_NONE  # summed here, chunk by chunk
        try:
            self._ctx = LlamaContext(model=llm._model, params=params, verbose=False)
        except ValueError as exc:
            raise EmbedInputError(p.ErrorKind.INTERNAL, f"the embedding context could not be made: {exc}") from exc
        self._batch = LlamaBatch(n_tokens=EMBED_CHUNK, embd=0, n_seq_max=1, verbose=False)

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
        self._ctx.kv_cache_clear()
        total = np.zeros(self.n_embd, dtype=np.float64)
        for start in range(0, len(tokens), EMBED_CHUNK):
            chunk = tokens[start : start + EMBED_CHUNK]
            self._batch.set_batch(chunk, n_past=start, logits_all=True)  # every token's hidden state out
            self._ctx.decode(self._batch)
            out = llama_cpp.llama_get_embeddings(self._ctx.ctx)
            total += np.ctypeslib.as_array(out, shape=(len(chunk) * self.n_embd,)).reshape(len(chunk), self.n_embd).sum(0)
        mean = total / len(tokens)
        norm = float(np.linalg.norm(mean))
        return (mean / norm if norm > 0 else mean).astype(np.float32).tolist()

    def close(self) -> None:
        """Free the context and batch (before the model they belong to)."""
        self._batch.close()
        self._ctx.close()
