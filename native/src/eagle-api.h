// The EAGLE-3 drafter inside libllama (eagle.cpp), for our own libraries only, not part of
// specee.h: specee_drafter_* (libspecee-spec) runs type "eagle" through it, and early exit
// (early-exit.cpp) builds its candidates on it. Exported by libllama like the C API (c-api.map).
#pragma once

#include "specee.h"

#ifdef __cplusplus
extern "C" {
#endif

struct specee_eagle;

// Bind a loaded eagle3 head to a target context: creates the draft context (sharing the target's
// token embedding) and turns on the target's feature capture. NULL on error (specee_last_error).
LLAMA_API struct specee_eagle * specee_eagle_init(struct llama_context * ctx_tgt, struct llama_model * draft,
                                                  int32_t n_draft, int32_t n_threads);
LLAMA_API void specee_eagle_free(struct specee_eagle * e);
LLAMA_API void specee_eagle_set_threads(struct specee_eagle * e, int32_t n_threads);
// As specee_drafter_set_gated.
LLAMA_API void specee_eagle_set_gated(struct specee_eagle * e, bool gated);
LLAMA_API void specee_eagle_gate_info(const struct specee_eagle * e, struct specee_gate_info * info);
// As specee_drafter_prefill, specee_drafter_step, specee_drafter_n_past, specee_drafter_reset_stats.
LLAMA_API llama_token specee_eagle_prefill(struct specee_eagle * e, const llama_token * tokens, int32_t n_tokens,
                                           int32_t n_keep, struct llama_sampler * smpl);
LLAMA_API int32_t specee_eagle_step(struct specee_eagle * e, struct llama_sampler * smpl, llama_token * out,
                                    int32_t max_out, struct specee_drafter_stats * stats);
LLAMA_API int32_t specee_eagle_n_past(const struct specee_eagle * e);
LLAMA_API void    specee_eagle_reset_stats(struct specee_eagle * e);
// As specee_drafter_draft_context.
LLAMA_API struct llama_context * specee_eagle_draft_context(const struct specee_eagle * e);

#ifdef __cplusplus
}

// A draft context beside the target ctx_tgt (an EAGLE head's, a draft model's): the target's context
// length, batch and attention (flash attention resolved, not "auto"), one sequence, n_threads.
inline llama_context_params specee_draft_context_params(const llama_context * ctx_tgt, int32_t n_threads) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = llama_n_ctx(ctx_tgt);
    cp.n_batch = llama_n_batch(ctx_tgt);
    cp.n_ubatch = cp.n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.flash_attn_type = specee_flash_attn_type(ctx_tgt);
    return cp;
}
#endif
