// SpecEE's exit decisions as plain maths: the predictor features and the small MLP that reads
// them, the draft-vocabulary head's features, and the head's top candidates. No llama.cpp or
// ggml here (exit-predictor.cpp); early-exit.cpp feeds them logits and acts on the verdicts.
#pragma once

#include <cstdint>
#include <vector>

namespace specee {

// p = softmax(l) over n values.
void softmax(const float * l, float * p, int n);

// The predictor's SPECEE_EE_N_FEATURES (14) features from the candidates' logits at this layer (l)
// and the previous one (lp, null at layer 0), with the head's log-probabilities of the candidates
// (draft_lp). engine/train/exits.py:features mirrors this exactly.
void exit_features(const float * l, const float * lp, const float * draft_lp, int k, float * f);

// The draft-vocabulary logits' SPECEE_EE_N_VOCAB_FEATURES (3) features: top logit, its margin over
// the second, log-sum-exp minus top (how much mass the rest holds). Returns the arg max.
int32_t vocab_features(const float * v, int32_t n, float * f);

// One layer's exit predictor: z = w2 . relu(W1 f + b1) + b2; exit when z > threshold.
struct exit_mlp {
    bool present = false;
    int32_t n_hidden = 0;
    std::vector<float> w1, b1, w2;  // W1 row-major [n_hidden x n_features]
    float b2 = 0.0f;
    float threshold = 0.0f;

    bool exits(const float * f, int n_features) const;
};

// w . f + b > threshold (the draft-vocabulary head's linear predictor).
bool linear_exits(const float * w, const float * f, int n, float b, float threshold);

// The k largest of v[0..n), best first.
std::vector<int32_t> top_k(const float * v, int32_t n, int32_t k);

// log-softmax of v at ids, which hold v's arg max first (top_k's order) (terms below e^-30 of the best skipped: beneath float
// precision; tokens outside a head's draft vocabulary are -inf, so this is a compare per token).
void log_probs_at(const float * v, int32_t n, const std::vector<int32_t> & ids, std::vector<float> & out);

}  // namespace specee
