#include "copy-draft.h"

#include <algorithm>
#include <cmath>

namespace {

uint64_t key(llama_token a, llama_token b) {
    return ((uint64_t) (uint32_t) a << 32) | (uint32_t) b;
}

constexpr int32_t MAX_MATCH = 32;      // longer matches are all "long"
constexpr size_t MAX_CANDIDATES = 64;  // most recent occurrences of the bigram examined
constexpr double MIN_GAIN = 1.05;      // draft only where the model expects 5% more tokens per cost

// Prior acceptance per match length (confirmed, exposed): a short match is a weak hint, a long one
// is usually a copy that runs on; a few verifications replace these. Where the earlier occurrences
// agreed the prior is raised, where they disagreed lowered, by about what the dev prompts showed.
constexpr double PRIOR_ACC[] = {1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
constexpr double PRIOR_TRIES[] = {4.0, 4.0, 4.0, 4.5, 5.0, 7.0};
constexpr double PRIOR_ALIKE[] = {1.0, 1.25, 0.6};  // one occurrence, all agree, they disagree

}  // namespace

copy_drafter::copy_drafter(int32_t n_max) : n_max_(std::clamp(n_max, 1, specee::row_costs::MAX_ROWS - 1)) {}

int copy_drafter::bucket_of(int32_t n, int alike) {
    return alike * N_LENGTHS + (n <= 2 ? 0 : n == 3 ? 1 : n == 4 ? 2 : n < 8 ? 3 : n < 16 ? 4 : 5);
}

void copy_drafter::reset(const std::vector<llama_token> & ctx) {
    index_.clear();
    n_indexed_ = 0;
    shadow_bucket_ = -1;
    sync(ctx);
}

void copy_drafter::sync(const std::vector<llama_token> & ctx) {
    for (size_t i = std::max<size_t>(n_indexed_, 1); i < ctx.size(); ++i) {
        index_[key(ctx[i - 1], ctx[i])].push_back((int32_t) i);
    }
    n_indexed_ = std::max(n_indexed_, ctx.size());
}

double copy_drafter::accept_prob(int b) const {
    const int len = b % N_LENGTHS;
    const double prior = std::min(PRIOR_ACC[len] * PRIOR_ALIKE[b / N_LENGTHS], PRIOR_TRIES[len] * 0.95);
    return (prior + acc_[b]) / (PRIOR_TRIES[len] + tries_[b]);
}

int32_t copy_drafter::acceptance(double * p, int32_t n) const {
    const int32_t m = std::min(n, (int32_t) N_BUCKETS);
    for (int32_t b = 0; b < m; ++b) {
        p[b] = accept_prob(b);
    }
    return m;
}

copy_match copy_drafter::lookup(const std::vector<llama_token> & ctx, llama_token last) const {
    copy_match m;
    const int32_t n = (int32_t) ctx.size();
    if (n < 2) {
        return m;
    }
    const auto it = index_.find(key(ctx[n - 1], last));
    if (it == index_.end()) {
        return m;
    }
    // the longest match ending at an earlier occurrence of (ctx[n-1], last); the latest on ties.
    // Whether all occurrences went on with the same token is evidence of its own. The sequence is
    // ctx + [last]: an occurrence ending at n - 1 went on with `last` (a run of one token).
    llama_token first_next = LLAMA_TOKEN_NULL;
    const std::vector<int32_t> & pos = it->second;
    for (size_t c = 0; c < pos.size() && c < MAX_CANDIDATES; ++c) {
        const int32_t i = pos[pos.size() - 1 - c];
        const llama_token next = i + 1 < n ? ctx[i + 1] : last;
        if (m.n_seen++ == 0) {
            first_next = next;
        } else {
            m.alike = m.alike && next == first_next;
        }
        int32_t len = 2;
        while (len < MAX_MATCH && i - len >= 0 && ctx[i - len] == ctx[n - len]) {
            ++len;
        }
        if (len > m.len) {
            m.len = len;
            m.pos = i;
        }
    }
    return m;
}

void copy_drafter::draft(const std::vector<llama_token> & ctx, llama_token last, int32_t room,
                         std::vector<llama_token> & out) {
    out.clear();
    draft_len_ = 0;
    const int32_t n = (int32_t) ctx.size();
    if (shadow_bucket_ >= 0 && n == shadow_n_ + 1) {
        // the last step decoded one row where a match was: `last` is what it emitted there
        acc_[shadow_bucket_] += ctx[shadow_pos_] == last ? 1.0 : 0.0;
        tries_[shadow_bucket_] += 1.0;
    }
    shadow_bucket_ = -1;  // a step in between that did not ask for a draft (a full context) tells nothing
    if (room < 1) {
        return;
    }
    const copy_match m = lookup(ctx, last);
    if (m.pos < 0) {
        return;
    }
    const int32_t best_pos = m.pos;
    const int32_t best_len = m.len;
    const int32_t n_seen = m.n_seen;
    const bool alike = m.alike;
    const int alike_class = n_seen == 1 ? 0 : alike ? 1 : 2;
    const int b = bucket_of(best_len, alike_class);
    const int32_t avail = std::min({n_max_, room, n - best_pos});  // up to `last` itself
    int32_t best_k = 0;
    double best_gain = MIN_GAIN;
    double expected = 1.0;  // tokens a step emits: the sample plus the confirmed drafts
    double pk = 1.0;
    for (int32_t k = 1; k <= avail; ++k) {
        // draft token k is verified only if the k - 1 before it were confirmed: the match is then
        // k - 1 tokens longer, and its bucket's estimate is the one that applies
        pk *= accept_prob(bucket_of(best_len + k - 1, alike_class));
        expected += pk;
        const double gain = expected / costs_.relative(k + 1);
        if (gain > best_gain) {
            best_gain = gain;
            best_k = k;
        }
    }
    if (best_k == 0) {
        // not worth it now; let the evidence fade slowly so a bucket gets another chance later
        acc_[b] *= 0.998;
        tries_[b] *= 0.998;
        if (avail > 0) {
            shadow_bucket_ = b;
            shadow_pos_ = best_pos + 1;
            shadow_n_ = n;
        }
        return;
    }
    for (int32_t j = best_pos + 1; j <= best_pos + best_k; ++j) {
        out.push_back(j < n ? ctx[j] : last);
    }
    draft_len_ = best_len;
    draft_alike_ = alike_class;
}

void copy_drafter::feedback(int32_t k, int32_t n_accepted, double verify_ms) {
    costs_.note(k + 1, verify_ms);
    if (draft_len_ > 0 && k > 0) {
        // draft token j was exposed with the match j tokens longer; the first miss ends the chain
        for (int32_t j = 0; j < k && j <= n_accepted; ++j) {
            const int b = bucket_of(draft_len_ + j, draft_alike_);
            acc_[b] += j < n_accepted ? 1.0 : 0.0;
            tries_[b] += 1.0;
        }
    }
    draft_len_ = 0;
}
