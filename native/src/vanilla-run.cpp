// Plain decoding's loop in C++ (specee.h, "Plain decoding's loop"): Python asked for one token at a
// time before, a ctypes call for the decode, one for the pick and a generator step (~80 us of a
// ~12 ms step on the default model, within run-to-run noise end to end); here a call picks and
// decodes until its time is up, and Python reads the tokens it wrote.
#include "specee.h"

#include <chrono>

extern "C" int32_t specee_vanilla_run(struct llama_context * ctx, struct llama_sampler * smpl, llama_token pending,
                                      int32_t pos, int32_t n_ctx, int32_t n_max, int64_t budget_us, llama_token * out) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx));

    llama_token tok = pending;
    llama_pos p = pos;
    llama_seq_id seq = 0;
    llama_seq_id * seq_ids = &seq;
    int32_t n_seq = 1;
    int8_t want_logits = 1;
    llama_batch one = {};
    one.n_tokens = 1;
    one.token = &tok;
    one.pos = &p;
    one.n_seq_id = &n_seq;
    one.seq_id = &seq_ids;
    one.logits = &want_logits;

    if (pending >= 0) {
        if (llama_decode(ctx, one) != 0) {
            return -1;
        }
        ++p;
    }
    int32_t n = 0;
    while (n < n_max) {
        tok = specee_pick(smpl, ctx, -1);
        if (tok < 0) {
            return -1;
        }
        out[n++] = tok;
        // the last token stays undecoded: the caller may read the logits it came from, or stop here
        if (n == n_max || llama_vocab_is_eog(vocab, tok) || p + 1 >= n_ctx) {
            break;
        }
        if (std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count() >= budget_us) {
            break;
        }
        if (llama_decode(ctx, one) != 0) {
            return -1;
        }
        ++p;
    }
    return n;
}
