// The "copy" drafter: prompt lookup that drafts only where it pays on this machine.
//
// It finds the longest earlier occurrence of the context's last tokens (prompt and answer so far)
// and proposes what followed it, like llama.cpp's ngram-simple, but a verify batch of n rows costs
// more than one row (on a 2-core CPU 4 rows cost ~2x one), so a miss is a loss. Each step it picks
// the draft length k (0 = a plain one-row decode) that maximises the expected tokens per unit of
// cost: tokens = 1 + p1 + p1 p2 + ... + p1 ... pk, with pj the measured acceptance of draft tokens
// whose match was as long as this one's will be when token j is checked (j - 1 tokens longer), and
// the cost of k + 1 rows measured on this machine as it runs. Steps that
// draft nothing still learn: the next step shows whether the match's next token came true, so a
// bucket whose prior is too shy is corrected without paying for a verify to find out. A bucket is a
// match length and whether the earlier occurrences of the context's last two tokens all went on
// alike: on the dev prompts a 2-token match's next token came true 0.65 of the time where they
// agreed, 0.28 where they did not, 0.50 with one occurrence (`engine.bench.copy_ceiling`).
#pragma once

#include "llama.h"
#include "row-costs.h"

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

// The longest earlier occurrence of a context's last tokens (ctx, then the token about to be
// decoded): where it ends in that sequence (-1: none), its length, how many earlier occurrences of
// the last two tokens were examined and whether they all went on with the same token.
struct copy_match {
    int32_t pos = -1;
    int32_t len = 0;
    int32_t n_seen = 0;
    bool alike = true;
};

class copy_drafter {
public:
    explicit copy_drafter(int32_t n_max);

    // The tokens in the target's KV cache changed wholesale (a new request): index them again.
    void reset(const std::vector<llama_token> & ctx);
    // Tokens were appended to ctx since the last call: index them.
    void sync(const std::vector<llama_token> & ctx);
    // The lookup of draft() on the sequence ctx + [last] (ctx indexed by reset/sync); the tokens
    // that followed the match are that sequence's from pos + 1 on (`last` included: a run or a
    // period copies on into what the step just emitted).
    copy_match lookup(const std::vector<llama_token> & ctx, llama_token last) const;
    // A draft continuing ctx + [last] (at most `room` tokens), empty when a one-row decode is the
    // better bet. Remembers the match it used for feedback().
    void draft(const std::vector<llama_token> & ctx, llama_token last, int32_t room, std::vector<llama_token> & out);
    // What the verification of the last draft (k tokens, n_accepted of them confirmed) gave, and how
    // long the decode of its k + 1 rows took.
    void feedback(int32_t k, int32_t n_accepted, double verify_ms);
    // The estimated acceptance of a draft token per match bucket (N_LENGTHS with one earlier
    // occurrence, then N_LENGTHS where several agreed, then where they did not); returns how many
    // were written.
    int32_t acceptance(double * p, int32_t n) const;

    static constexpr int N_LENGTHS = 6;  // match lengths 2, 3, 4, 5-7, 8-15, 16+

private:
    static constexpr int N_BUCKETS = 3 * N_LENGTHS;  // x (one occurrence, all agree, they disagree)

    int32_t n_max_;
    std::unordered_map<uint64_t, std::vector<int32_t>> index_;  // bigram -> positions of its 2nd token
    size_t n_indexed_ = 0;
    std::array<double, N_BUCKETS> acc_{}, tries_{};  // draft tokens confirmed / exposed, per bucket
    specee::row_costs costs_;                         // a verify of n rows, as measured here
    int32_t draft_len_ = 0;  // the last draft's match length (0: none) and agreement class
    int draft_alike_ = 0;
    int shadow_bucket_ = -1;  // a match not drafted from: its bucket, where its next token lies and
    int32_t shadow_pos_ = -1;  // how long the context was then
    int32_t shadow_n_ = -1;

    static int bucket_of(int32_t match_len, int alike);
    double accept_prob(int bucket) const;
};
