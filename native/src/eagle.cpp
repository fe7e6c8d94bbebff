// EAGLE-3 speculative decoding driven from C++: draft a chain with the head, verify it in one
// target batch, keep the longest prefix the target itself would have produced, roll back the rest.
//
// Lossless for any sampler: the draft only proposes; every emitted token is sampled from the
// target's own logits at its position (greedy: argmax), and a draft token is kept only if it equals
// that sample. With batch-invariant CPU kernels (GGML_LLAMAFILE=OFF, see native/build.py) greedy
// output is bit-identical to one-token-at-a-time decoding.
//
// Draft KV convention (llama.cpp eagle3): the row at position P holds (token[P+1], g[P]), where g is
// the head's fc() of the target's layer inputs at P. The newest row ("seed") pairs the last sampled
// token with the g of the last position the target has decoded; its output is the first draft.
#include "eagle-internal.h"
#include "verify.h"

#include "../llama-ext.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

thread_local std::string specee_error_msg;  // declared in eagle-internal.h

using namespace specee;

namespace {

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

float specee::top_prob(const float * v, int32_t n, llama_token best) {
    const float m = v[best];
    double sum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
        if (v[i] > m - 20.0f) {
            sum += std::exp((double) (v[i] - m));
        }
    }
    return (float) (1.0 / sum);
}

const char * specee_last_error(void) {
    return specee_error_msg.c_str();
}

specee_eagle * specee_eagle_init(llama_context * ctx_tgt, llama_model * draft, int32_t n_draft, int32_t n_threads) {
    const llama_model * tmodel = llama_get_model(ctx_tgt);
    if (llama_model_target_layer_ids_n(draft) != 3) {
        specee_error_msg = "the draft model is not an EAGLE-3 head (it needs exactly 3 target layers)";
        return nullptr;
    }
    auto * e = new specee_eagle();
    e->tgt = ctx_tgt;
    e->n_embd_t = llama_model_n_embd(tmodel);
    e->n_embd_d = llama_model_n_embd(draft);
    e->n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(tmodel));
    e->n_batch = (int32_t) llama_n_batch(ctx_tgt);
    e->n_draft = std::max(1, n_draft);
    const int32_t * ids = llama_model_target_layer_ids(draft);
    for (int i = 0; i < 3; ++i) {
        e->layers[i] = ids[i];
        if (ids[i] < 0 || ids[i] >= llama_model_n_layer(tmodel)) {
            specee_error_msg = "the head's target layers do not exist in this model";
            delete e;
            return nullptr;
        }
    }
    if (llama_vocab_n_tokens(llama_model_get_vocab(draft)) != e->n_vocab) {
        specee_error_msg = "the head's vocabulary does not match the target model's";
        delete e;
        return nullptr;
    }

    llama_context_params cp = specee_draft_context_params(ctx_tgt, n_threads);
    cp.ctx_other = ctx_tgt;  // the head borrows the target's token embedding
    e->dft = llama_init_from_model(draft, cp);
    if (e->dft == nullptr) {
        specee_error_msg = "could not create the draft context";
        delete e;
        return nullptr;
    }
    llama_set_embeddings_nextn(e->dft, true, true);
    for (int32_t lid : e->layers) {
        specee_capture_layer_input(ctx_tgt, lid, true);
    }
    e->first_h.resize(e->n_embd_d);
    return e;
}

void specee_eagle_set_threads(specee_eagle * e, int32_t n_threads) {
    if (e != nullptr && e->dft != nullptr) {
        llama_set_n_threads(e->dft, n_threads, n_threads);
    }
}

void specee_eagle_set_gated(specee_eagle * e, bool gated) {
    if (e != nullptr) {
        e->gated = gated;
    }
}

void specee_eagle_gate_info(const specee_eagle * e, specee_gate_info * info) {
    e->gate.info(info);
}

void specee_eagle_free(specee_eagle * e) {
    if (e == nullptr) {
        return;
    }
    if (e->dft) {
        llama_free(e->dft);
    }
    delete e;
}

// g rows for the last target decode's rows [r0, r0+n), through the head's encoder (fc).
bool specee::encode_features(specee_eagle * e, int32_t r0, int32_t n, int32_t exit_layer, const float * h_exit) {
    const int32_t w = 3 * e->n_embd_t;
    e->feats.resize((size_t) n * w);
    for (int j = 0; j < 3; ++j) {
        const float * src = specee_layer_input(e->tgt, e->layers[j]);
        if (src == nullptr) {
            specee_error_msg = "target feature capture is off";
            return false;
        }
        // After an early exit at layer L, layer inputs above L+1 were never computed: the exit
        // state stands in for them, as it stood in for the skipped layers' K/V.
        const bool skipped = exit_layer >= 0 && e->layers[j] > exit_layer + 1;
        for (int32_t r = 0; r < n; ++r) {
            const float * row = skipped ? h_exit : src + (size_t) (r0 + r) * e->n_embd_t;
            std::memcpy(&e->feats[(size_t) r * w + (size_t) j * e->n_embd_t], row, sizeof(float) * e->n_embd_t);
        }
    }
    batch_guard b(llama_batch_init(n, w, 1));
    std::memcpy(b.b.embd, e->feats.data(), sizeof(float) * e->feats.size());
    // The encoder stores nothing, but its batch still passes the KV position-continuity check.
    set_rows(b.b, n, llama_memory_seq_pos_max(llama_get_memory(e->dft), 0) + 1, true);
    if (llama_encode(e->dft, b.b) != 0) {
        specee_error_msg = "draft encoder failed";
        return false;
    }
    const float * out = llama_get_embeddings_nextn(e->dft);
    e->g.assign(out, out + (size_t) n * e->n_embd_d);
    return true;
}

// Decode draft rows (tokens[i], hidden rows[i]) at pos0+i; outputs for all rows when `outputs`
// (the eagle3 graph returns the first n_outputs rows, so a lone last-row output would be wrong).
bool specee::draft_decode(specee_eagle * e, const llama_token * tokens, const float * hidden, int32_t n, llama_pos pos0, bool outputs) {
    batch_guard b(llama_batch_init(n, e->n_embd_d, 1));
    b.b.token = (llama_token *) malloc(sizeof(llama_token) * n);  // freed by llama_batch_free
    std::memcpy(b.b.token, tokens, sizeof(llama_token) * n);
    std::memcpy(b.b.embd, hidden, sizeof(float) * (size_t) n * e->n_embd_d);
    set_rows(b.b, n, pos0, outputs);
    if (llama_decode(e->dft, b.b) != 0) {
        specee_error_msg = "draft decode failed";
        return false;
    }
    return true;
}

void specee::keep_draft_state(specee_eagle * e, int32_t row) {
    const float * h = llama_get_embeddings_nextn_ith(e->dft, row);
    std::copy(h, h + e->n_embd_d, e->first_h.begin());
}

// The seed row (id_last, g of the newest target position) at that position: its output is the
// first draft token of the next step.
static bool seed(specee_eagle * e, const float * g_last) {
    llama_memory_seq_rm(llama_get_memory(e->dft), 0, e->n_past - 1, -1);
    if (!draft_decode(e, &e->id_last, g_last, 1, e->n_past - 1, true)) {
        return false;
    }
    const float * logits = llama_get_logits_ith(e->dft, 0);
    e->first_draft = argmax(logits, e->n_vocab);
    e->first_p = e->gated ? top_prob(logits, e->n_vocab, e->first_draft) : 0.0f;
    const float * h = llama_get_embeddings_nextn_ith(e->dft, 0);
    std::copy(h, h + e->n_embd_d, e->first_h.begin());
    return true;
}

llama_token specee_eagle_prefill(specee_eagle * e, const llama_token * tokens, int32_t n_tokens, int32_t n_keep, llama_sampler * smpl) {
    if (n_tokens < 1 || n_tokens >= (int32_t) llama_n_ctx(e->tgt)) {
        specee_error_msg = "the prompt is empty or does not fit in the context";
        return -1;
    }
    // Re-decode at least the last kept token: its features seed the head's first new row.
    const int32_t start = std::max(0, std::min(n_keep, n_tokens) - 1);
    llama_memory_seq_rm(llama_get_memory(e->tgt), 0, start, -1);
    // Draft rows P < start pair tokens and features of the kept prefix only: still valid.
    llama_memory_seq_rm(llama_get_memory(e->dft), 0, start, -1);
    std::vector<float> g_last(e->n_embd_d);
    llama_token sampled = -1;
    for (int32_t c0 = start; c0 < n_tokens; c0 += e->n_batch) {
        const int32_t n = std::min(e->n_batch, n_tokens - c0);
        const bool last = c0 + n == n_tokens;
        batch_guard b(llama_batch_init(n, 0, 1));
        std::copy(tokens + c0, tokens + c0 + n, b.b.token);
        set_rows(b.b, n, c0, false);
        b.b.logits[n - 1] = last;  // the target's lm_head only for the prompt's last token
        if (llama_decode(e->tgt, b.b) != 0) {
            specee_error_msg = "target decode failed during the prompt";
            return -1;
        }
        if (!encode_features(e, 0, n, -1, nullptr)) {
            return -1;
        }
        // rows (tokens[P+1], g[P]) for every P of this chunk that has a next token
        const int32_t rows = last ? n - 1 : n;
        if (rows > 0) {
            if (!draft_decode(e, tokens + c0 + 1, e->g.data(), rows, c0, false)) {
                return -1;
            }
        }
        if (last) {
            std::copy(e->g.end() - e->n_embd_d, e->g.end(), g_last.begin());
            sampled = specee_pick(smpl, e->tgt, n - 1);
        }
    }
    e->n_past = n_tokens;
    e->id_last = sampled;
    if (!seed(e, g_last.data())) {
        return -1;
    }
    return sampled;
}

int32_t specee_eagle_step(specee_eagle * e, llama_sampler * smpl, llama_token * out, int32_t max_out, specee_drafter_stats * stats) {
    const double t0 = now_ms();
    const int32_t n_ctx = (int32_t) llama_n_ctx(e->tgt);
    const int32_t room = n_ctx - e->n_past - 1;  // verify rows beyond id_last that still fit
    if (room < 0) {
        return 0;  // context full
    }
    const int32_t k = std::max(0, std::min({e->n_draft, room, max_out - 1}));

    // 1. draft a chain: the seed row already proposed the first token. Gated, the chain grows only
    //    while another draft could still pay and is cut to the length that pays best (draft-gate.h).
    std::vector<llama_token> draft;
    std::vector<float> probs;  // the head's probability of each draft
    std::vector<double> q;     // the chance that drafts 1..j are all confirmed
    std::vector<float> h = e->first_h;
    if (k > 0) {
        draft.push_back(e->first_draft);
        probs.push_back(e->first_p);
        q.push_back(e->gate.confirm_prob(1, e->first_p));
    }
    while ((int32_t) draft.size() < k && (!e->gated || e->gate.worth_more(q, k))) {
        const double td = now_ms();
        const int32_t i = (int32_t) draft.size();
        if (!draft_decode(e, &draft.back(), h.data(), 1, e->n_past + i - 1, true)) {
            return -1;
        }
        const float * logits = llama_get_logits_ith(e->dft, 0);
        const llama_token t = argmax(logits, e->n_vocab);
        const float p = e->gated ? top_prob(logits, e->n_vocab, t) : 0.0f;
        draft.push_back(t);
        probs.push_back(p);
        q.push_back(q.back() * e->gate.confirm_prob(i + 1, p));
        const float * hp = llama_get_embeddings_nextn_ith(e->dft, 0);
        std::copy(hp, hp + e->n_embd_d, h.begin());
        e->gate.note_draft(now_ms() - td);
    }
    const std::vector<llama_token> computed = draft;
    if (e->gated) {
        draft.resize(e->gate.best(q));
    }
    const double t1 = now_ms();

    // 2. verify [id_last, d1..dk] in one target batch
    const int32_t n = 1 + (int32_t) draft.size();
    {
        batch_guard b(llama_batch_init(n, 0, 1));
        b.b.token[0] = e->id_last;
        std::copy(draft.begin(), draft.end(), b.b.token + 1);
        set_rows(b.b, n, e->n_past, true);
        if (llama_decode(e->tgt, b.b) != 0) {
            specee_error_msg = "target decode failed while verifying";
            return -1;
        }
    }
    const int32_t n_out = specee_verify_drafts(smpl, e->tgt, draft.data(), n - 1, out);
    const int32_t accepted = n_out - 1;
    const double t2 = now_ms();
    e->gate.note_verify(n, t2 - t1);
    // what the target said of every computed draft it reached, verified or not: the first one it
    // rejected ends the chain's evidence (the drafts after it fed on a wrong token). A fixed chain
    // runs none of the gate's work.
    for (int32_t i = 0; e->gated && i < (int32_t) computed.size() && i < n_out; ++i) {
        const bool confirmed = out[i] == computed[i];
        e->gate.observe(i + 1, probs[i], confirmed);
        if (!confirmed) {
            break;
        }
    }

    // 3. keep the target KV of id_last and the accepted drafts; the last sample becomes id_last
    const int32_t base = e->n_past;
    llama_memory_seq_rm(llama_get_memory(e->tgt), 0, base + accepted + 1, -1);
    if (!encode_features(e, 0, accepted + 1, -1, nullptr)) {
        return -1;
    }
    // draft rows for the accepted tokens, then the new seed, in one decode
    llama_memory_seq_rm(llama_get_memory(e->dft), 0, base, -1);
    std::vector<llama_token> toks(draft.begin(), draft.begin() + accepted);
    toks.push_back(out[n_out - 1]);
    if (!draft_decode(e, toks.data(), e->g.data(), accepted + 1, base, true)) {
        return -1;
    }
    e->n_past = base + accepted + 1;
    e->id_last = out[n_out - 1];
    const float * logits = llama_get_logits_ith(e->dft, accepted);
    e->first_draft = argmax(logits, e->n_vocab);
    e->first_p = e->gated ? top_prob(logits, e->n_vocab, e->first_draft) : 0.0f;
    const float * hp = llama_get_embeddings_nextn_ith(e->dft, accepted);
    std::copy(hp, hp + e->n_embd_d, e->first_h.begin());
    const double t3 = now_ms();
    e->gate.note_step(t3 - t2);

    e->stats.n_steps += 1;
    e->stats.n_drafted += (int32_t) draft.size();
    e->stats.n_accepted += accepted;
    e->stats.n_emitted += n_out;
    e->stats.t_draft_ms += t1 - t0;
    e->stats.t_verify_ms += t2 - t1;
    e->stats.t_feed_ms += t3 - t2;
    if (stats) {
        *stats = e->stats;
    }
    return n_out;
}

llama_context * specee_eagle_draft_context(const specee_eagle * e) {
    return e->dft;
}

int32_t specee_eagle_n_past(const specee_eagle * e) {
    return e->n_past;
}

void specee_eagle_reset_stats(specee_eagle * e) {
    e->stats = specee_drafter_stats{};
}
