// The verification every drafter shares (spec/drafter.cpp for llama.cpp's drafters and "copy",
// eagle.cpp for EAGLE-3): the target has decoded [id_last, d1..dk] with an output on every row, and
// row i's sample is the target's own token after d1..di. Header-only: the drafters are built into
// libspecee-spec, EAGLE into libllama.
#pragma once

#include "specee.h"

// Sample row after row from the target's logits and keep going while the sample equals the draft
// there: out gets the accepted drafts and then the target's own next token (k + 1 slots). Returns
// how many tokens out holds (accepted drafts + 1). Lossless for any sampler: only the target's
// samples are emitted, a draft only decides how far they reach.
inline int32_t specee_verify_drafts(llama_sampler * smpl, llama_context * tgt, const llama_token * draft, int32_t k,
                                    llama_token * out) {
    int32_t n_out = 0;
    for (int32_t i = 0; i <= k; ++i) {
        const llama_token t = specee_pick(smpl, tgt, i);
        out[n_out++] = t;
        if (i == k || t != draft[i]) {
            break;
        }
    }
    return n_out;
}
