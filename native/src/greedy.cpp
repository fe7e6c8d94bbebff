// Greedy decoding's pick without llama.cpp's sampler chain (specee.h, "Greedy pick"): the chain first
// copies every logit into an n_vocab array of candidates (49152 of 12 bytes for SmolLM2) and then scans
// it; a plain arg max reads the logits once. The same token: the first of equal maxima, as
// llama_sampler_greedy picks it.
#include "specee.h"

#include <algorithm>

extern "C" llama_token specee_greedy(struct llama_context * ctx, int32_t idx) {
    const float * logits = llama_get_logits_ith(ctx, idx);
    if (logits == nullptr) {
        return LLAMA_TOKEN_NULL;
    }
    const int32_t n = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    if (n <= 0) {
        return LLAMA_TOKEN_NULL;
    }
    // the maximum over 8 independent lanes (no dependency chain between neighbours), then its first index
    constexpr int kLanes = 8;
    float lane[kLanes];
    std::fill(lane, lane + kLanes, logits[0]);
    int32_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
            lane[k] = logits[i + k] > lane[k] ? logits[i + k] : lane[k];
        }
    }
    float best = *std::max_element(lane, lane + kLanes);
    for (; i < n; ++i) {
        best = logits[i] > best ? logits[i] : best;
    }
    return static_cast<llama_token>(std::find(logits, logits + n, best) - logits);
}

extern "C" llama_token specee_pick(struct llama_sampler * smpl, struct llama_context * ctx, int32_t idx) {
    return smpl != nullptr ? llama_sampler_sample(smpl, ctx, idx) : specee_greedy(ctx, idx);
}
