// What a target decode of n rows (a speculative verify) costs on this machine, learnt as decoding
// runs. Until a row count has been seen a few times, the cost curve in docs/acceleration.md ("The
// physics": SmolLM2 Q4_1 on a 2-core CPU, multi-column kernels) stands in for it. Shared by the drafters that choose their
// draft length from it: the copy drafter (spec/copy-draft.cpp) and the EAGLE gate (draft-gate.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace specee {

class row_costs {
public:
    static constexpr int32_t MAX_ROWS = 17;

    void note(int32_t rows, double ms) {
        if (rows < 1 || rows > MAX_ROWS || !(ms > 0.0)) {
            return;
        }
        ms_[rows] = n_[rows] == 0 ? ms : (1.0 - EMA) * ms_[rows] + EMA * ms;
        n_[rows] += 1;
    }

    // Cost of `rows` rows relative to one row: measured where both have been seen, else the prior.
    double relative(int32_t rows) const {
        rows = std::clamp(rows, 1, MAX_ROWS);
        if (seen(1) && seen(rows)) {
            return std::max(1.0, ms_[rows] / ms_[1]);
        }
        return prior(rows);
    }

    // Milliseconds of one row, 0 until measured.
    double one_row_ms() const { return seen(1) ? ms_[1] : 0.0; }
    // Milliseconds of `rows` rows as measured so far, 0 if never.
    double ms(int32_t rows) const { return rows >= 1 && rows <= MAX_ROWS && n_[rows] > 0 ? ms_[rows] : 0.0; }

    static double prior(int32_t n) {
        static const double at[] = {0.0, 1.0, 1.14, 1.38, 1.61, 1.87, 2.13, 2.4, 2.67};
        if (n <= 8) {
            return at[std::max(n, 1)];
        }
        return 2.67 + (n - 8) * (5.0 - 2.67) / 8.0;
    }

private:
    static constexpr double EMA = 0.1;
    std::array<double, MAX_ROWS + 1> ms_{};  // smoothed ms of a decode of n rows
    std::array<int32_t, MAX_ROWS + 1> n_{};

    bool seen(int32_t rows) const { return n_[rows] >= 3 && ms_[rows] > 0.0; }
};

}  // namespace specee
