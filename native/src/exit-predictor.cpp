// SpecEE's exit decisions as plain maths (exit-predictor.h).
#include "exit-predictor.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace specee {

void softmax(const float * l, float * p, int n) {
    const float m = *std::max_element(l, l + n);
    float s = 0.0f;
    for (int i = 0; i < n; ++i) {
        p[i] = std::exp(l[i] - m);
        s += p[i];
    }
    for (int i = 0; i < n; ++i) {
        p[i] /= s;
    }
}

// top-4 logits, their softmax probabilities over all candidates, the top token's probability change
// and whether it was already on top, the top-1/top-2 margin, how much the top logit grew, and the
// head's log-probability of all candidates and of its first.
void exit_features(const float * l, const float * lp, const float * draft_lp, int k, float * f) {
    std::vector<int> order(k);
    for (int i = 0; i < k; ++i) {
        order[i] = i;
    }
    const int top = std::min(4, k);
    std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int a, int b) { return l[a] > l[b]; });
    std::vector<float> pr(k), pp(k, 1.0f / (float) k);
    softmax(l, pr.data(), k);
    if (lp != nullptr) {
        softmax(lp, pp.data(), k);
    }
    for (int i = 0; i < 4; ++i) {
        const int j = order[std::min(i, top - 1)];
        f[i] = l[j];
        f[4 + i] = pr[j];
    }
    const int i1 = order[0];
    f[8] = pr[i1] - pp[i1];
    f[9] = lp != nullptr && (int) (std::max_element(lp, lp + k) - lp) == i1 ? 1.0f : 0.0f;
    f[10] = top > 1 ? l[i1] - l[order[1]] : 0.0f;
    f[11] = lp != nullptr ? l[i1] - *std::max_element(lp, lp + k) : 0.0f;
    // how sure the head was that the token is among its candidates, and of its first one
    const float dm = *std::max_element(draft_lp, draft_lp + k);
    double ds = 0.0;
    for (int i = 0; i < k; ++i) {
        ds += std::exp((double) (draft_lp[i] - dm));
    }
    f[12] = dm + (float) std::log(ds);
    f[13] = draft_lp[0];
}

int32_t vocab_features(const float * v, int32_t n, float * f) {
    int32_t i1 = 0;
    float m1 = -INFINITY, m2 = -INFINITY;
    for (int32_t i = 0; i < n; ++i) {
        if (v[i] > m1) {
            m2 = m1;
            m1 = v[i];
            i1 = i;
        } else if (v[i] > m2) {
            m2 = v[i];
        }
    }
    double sum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
        if (v[i] > m1 - 30.0f) {
            sum += std::exp((double) (v[i] - m1));
        }
    }
    f[0] = m1;
    f[1] = m1 - m2;
    f[2] = (float) std::log(sum);
    return i1;
}

bool exit_mlp::exits(const float * f, int n_features) const {
    if (!present) {
        return false;
    }
    float z = b2;
    for (int h = 0; h < n_hidden; ++h) {
        const float * w = w1.data() + (size_t) h * n_features;
        float a = b1[h];
        for (int i = 0; i < n_features; ++i) {
            a += w[i] * f[i];
        }
        if (a > 0.0f) {
            z += w2[h] * a;
        }
    }
    return z > threshold;
}

bool linear_exits(const float * w, const float * f, int n, float b, float threshold) {
    float z = b;
    for (int i = 0; i < n; ++i) {
        z += w[i] * f[i];
    }
    return z > threshold;
}

std::vector<int32_t> top_k(const float * v, int32_t n, int32_t k) {
    std::vector<std::pair<float, int32_t>> best;  // ascending, size <= k
    best.reserve(k + 1);
    for (int32_t i = 0; i < n; ++i) {
        if ((int32_t) best.size() == k && v[i] <= best.front().first) {
            continue;
        }
        best.emplace_back(v[i], i);
        std::sort(best.begin(), best.end());
        if ((int32_t) best.size() > k) {
            best.erase(best.begin());
        }
    }
    std::vector<int32_t> out;
    for (auto it = best.rbegin(); it != best.rend(); ++it) {
        out.push_back(it->second);
    }
    return out;
}

void log_probs_at(const float * v, int32_t n, const std::vector<int32_t> & ids, std::vector<float> & out) {
    const float m = v[ids[0]];  // the best (top_k's order)
    double sum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
        if (v[i] > m - 30.0f) {
            sum += std::exp((double) (v[i] - m));
        }
    }
    const float lse = m + (float) std::log(sum);
    out.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        out[i] = v[ids[i]] - lse;
    }
}

}  // namespace specee
