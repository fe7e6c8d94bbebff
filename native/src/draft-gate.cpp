#include "draft-gate.h"

#include <algorithm>

using namespace specee;

namespace {

// Before anything is measured: the head's step and one chained draft as a share of a one-row target
// decode (SmolLM2-135M's Q4_0 head on a 2-core CPU: ~1.1 and ~0.9 ms of ~9.2 ms).
constexpr double PRIOR_STEP = 0.12;
constexpr double PRIOR_DRAFT = 0.10;
// Prior calibration: a head is overconfident (SmolLM2's 10x-data head on the dev prompts: p 0.6-0.8
// -> 58% confirmed, 0.8-0.9 -> 71%, 0.95+ -> 94%), more so on chain drafts that feed on its guesses.
constexpr double PRIOR_SHRINK_FIRST = 0.8;
constexpr double PRIOR_SHRINK_LATER = 0.7;
constexpr double PRIOR_TRIES = 8.0;
constexpr double MAX_TRIES = 400.0;  // older evidence fades: halve a bin past this
constexpr double EMA = 0.1;

int bin_of(float p) {
    return std::clamp((int) (p * draft_gate::N_BINS), 0, draft_gate::N_BINS - 1);
}

}  // namespace

void draft_gate::ema(double & v, int32_t & n, double ms) {
    if (ms > 0.0) {
        v = n == 0 ? ms : (1.0 - EMA) * v + EMA * ms;
        n += 1;
    }
}

double draft_gate::bin_acceptance(int32_t i, int bin) const {
    const table & t = i <= 1 ? first_ : later_;
    bin = std::clamp(bin, 0, N_BINS - 1);
    const double prior = (i <= 1 ? PRIOR_SHRINK_FIRST : PRIOR_SHRINK_LATER) * (bin + 0.5) / N_BINS;
    return (prior * PRIOR_TRIES + t.hit[bin]) / (PRIOR_TRIES + t.tries[bin]);
}

double draft_gate::confirm_prob(int32_t i, float p) const {
    return bin_acceptance(i, bin_of(p));
}

void draft_gate::observe(int32_t i, float p, bool confirmed) {
    table & t = i <= 1 ? first_ : later_;
    const int b = bin_of(p);
    t.hit[b] += confirmed ? 1.0 : 0.0;
    t.tries[b] += 1.0;
    if (t.tries[b] > MAX_TRIES) {
        t.hit[b] *= 0.5;
        t.tries[b] *= 0.5;
    }
}

double draft_gate::value(const std::vector<double> & q, int32_t k, double q_more) const {
    const double v1 = rows_.one_row_ms();
    const double unit = v1 > 0.0 ? v1 : 1.0;
    const double step = v1 > 0.0 && n_step_ >= 3 ? step_ms_ : PRIOR_STEP * unit;
    const double draft = v1 > 0.0 && n_draft_ >= 3 ? draft_ms_ : PRIOR_DRAFT * unit;
    double tokens = 1.0;
    for (int32_t j = 0; j < k; ++j) {
        tokens += j < (int32_t) q.size() ? q[j] : q_more;
    }
    const double time = rows_.relative(k + 1) * unit + step + draft * std::max(0, k - 1);
    return tokens / time;
}

int32_t draft_gate::best(const std::vector<double> & q) const {
    int32_t k_best = 0;
    double v_best = value(q, 0, 0.0);
    for (int32_t k = 1; k <= (int32_t) q.size(); ++k) {
        const double v = value(q, k, 0.0);
        if (v > v_best) {
            v_best = v;
            k_best = k;
        }
    }
    return k_best;
}

bool draft_gate::worth_more(const std::vector<double> & q, int32_t n_max) const {
    const int32_t m = (int32_t) q.size();
    if (m == 0 || m >= n_max) {
        return false;
    }
    const double now = value(q, best(q), 0.0);
    for (int32_t k = m + 1; k <= n_max; ++k) {
        if (value(q, k, q.back()) > now) {
            return true;
        }
    }
    return false;
}

void draft_gate::info(specee_gate_info * out) const {
    for (int b = 0; b < N_BINS; ++b) {
        out->first[b] = bin_acceptance(1, b);
        out->later[b] = bin_acceptance(2, b);
    }
    for (int32_t r = 1; r <= 4; ++r) {
        out->verify_ms[r - 1] = rows_.ms(r);
    }
    out->step_ms = n_step_ > 0 ? step_ms_ : 0.0;
    out->draft_ms = n_draft_ > 0 ? draft_ms_ : 0.0;
}
