// Internals shared by the EAGLE (eagle.cpp) and SpecEE early-exit (early-exit.cpp) decoders.
#pragma once

#include "draft-gate.h"
#include "eagle-api.h"

#include <algorithm>
#include <string>
#include <vector>

extern thread_local std::string specee_error_msg;

namespace specee {

struct batch_guard {
    llama_batch b;
    explicit batch_guard(llama_batch batch) : b(batch) {}
    ~batch_guard() { llama_batch_free(b); }
};

inline llama_token argmax(const float * v, int32_t n) {
    return (llama_token) (std::max_element(v, v + n) - v);
}

// The softmax probability of v[best] (the arg max). Logits more than 20 below it add < 2e-9 each and
// are skipped (an EAGLE head's rows outside its draft vocabulary are -inf).
float top_prob(const float * v, int32_t n, llama_token best);

// Sequence 0, consecutive positions from pos0; outputs for all rows or none.
inline void set_rows(llama_batch & b, int32_t n, llama_pos pos0, bool outputs) {
    for (int32_t i = 0; i < n; ++i) {
        b.pos[i] = pos0 + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = outputs ? 1 : 0;
    }
    b.n_tokens = n;
}
}  // namespace specee

struct specee_eagle {
    llama_context * tgt = nullptr;
    llama_context * dft = nullptr;
    int32_t n_embd_t = 0;  // target hidden size (one feature row)
    int32_t n_embd_d = 0;  // head hidden size (g rows)
    int32_t n_vocab = 0;
    int32_t n_batch = 0;   // target batch limit
    int32_t layers[3] = {0, 0, 0};
    int32_t n_draft = 3;

    int32_t n_past = 0;          // tokens in the target's KV cache
    llama_token id_last = -1;    // sampled, not yet decoded by the target
    llama_token first_draft = -1;  // the seed row's proposal
    float first_p = 0.0f;          // the head's probability of it
    std::vector<float> first_h;    // and its pre-norm state, fed to the next chain step

    std::vector<float> feats;  // encoder input rows [n x 3*n_embd_t]
    std::vector<float> g;      // encoder output rows [n x n_embd_d]
    bool gated = false;            // verify only the chain drafts that pay (draft-gate.h), else all n_draft
    specee::draft_gate gate;
    specee_drafter_stats stats{};
};

namespace specee {

// g rows for the last target decode's rows [r0, r0+n); exit_layer >= 0 substitutes h_exit for
// the captured layer inputs that an early exit at that layer skipped.
bool encode_features(specee_eagle * e, int32_t r0, int32_t n, int32_t exit_layer, const float * h_exit);
// Decode draft rows (tokens[i], hidden rows[i]) at pos0+i.
bool draft_decode(specee_eagle * e, const llama_token * tokens, const float * hidden, int32_t n, llama_pos pos0, bool outputs);
// first_h = the head's pre-norm state at row `row` of the last draft decode (the next chain step's input).
void keep_draft_state(specee_eagle * e, int32_t row);

}  // namespace specee
