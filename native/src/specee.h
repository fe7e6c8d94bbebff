// SpecEE Chat's C API, compiled into libllama next to llama.cpp (see native/README.md).
// Plain C so Python (ctypes) and any frontend can bind it; llama.cpp's C++-only helpers
// (llama-ext.h) stay behind it.
#pragma once

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

// Capture the residual stream entering layer `lid` (0 = token embeddings) for every token of
// the following decodes; set before the first decode of the context (it re-reserves the graph).
LLAMA_API void specee_capture_layer_input(struct llama_context * ctx, int32_t lid, bool on);

// [n_tokens_of_last_decode x n_embd] floats, batch order, for a captured layer; NULL if not captured.
LLAMA_API const float * specee_layer_input(struct llama_context * ctx, int32_t lid);

#ifdef __cplusplus
}
#endif
