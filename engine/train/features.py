"""The target model as a teacher: greedy answers plus the hidden states EAGLE heads learn from.

One in-process llama.cpp context (our native build). For each conversation: greedy-generate the
answer exactly as the worker does, then run prompt+answer through the target once more as a single
batch with layer-input capture on, reading the three fused feature layers and the target's own
top-1 prediction at every position.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
from llama_cpp import Llama
from llama_cpp import llama_cpp as C

from engine import native
from engine.hardware import physical_cores
from engine.models.gguf_file import inspect_gguf
from engine.worker.chat_prompt import ChatPrompt


def default_feature_layers(n_layer: int) -> list[int]:
    """Low, middle and high layer inputs, as llama.cpp's EAGLE-3 converter chooses by default."""
    return [2, n_layer // 2, n_layer - 3]


@dataclass
class Sequence:
    tokens: np.ndarray  # int32 [n]: prompt + answer
    n_prompt: int
    features: np.ndarray  # float16 [n, 3, n_embd]: inputs of the feature layers at each position
    target_top: np.ndarray  # int32 [n, 4]: the target's top-4 next-token ids at each position


class Teacher:
    def __init__(self, model_path: str, layers: list[int] | None = None, n_ctx: int = 1024, n_threads: int = 0) -> None:
        self.lib = native.lib()
        self.llm = Llama(
            model_path=model_path,
            n_ctx=n_ctx,
            n_batch=n_ctx,
            n_ubatch=n_ctx,
            n_threads=n_threads or physical_cores(),
            logits_all=True,
            verbose=False,
        )
        model = self.llm._model
        self.n_ctx = n_ctx
        self.n_layer = C.llama_model_n_layer(model.model)
        self.n_embd = model.n_embd()
        self.n_vocab = model.n_vocab()
        self.layers = layers or default_feature_layers(self.n_layer)
        if len(self.layers) != 3 or not all(0 <= lid < self.n_layer for lid in self.layers):
            raise ValueError(f"need 3 feature layers in [0, {self.n_layer}), got {self.layers}")
        for lid in self.layers:
            self.lib.specee_capture_layer_input(self.llm._ctx.ctx, lid, True)
        self.prompt = ChatPrompt.for_model(self.llm, inspect_gguf(model_path).chat_template)

    def answer(self, user_text: str, max_new: int) -> tuple[list[int], list[int]]:
        """(prompt tokens, greedy answer tokens): the same decoding the worker's vanilla mode does."""
        budget = self.n_ctx - max_new - 1
        prompt = self.prompt.fit([{"role": "user", "content": user_text}], budget).tokens
        self.llm.reset()
        out: list[int] = []
        vocab = self.llm._model.vocab
        for tok in self.llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0):
            if C.llama_vocab_is_eog(vocab, tok):
                out.append(tok)  # the end-of-turn token is a prediction too
                break
            out.append(tok)
            if len(out) >= max_new:
                break
        return prompt, out

    def features(self, tokens: list[int], n_prompt: int) -> Sequence:
        """One batch through the target: per-position feature layers and top-4 predictions."""
        n = len(tokens)
        assert n <= self.n_ctx
        self.llm.reset()
        C.llama_memory_clear(C.llama_get_memory(self.llm._ctx.ctx), True)
        batch = C.llama_batch_init(n, 0, 1)
        try:
            for i, tok in enumerate(tokens):
                batch.token[i] = tok
                batch.pos[i] = i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1
            batch.n_tokens = n
            rc = C.llama_decode(self.llm._ctx.ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed with {rc}")
        finally:
            C.llama_batch_free(batch)
        feats = np.empty((n, 3, self.n_embd), dtype=np.float16)
        for j, lid in enumerate(self.layers):
            ptr = self.lib.specee_layer_input(self.llm._ctx.ctx, lid)
            feats[:, j, :] = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n, self.n_embd))
        logits = np.ctypeslib.as_array(C.llama_get_logits(self.llm._ctx.ctx), shape=(n, self.n_vocab))
        top = np.argpartition(-logits, 4, axis=1)[:, :4]
        order = np.take_along_axis(logits, top, axis=1).argsort(axis=1)[:, ::-1]
        top4 = np.take_along_axis(top, order, axis=1).astype(np.int32)
        return Sequence(np.asarray(tokens, dtype=np.int32), n_prompt, feats, top4)
