// How many of the EAGLE head's chain drafts a step verifies (eagle.cpp): the count that maximises
// the expected tokens per millisecond of the step, from the head's own confidence in each draft and
// this machine's measured costs.
//
// A verify of k + 1 rows costs more than one row (on a 2-core CPU 4 rows cost ~2x one), so a draft
// the target rejects is a loss. The head's softmax probability of its pick, calibrated online
// against what the target confirmed, gives each draft's chance; the chain's expected tokens are
// 1 + q1 + q1 q2 + ..., its time the verify of k + 1 rows, the head's per-step work and one head
// decode per draft after the first. Steps that verify no draft still teach the calibration: the
// target's next token shows whether the head's first draft was right.
#pragma once

#include "row-costs.h"
#include "specee.h"

#include <array>
#include <cstdint>
#include <vector>

namespace specee {

class draft_gate {
public:
    static constexpr int N_BINS = 10;  // the head's probability in tenths

    // Chance that the target confirms chain draft `i` (1-based), given the head's probability p.
    double confirm_prob(int32_t i, float p) const;
    // With q[j] the chance that drafts 1..j+1 are all confirmed, how many of them to verify.
    int32_t best(const std::vector<double> & q) const;
    // Whether computing one more draft could beat best(q), even if the head were sure of it.
    bool worth_more(const std::vector<double> & q, int32_t n_max) const;

    void observe(int32_t i, float p, bool confirmed);
    void note_verify(int32_t rows, double ms) { rows_.note(rows, ms); }
    void note_draft(double ms) { ema(draft_ms_, n_draft_, ms); }  // one chained head decode
    void note_step(double ms) { ema(step_ms_, n_step_, ms); }     // the head's work every step

    // The learnt calibration of first (i = 1) or later chain drafts, per probability tenth.
    double bin_acceptance(int32_t i, int bin) const;
    void info(specee_gate_info * out) const;

private:
    struct table {
        std::array<double, N_BINS> hit{}, tries{};
    };
    table first_, later_;  // chain draft 1, and drafts 2.. (the head feeds on its own guesses there)
    row_costs rows_;
    double draft_ms_ = 0.0, step_ms_ = 0.0;
    int32_t n_draft_ = 0, n_step_ = 0;

    static void ema(double & v, int32_t & n, double ms);
    double value(const std::vector<double> & q, int32_t k, double q_more) const;  // tokens per unit time
};

}  // namespace specee
