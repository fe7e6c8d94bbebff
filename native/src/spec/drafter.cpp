// specee_drafter_*: one handle for every drafter (specee.h). "eagle" runs through libllama's EAGLE-3
// loop (eagle.cpp); the others are llama.cpp's own drafters (common/speculative: the n-gram lookups
// and draft-simple, a smaller model with the target's tokenizer). Drafting is theirs; the
// verification is ours, the one eagle.cpp runs too (verify.h): every emitted token is sampled from
// the target's logits, so greedy output equals vanilla and sampling keeps the target's distribution.
// "copy" is ours (copy-draft.h): prompt lookup that drafts only where this machine's verify costs
// and the measured acceptance say it pays, else decodes one row as vanilla does. Bound to an
// early-exit handle (specee_drafter_init_exits, the combined mode), the copy drafter's one-row steps
// are SpecEE's early-exit steps and its verify batches run through that handle, which feeds its head.
// Built into libspecee-spec (patch 0006), not libllama: llama.cpp's common library links libllama.
#include "copy-draft.h"
#include "eagle-api.h"
#include "verify.h"

#include "common.h"
#include "speculative.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

thread_local std::string g_error;

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct specee_drafter {
    specee_eagle * eagle = nullptr;  // type "eagle": libllama's loop; the fields below are unused

    llama_context * tgt = nullptr;
    llama_context * dft = nullptr;  // owned: the draft model's context (draft-simple)
    common_params_speculative params;
    common_speculative * spec = nullptr;  // llama.cpp's drafters
    std::unique_ptr<copy_drafter> copy;   // or ours
    specee_ee * ee = nullptr;  // not owned: copy's one-row steps exit early and its verifies feed ee's head
    int32_t n_draft = 3;
    int32_t n_batch = 512;

    llama_tokens prompt;  // the tokens in the target's KV cache
    llama_token id_last = -1;  // sampled, not yet decoded by the target
    llama_tokens draft;
    specee_drafter_stats stats{};
};

const char * specee_drafter_last_error(void) {
    return g_error.c_str();
}

specee_drafter * specee_drafter_init(llama_context * ctx_tgt, const char * type, llama_model * draft_model, int32_t n_draft,
                                     int32_t n_threads) {
    if (type != nullptr && std::string(type) == "eagle") {
        if (draft_model == nullptr) {
            g_error = "the eagle drafter needs an EAGLE-3 head";
            return nullptr;
        }
        specee_eagle * e = specee_eagle_init(ctx_tgt, draft_model, n_draft, n_threads);
        if (e == nullptr) {
            g_error = specee_last_error();
            return nullptr;
        }
        auto * d = new specee_drafter();
        d->eagle = e;
        d->tgt = ctx_tgt;  // the eagle handle keeps its own state; steps read the vocabulary from here
        return d;
    }
    const std::string name = type != nullptr ? type : "";
    const bool ours = name == "copy";  // no llama.cpp drafter behind it
    const common_speculative_type t = ours ? COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE : common_speculative_type_from_name(name);
    if (t == COMMON_SPECULATIVE_TYPE_COUNT || t == COMMON_SPECULATIVE_TYPE_NONE) {
        g_error = "unknown drafter '" + name + "'; there are: eagle, copy, " + common_speculative_all_types_str();
        return nullptr;
    }
    const bool needs_model = t == COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE;
    if (needs_model != (draft_model != nullptr)) {
        g_error = needs_model ? "draft-simple needs a draft model" : "this drafter takes no draft model";
        return nullptr;
    }
    if (n_draft < 1 || n_draft > 64) {
        g_error = "the draft length must be 1..64";
        return nullptr;
    }
    auto * s = new specee_drafter();
    s->tgt = ctx_tgt;
    s->n_draft = n_draft;
    s->n_batch = (int32_t) llama_n_batch(ctx_tgt);
    if (ours) {
        s->copy = std::make_unique<copy_drafter>(n_draft);
        return s;
    }
    s->params.types = {t};
    s->params.draft.n_max = n_draft;
    s->params.draft.ctx_tgt = ctx_tgt;
    // prompt lookup: match the last 3 tokens anywhere in the context, propose what followed
    s->params.ngram_simple.size_n = 3;
    s->params.ngram_simple.size_m = (uint16_t) n_draft;
    s->params.ngram_map_k.size_n = 3;
    s->params.ngram_map_k.size_m = (uint16_t) n_draft;
    s->params.ngram_map_k4v.size_n = 3;
    s->params.ngram_map_k4v.size_m = (uint16_t) n_draft;
    if (draft_model != nullptr) {
        s->dft = llama_init_from_model(draft_model, specee_draft_context_params(ctx_tgt, n_threads));
        if (s->dft == nullptr) {
            g_error = "could not create the draft model's context";
            delete s;
            return nullptr;
        }
        s->params.draft.ctx_dft = s->dft;
    }
    try {
        s->spec = common_speculative_init(s->params, 1);
    } catch (const std::exception & ex) {
        g_error = ex.what();
    }
    if (s->spec == nullptr) {
        if (g_error.empty()) {
            g_error = "llama.cpp could not set up the drafter";
        }
        specee_drafter_free(s);
        return nullptr;
    }
    return s;
}

specee_drafter * specee_drafter_init_exits(llama_context * ctx_tgt, specee_ee * ee, int32_t n_draft) {
    if (ctx_tgt == nullptr || ee == nullptr || n_draft < 1 || n_draft > 64) {
        g_error = "the combined drafter needs a target context, an early-exit handle and a draft length of 1..64";
        return nullptr;
    }
    auto * s = new specee_drafter();
    s->tgt = ctx_tgt;
    s->ee = ee;
    s->n_draft = n_draft;
    s->n_batch = (int32_t) llama_n_batch(ctx_tgt);
    s->copy = std::make_unique<copy_drafter>(n_draft);
    return s;
}

void specee_drafter_set_threads(specee_drafter * s, int32_t n_threads) {
    if (s != nullptr && s->eagle != nullptr) {
        specee_eagle_set_threads(s->eagle, n_threads);
    } else if (s != nullptr && s->dft != nullptr) {
        llama_set_n_threads(s->dft, n_threads, n_threads);
    }
}

void specee_drafter_set_gated(specee_drafter * s, bool gated) {
    if (s != nullptr && s->eagle != nullptr) {
        specee_eagle_set_gated(s->eagle, gated);
    }
}

bool specee_drafter_gate_info(const specee_drafter * s, specee_gate_info * info) {
    if (s == nullptr || s->eagle == nullptr || info == nullptr) {
        return false;
    }
    specee_eagle_gate_info(s->eagle, info);
    return true;
}

void specee_drafter_free(specee_drafter * s) {
    if (s == nullptr) {
        return;
    }
    specee_eagle_free(s->eagle);
    if (s->spec) {
        common_speculative_free(s->spec);
    }
    if (s->dft) {
        llama_free(s->dft);
    }
    delete s;
}

namespace {

// Decode tokens at pos0.. on the target (outputs for every row, or the last only) and let the
// drafter see them (draft-simple decodes them into its own context).
bool decode(specee_drafter * s, const llama_token * tokens, int32_t n, llama_pos pos0, bool all_outputs) {
    common_batch batch(s->tgt);
    for (int32_t i = 0; i < n; ++i) {
        batch.add(tokens[i], pos0 + i, 0, all_outputs || i == n - 1);
    }
    if (llama_process(s->tgt, LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) {
        g_error = "target decode failed";
        return false;
    }
    if (s->spec != nullptr && !common_speculative_process(s->spec, batch)) {
        g_error = "the drafter failed to process the batch";
        return false;
    }
    return true;
}

void trim(specee_drafter * s, llama_pos from) {
    llama_memory_seq_rm(llama_get_memory(s->tgt), 0, from, -1);
    if (s->dft) {
        llama_memory_seq_rm(llama_get_memory(s->dft), 0, from, -1);
    }
}

void note_step(specee_drafter * s, int32_t k, int32_t n_out, double t0, double t1, double t2, specee_drafter_stats * stats) {
    specee_drafter_stats & st = s->stats;
    st.n_steps += 1;
    st.n_drafted += k;
    st.n_accepted += n_out - 1;
    st.n_emitted += n_out;
    st.t_draft_ms += t1 - t0;
    st.t_verify_ms += t2 - t1;
    if (stats) {
        *stats = st;
    }
}

// The combined mode's step, the copy drafter's draft in hand: none is an early-exit step, one or
// more a verify batch through the early-exit handle. The copy drafter prices a draft against what
// a one-row step costs here, so the exit steps' time is what it learns as that cost.
int32_t exits_step(specee_drafter * s, llama_sampler * smpl, llama_token * out, double t0, double t1,
                   specee_drafter_stats * stats) {
    const int32_t k = (int32_t) s->draft.size();
    const int32_t n_out = k == 0 ? specee_ee_step(s->ee, smpl, out, nullptr, nullptr, nullptr)
                                 : specee_ee_verify(s->ee, smpl, s->draft.data(), k, out);
    if (n_out <= 0) {
        if (n_out < 0) {
            g_error = specee_last_error();
        }
        return n_out;  // 0: the context is full
    }
    const double t2 = now_ms();
    s->prompt.push_back(s->id_last);
    s->prompt.insert(s->prompt.end(), s->draft.begin(), s->draft.begin() + (n_out - 1));
    s->id_last = out[n_out - 1];
    s->copy->feedback(k, n_out - 1, t2 - t1);
    s->copy->sync(s->prompt);
    note_step(s, k, n_out, t0, t1, t2, stats);
    return n_out;
}

}  // namespace

llama_token specee_drafter_prefill(specee_drafter * s, const llama_token * tokens, int32_t n_tokens, int32_t n_keep,
                                   llama_sampler * smpl) {
    if (s->eagle != nullptr) {
        const llama_token t = specee_eagle_prefill(s->eagle, tokens, n_tokens, n_keep, smpl);
        if (t < 0) {
            g_error = specee_last_error();
        }
        return t;
    }
    if (s->ee != nullptr) {
        s->id_last = specee_ee_prefill(s->ee, tokens, n_tokens, n_keep, smpl);
        if (s->id_last < 0) {
            g_error = specee_last_error();
            return -1;
        }
        s->prompt.assign(tokens, tokens + n_tokens);
        s->copy->reset(s->prompt);
        return s->id_last;
    }
    if (n_tokens < 1 || n_tokens >= (int32_t) llama_n_ctx(s->tgt)) {
        g_error = "the prompt is empty or does not fit in the context";
        return -1;
    }
    const int32_t start = std::max(0, std::min(n_keep, n_tokens) - 1);  // re-decode one token for its logits
    trim(s, start);
    for (int32_t c0 = start; c0 < n_tokens; c0 += s->n_batch) {
        const int32_t n = std::min(s->n_batch, n_tokens - c0);
        if (!decode(s, tokens + c0, n, c0, false)) {
            return -1;
        }
    }
    s->prompt.assign(tokens, tokens + n_tokens);
    s->id_last = specee_pick(smpl, s->tgt, -1);
    if (s->copy) {
        s->copy->reset(s->prompt);
    } else if (s->spec != nullptr) {
        common_speculative_begin(s->spec, 0, s->prompt);
    }
    return s->id_last;
}

int32_t specee_drafter_step(specee_drafter * s, llama_sampler * smpl, llama_token * out, int32_t max_out,
                            specee_drafter_stats * stats) {
    if (s->eagle != nullptr) {
        const int32_t n = specee_eagle_step(s->eagle, smpl, out, max_out, stats);
        if (n < 0) {
            g_error = specee_last_error();
        }
        return n;
    }
    const int32_t n_past = (int32_t) s->prompt.size();
    const int32_t room = (int32_t) llama_n_ctx(s->tgt) - n_past - 1;
    if (room < 1 || max_out < 1) {
        return 0;  // context full
    }
    const double t0 = now_ms();
    s->draft.clear();
    const int32_t n_max = std::min({s->n_draft, room - 1, max_out - 1});
    if (n_max > 0 && s->copy) {
        s->copy->draft(s->prompt, s->id_last, n_max, s->draft);
    } else if (n_max > 0 && s->spec != nullptr) {
        common_speculative_get_draft_params(s->spec, 0) = {true, n_max, n_past, s->id_last, &s->prompt, &s->draft};
        common_speculative_draft(s->spec);
        if ((int32_t) s->draft.size() > n_max) {
            s->draft.resize(n_max);
        }
        // the draft model decoded its proposals past n_past: the verify batch decodes them again
        if (s->dft) {
            llama_memory_seq_rm(llama_get_memory(s->dft), 0, n_past, -1);
        }
    }
    const double t1 = now_ms();
    if (s->ee != nullptr) {
        return exits_step(s, smpl, out, t0, t1, stats);
    }
    const int32_t k = (int32_t) s->draft.size();
    llama_tokens batch_tokens = {s->id_last};
    batch_tokens.insert(batch_tokens.end(), s->draft.begin(), s->draft.end());
    if (!decode(s, batch_tokens.data(), k + 1, n_past, true)) {
        return -1;
    }
    const int32_t n_out = specee_verify_drafts(smpl, s->tgt, s->draft.data(), k, out);
    const int32_t n_accepted = n_out - 1;
    if (s->spec != nullptr) {
        common_speculative_accept(s->spec, 0, (uint16_t) n_accepted);
    }
    // keep id_last and the accepted drafts; the rejected rows leave both caches
    trim(s, n_past + 1 + n_accepted);
    s->prompt.push_back(s->id_last);
    s->prompt.insert(s->prompt.end(), s->draft.begin(), s->draft.begin() + n_accepted);
    s->id_last = out[n_out - 1];
    const double t2 = now_ms();
    if (s->copy) {
        s->copy->feedback(k, n_accepted, t2 - t1);
        s->copy->sync(s->prompt);
    }
    note_step(s, k, n_out, t0, t1, t2, stats);
    return n_out;
}

int32_t specee_drafter_steps(specee_drafter * s, llama_sampler * smpl, llama_token * out, int32_t max_out, int32_t per_step,
                             int64_t budget_us, specee_drafter_stats * stats) {
    const double t0 = now_ms();
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(s->tgt));
    int32_t n = 0;
    do {
        const int32_t got = specee_drafter_step(s, smpl, out + n, std::min(per_step, max_out - n), stats);
        if (got < 0) {
            return got;
        }
        if (got == 0) {
            break;  // context full
        }
        const bool ended = std::any_of(out + n, out + n + got, [vocab](llama_token t) { return llama_vocab_is_eog(vocab, t); });
        n += got;
        if (ended) {
            break;  // an accepted draft may end the answer before the step's last token
        }
    } while (max_out - n >= per_step && (now_ms() - t0) * 1000.0 < (double) budget_us);
    return n;
}

llama_context * specee_drafter_draft_context(const specee_drafter * s) {
    if (s->ee != nullptr) {
        return specee_ee_draft_context(s->ee);
    }
    return s->eagle != nullptr ? specee_eagle_draft_context(s->eagle) : s->dft;
}

int32_t specee_drafter_n_past(const specee_drafter * s) {
    if (s->ee != nullptr) {
        return specee_ee_n_past(s->ee);
    }
    return s->eagle != nullptr ? specee_eagle_n_past(s->eagle) : (int32_t) s->prompt.size();
}

int32_t specee_drafter_copy_acceptance(const specee_drafter * s, double * p, int32_t n) {
    return s->copy ? s->copy->acceptance(p, n) : 0;
}

int32_t specee_copy_lookup(const llama_token * ctx, int32_t n, llama_token last, int32_t max_out, llama_token * out,
                           int32_t * n_out, int32_t * match_len) {
    const std::vector<llama_token> seq(ctx, ctx + std::max(0, n));
    copy_drafter d(1);
    d.reset(seq);
    const copy_match m = d.lookup(seq, last);
    int32_t k = 0;
    for (int32_t j = m.pos + 1; m.pos >= 0 && j <= n && k < max_out; ++j) {
        out[k++] = j < n ? seq[j] : last;
    }
    *n_out = k;
    *match_len = m.len;
    return m.pos;
}

void specee_drafter_reset_stats(specee_drafter * s) {
    if (s->eagle != nullptr) {
        specee_eagle_reset_stats(s->eagle);
    }
    s->stats = specee_drafter_stats{};
}
