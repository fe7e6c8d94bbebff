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

// Message of the last failed specee_* call on this thread.
LLAMA_API const char * specee_last_error(void);

// ---- EAGLE-3 speculative decoding (eagle.cpp) ----------------------------------------------

struct specee_eagle;

struct specee_eagle_stats {
    int32_t n_steps;     // verify batches run
    int32_t n_drafted;   // draft tokens proposed
    int32_t n_accepted;  // draft tokens the target confirmed
    int32_t n_emitted;   // tokens produced by steps (accepted + one sampled per step)
    double  t_draft_ms, t_verify_ms, t_feed_ms;  // where the time went
};

// Bind a loaded eagle3 head to a target context: creates the draft context (sharing the target's
// token embedding) and turns on the target's feature capture. NULL on error (specee_last_error).
LLAMA_API struct specee_eagle * specee_eagle_init(struct llama_context * ctx_tgt, struct llama_model * draft,
                                                  int32_t n_draft, int32_t n_threads);
LLAMA_API void specee_eagle_free(struct specee_eagle * e);

// Decode tokens[n_keep-1 .. n) on the target (its KV must hold tokens[0 .. n_keep)), feed the
// head, and sample the first answer token with smpl. Returns it, or -1 on error.
LLAMA_API llama_token specee_eagle_prefill(struct specee_eagle * e, const llama_token * tokens, int32_t n_tokens,
                                           int32_t n_keep, struct llama_sampler * smpl);

// One speculative step: draft up to n_draft tokens, verify them with the previous sample in one
// target batch, write the 1..n_draft+1 newly sampled tokens to out (at most max_out). Returns the
// count, 0 when the context is full, -1 on error. Every token is sampled from the target's logits.
LLAMA_API int32_t specee_eagle_step(struct specee_eagle * e, struct llama_sampler * smpl, llama_token * out,
                                    int32_t max_out, struct specee_eagle_stats * stats);

// Tokens now in the target's KV cache (the prompt and all emitted tokens but the newest).
LLAMA_API int32_t specee_eagle_n_past(const struct specee_eagle * e);
LLAMA_API void    specee_eagle_reset_stats(struct specee_eagle * e);

#ifdef __cplusplus
}
#endif
