// SpecEE early exit: one target decode per token that stops after the first layer whose predictor
// is confident the token is settled among the EAGLE head's candidates.
//
// How a step runs (graph pieces added by exit-graph.h hooks, control flow by patch 0002):
//   layers 0..L, each followed by its candidates' logits  -> eval callback reads them at scheduled
//   layers, runs the predictor on the host (a few floats come back, nothing else)
//   exit at L: copy h_L into the fill input, jump to the K/V-fill group of layer L+1; the groups of
//   layers L+1..n-1 write their K/V from h_L, so the cache stays complete and seq_rm, context shift
//   and multi-turn chat work as usual. No lm_head runs; the token is the best candidate.
//   no exit: the normal output head runs, then the graph stops before the fill groups.
//
// This file runs on llama.h, ggml and exit-state.h only; the graph hooks and everything else that
// needs llama.cpp's internal headers are in exit-graph.cpp, the predictor maths in exit-predictor.cpp.
#include "eagle-internal.h"
#include "exit-predictor.h"
#include "exit-state.h"
#include "verify.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

using namespace specee;

namespace {

constexpr int ROLE_END = SPECEE_ROLE_END;
constexpr int ROLE_VOCAB = SPECEE_ROLE_VOCAB;

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Each init gets a new generation so a graph built for a freed object is never reused.
uint64_t g_generation = 0;

}  // namespace

struct specee_ee {
    specee_eagle * e = nullptr;  // owned: the head whose top candidates an exit picks among
    llama_context * tgt = nullptr;
    const llama_model * model = nullptr;
    int32_t n_layer = 0, n_embd = 0, n_cand = 4;
    specee_exit_step step;  // what the graph hooks build for this object's steps (exit-graph.cpp)

    // Tokens an exit never emits on its own: end-of-generation tokens (an early exit onto one would
    // end the answer early) and the tokens of the request's stop strings. A step whose exit picks
    // one runs on (later checks may still exit onto another token) and the full lm_head decides.
    std::vector<uint8_t> confirm;
    std::vector<llama_token> stop_tokens;

    std::vector<float> cand_draft_lp;  // the head's log-probabilities of the candidates
    std::vector<exit_mlp> pred;
    bool exits = true;
    int32_t force_layer = -1;
    int32_t shadow_every = 0;
    float temperature = 0.0f;
    bool fill = true;
    std::mt19937 rng{1234};

    // The shortlist: the lm_head rows of the head's draft vocabulary (its d2t), then those of the
    // tokens in the target's cache that it lacks (a name the answer copies from the prompt: on
    // Qwen2.5-Coder-1.5B they took the full arg max's share inside it from 90.0% to 93.2%), up to
    // SHORTLIST_CTX_ROWS, stored compactly in the model's own type. After the last layer they
    // stand in for the full lm_head when a small linear predictor on their logits is sure the full
    // arg max lies among them. The context rows are a function of the cached tokens alone (rebuilt
    // at each prefill), so an answer does not depend on what the process decoded before.
    static constexpr int32_t SHORTLIST_CTX_ROWS = 2048;
    ggml_context * dv_ctx = nullptr;
    ggml_backend_buffer_t dv_buf = nullptr;
    ggml_tensor * w_dv = nullptr;
    ggml_tensor * output = nullptr;       // the lm_head, whose rows the context rows copy
    std::vector<llama_token> dv_ids;      // the shortlist's tokens: n_dv draft-vocabulary rows, then context rows
    int32_t n_dv = 0;
    std::vector<uint8_t> in_shortlist;    // per vocabulary token
    std::vector<uint8_t> row_buf;
    bool use_head = true;  // false: no EAGLE head runs (no candidates); only the shortlist exits
    bool vocab_on = false;
    float vocab_w[SPECEE_EE_N_VOCAB_FEATURES] = {0};
    float vocab_b = 0.0f, vocab_thr = 0.0f;
    std::vector<float> dv_logits;
    bool vocab_exit = false;
    bool confirmed = false;  // this step declined an exit onto a confirm token
    bool recording = false;  // this step records (the vocab head's logits are part of the record)

    // The draft-vocabulary head costs ~1/12 of the lm_head: only graphs that use it have it.
    bool wants_vocab_node() const { return w_dv != nullptr && (vocab_on || recording); }

    // Layers whose candidates' logits a step reads: every layer when recording, else the checked
    // layers and the ones before them (the features compare with the previous layer). Each such
    // node is three small ops, and per-op overhead is what a small model's step is made of.
    std::vector<uint8_t> logits_layers() const {
        std::vector<uint8_t> on(n_layer, recording ? 1 : 0);
        for (int il = 0; il < n_layer && !recording; ++il) {
            const bool checked = force_layer >= 0 ? il == force_layer : exits && pred[il].present;
            if (checked) {
                on[il] = 1;
                if (il > 0) {
                    on[il - 1] = 1;
                }
            }
        }
        return on;
    }

    // per decode
    bool no_exit = false;         // full depth (recording, shadow)
    int32_t exit_layer = -1;
    llama_token exit_token = -1;
    std::vector<float> h_exit;    // host copy of the exit state (stands in for skipped features)
    std::vector<float> l_cur, l_prev;

    specee_ee_stats stats{};
};

namespace {

bool wants_check(const specee_ee * x, int layer) {
    if (x->force_layer >= 0) {
        return layer == x->force_layer;
    }
    return x->exits && x->pred[layer].present;
}

// Predictor verdict for candidate logits l (this layer) and lp (previous layer, may be null).
bool predict_exit(const specee_ee * x, int layer, const float * l, const float * lp) {
    if (x->force_layer >= 0) {
        return layer == x->force_layer;
    }
    const exit_mlp & p = x->pred[layer];
    if (!p.present) {
        return false;
    }
    float f[SPECEE_EE_N_FEATURES];
    exit_features(l, lp, x->cand_draft_lp.data(), x->n_cand, f);
    return p.exits(f, SPECEE_EE_N_FEATURES);
}

// The draft-vocabulary head's verdict on its logits: its arg max token if sure, else -1.
llama_token vocab_exit_token(specee_ee * x, const float * v) {
    const int32_t n_dv = (int32_t) x->dv_ids.size();
    float f[SPECEE_EE_N_VOCAB_FEATURES];
    const int32_t best = vocab_features(v, n_dv, f);
    if (!linear_exits(x->vocab_w, f, SPECEE_EE_N_VOCAB_FEATURES, x->vocab_b, x->vocab_thr)) {
        return -1;
    }
    return x->dv_ids[best];
}

// Rows of the shortlist for tokens not in it yet (the draft vocabulary's at init, then context
// tokens while there is room).
void shortlist_add(specee_ee * x, const llama_token * tokens, int32_t n) {
    if (x->w_dv == nullptr) {
        return;
    }
    const size_t row = x->output->nb[1];
    x->row_buf.resize(row);
    for (int32_t i = 0; i < n && (int64_t) x->dv_ids.size() < x->w_dv->ne[1]; ++i) {
        const llama_token t = tokens[i];
        if (t < 0 || t >= (llama_token) x->in_shortlist.size() || x->in_shortlist[t]) {
            continue;
        }
        ggml_backend_tensor_get(x->output, x->row_buf.data(), (size_t) t * row, row);
        ggml_backend_tensor_set(x->w_dv, x->row_buf.data(), x->dv_ids.size() * row, row);
        x->in_shortlist[t] = 1;
        x->dv_ids.push_back(t);
    }
}

// The context rows of exactly these cached tokens (a prefill's).
void shortlist_reset(specee_ee * x, const llama_token * tokens, int32_t n) {
    for (size_t i = x->n_dv; i < x->dv_ids.size(); ++i) {
        x->in_shortlist[x->dv_ids[i]] = 0;
    }
    if (!x->dv_ids.empty()) {
        x->dv_ids.resize(x->n_dv);
    }
    shortlist_add(x, tokens, n);
}

// The candidate an exit emits: the best one (greedy) or one sampled from their softmax.
llama_token choose_candidate(specee_ee * x, const float * l) {
    const int k = x->n_cand;
    if (x->temperature <= 0.0f) {
        return x->step.cand[std::max_element(l, l + k) - l];
    }
    std::vector<float> s(l, l + k);
    for (float & v : s) {
        v /= x->temperature;
    }
    std::vector<float> p(k);
    softmax(s.data(), p.data(), k);
    std::discrete_distribution<int> d(p.begin(), p.end());
    return x->step.cand[d(x->rng)];
}

bool needs_confirm(specee_ee * x, llama_token t) {
    if (t >= 0 && (size_t) t < x->confirm.size() && x->confirm[t] != 0) {
        x->confirmed = true;
        return true;
    }
    return false;
}

bool eval_callback(ggml_tensor * t, bool ask, void * user_data) {
    auto * x = static_cast<specee_ee *>(user_data);
    if (x == nullptr || x->step.graph == nullptr) {
        return !ask;  // a plain decode: need nothing, never stop
    }
    specee_exit_build & b = *x->step.graph;
    const auto it = b.role.find(t);
    if (it == b.role.end()) {
        return !ask;
    }
    const int role = it->second;
    if (ask) {
        if (role == ROLE_VOCAB) {
            return !x->no_exit && x->vocab_on && x->force_layer < 0;
        }
        return role == ROLE_END || (!x->no_exit && b.can_fill && wants_check(x, role));
    }
    if (role == ROLE_END) {
        specee_exit_jump(x->tgt, nullptr);  // the fill groups are for exits only
        return false;
    }
    if (role == ROLE_VOCAB) {
        const int32_t n_dv = (int32_t) x->dv_ids.size();
        x->dv_logits.resize(n_dv);
        ggml_backend_tensor_get(t, x->dv_logits.data(), 0, sizeof(float) * n_dv);
        const llama_token tok = vocab_exit_token(x, x->dv_logits.data());
        if (tok < 0 || needs_confirm(x, tok)) {
            return true;  // not sure, or an ending: the full lm_head decides
        }
        x->exit_layer = x->n_layer - 1;
        x->vocab_exit = true;
        x->exit_token = tok;
        specee_exit_jump(x->tgt, nullptr);
        return false;
    }
    x->l_cur.resize(x->n_cand);
    ggml_backend_tensor_get(t, x->l_cur.data(), 0, sizeof(float) * x->n_cand);
    const float * lp = nullptr;
    if (role > 0) {
        x->l_prev.resize(x->n_cand);
        ggml_backend_tensor_get(b.logits[role - 1], x->l_prev.data(), 0, sizeof(float) * x->n_cand);
        lp = x->l_prev.data();
    }
    if (!predict_exit(x, role, x->l_cur.data(), lp)) {
        return true;
    }
    const llama_token tok = choose_candidate(x, x->l_cur.data());
    if (needs_confirm(x, tok)) {
        return true;
    }
    x->exit_layer = role;
    x->exit_token = tok;
    x->h_exit.resize(x->n_embd);
    ggml_backend_tensor_get(b.h_out[role], x->h_exit.data(), 0, sizeof(float) * x->n_embd);
    if (role + 1 < x->n_layer && x->fill) {
        ggml_backend_tensor_copy(b.h_out[role], b.h_exit);
        specee_exit_jump(x->tgt, b.fill_first[role + 1]);
    } else {
        specee_exit_jump(x->tgt, nullptr);  // last layer (or no fill): stop here
    }
    return false;
}

// Candidates for the next step from the head's logits, with their log-probabilities under it.
void set_candidates(specee_ee * x, const float * dl, int32_t n_vocab) {
    x->step.cand = top_k(dl, n_vocab, x->n_cand);
    log_probs_at(dl, n_vocab, x->step.cand, x->cand_draft_lp);
}

void set_confirm_tokens(specee_ee * x, const llama_token * tokens, int32_t n) {
    const llama_vocab * vocab = llama_model_get_vocab(x->model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    x->confirm.assign(n_vocab, 0);
    for (llama_token t = 0; t < n_vocab; ++t) {
        x->confirm[t] = llama_vocab_is_eog(vocab, t) ? 1 : 0;
    }
    x->stop_tokens.assign(tokens, tokens + std::max(n, 0));
    for (const llama_token t : x->stop_tokens) {
        if (t >= 0 && t < n_vocab) {
            x->confirm[t] = 1;
        }
    }
}

}  // namespace

// ---- C API ----------------------------------------------------------------------------------

specee_ee * specee_ee_init(llama_context * ctx_tgt, llama_model * head, int32_t n_cand, int32_t n_threads) {
    if (ctx_tgt == nullptr || head == nullptr) {
        specee_error_msg = "early exit needs a target context and an EAGLE head for its candidates";
        return nullptr;
    }
    const llama_model & model = *llama_get_model(ctx_tgt);
    if (!specee_exit_arch_supported(&model)) {
        specee_error_msg = std::string("early exit is not available for the ") + specee_model_arch_name(&model) +
                           " architecture (its graph builder has no exit hooks)";
        return nullptr;
    }
    ggml_tensor * output = specee_model_output(&model);
    if (specee_model_output_has_bias(&model)) {
        specee_error_msg = "early exit does not support models with an output bias";
        return nullptr;
    }
    if (n_cand < 2 || n_cand > 256) {
        specee_error_msg = "n_cand must be between 2 and 256";
        return nullptr;
    }
    if (llama_model_n_layer(&model) > SPECEE_EE_MAX_LAYERS || output == nullptr) {
        specee_error_msg = "this model's layout is not supported by early exit";
        return nullptr;
    }
    // the head drafts one token per step: its candidates are the top n_cand of that one row
    specee_eagle * e = specee_eagle_init(ctx_tgt, head, 1, n_threads);
    if (e == nullptr) {
        return nullptr;
    }
    auto * x = new specee_ee();
    x->e = e;
    x->tgt = ctx_tgt;
    x->model = &model;
    x->n_layer = llama_model_n_layer(&model);
    x->n_embd = llama_model_n_embd(&model);
    x->n_cand = n_cand;
    x->step.generation = ++g_generation;
    x->step.model = &model;
    x->step.n_cand = n_cand;
    x->pred.resize(x->n_layer);
    ggml_tensor * d2t_map = specee_model_d2t(llama_get_model(e->dft));
    if (d2t_map != nullptr && output->ne[0] == x->n_embd) {
        const int64_t n_dv = d2t_map->ne[0];
        std::vector<int64_t> d2t(n_dv);
        ggml_backend_tensor_get(d2t_map, d2t.data(), 0, sizeof(int64_t) * n_dv);
        ggml_init_params ip = {ggml_tensor_overhead() * 2, nullptr, true};
        x->dv_ctx = ggml_init(ip);
        x->w_dv = ggml_new_tensor_2d(x->dv_ctx, output->type, x->n_embd, n_dv + specee_ee::SHORTLIST_CTX_ROWS);
        ggml_set_name(x->w_dv, "specee_draft_vocab_head");
        x->dv_buf = ggml_backend_alloc_ctx_tensors_from_buft(
            x->dv_ctx, ggml_backend_dev_buffer_type(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)));  // host memory; no link to ggml-cpu (a loadable module)
        ggml_backend_buffer_clear(x->dv_buf, 0);  // unused context rows: logits 0, never read
        x->output = output;
        x->in_shortlist.assign(llama_vocab_n_tokens(llama_model_get_vocab(&model)), 0);
        for (int64_t i = 0; i < n_dv; ++i) {
            const llama_token t = (llama_token) d2t[i];
            if (t >= 0 && t < (llama_token) x->in_shortlist.size() && !x->in_shortlist[t]) {
                shortlist_add(x, &t, 1);
            }
        }
        x->n_dv = (int32_t) x->dv_ids.size();
    }
    x->step.cand.assign(n_cand, 0);
    x->cand_draft_lp.assign(n_cand, 0.0f);
    set_confirm_tokens(x, nullptr, 0);
    return x;
}

void specee_ee_free(specee_ee * x) {
    if (x == nullptr) {
        return;
    }
    if (x->dv_buf) {
        ggml_backend_buffer_free(x->dv_buf);
    }
    if (x->dv_ctx) {
        ggml_free(x->dv_ctx);
    }
    specee_eagle_free(x->e);
    delete x;
}

llama_context * specee_ee_draft_context(const specee_ee * x) {
    return specee_eagle_draft_context(x->e);
}

void specee_ee_set_threads(specee_ee * x, int32_t n_threads) {
    if (x != nullptr) {
        specee_eagle_set_threads(x->e, n_threads);
    }
}

int32_t specee_ee_set_predictor(specee_ee * x, int32_t layer, int32_t n_hidden, const float * w1, const float * b1,
                                const float * w2, float b2, float threshold) {
    if (layer < 0 || layer >= x->n_layer || n_hidden < 1 || !w1 || !b1 || !w2) {
        specee_error_msg = "bad predictor (layer out of range or missing weights)";
        return -1;
    }
    const int nf = SPECEE_EE_N_FEATURES;
    exit_mlp & p = x->pred[layer];
    p.present = true;
    p.n_hidden = n_hidden;
    p.w1.assign(w1, w1 + (size_t) n_hidden * nf);
    p.b1.assign(b1, b1 + n_hidden);
    p.w2.assign(w2, w2 + n_hidden);
    p.b2 = b2;
    p.threshold = threshold;
    return 0;
}

void specee_ee_clear_predictors(specee_ee * x) {
    for (auto & p : x->pred) {
        p = exit_mlp{};
    }
}

void specee_ee_configure(specee_ee * x, bool exits, int32_t force_layer, int32_t shadow_every, float temperature,
                         uint32_t seed) {
    x->exits = exits;
    x->force_layer = force_layer < x->n_layer ? force_layer : -1;
    x->shadow_every = std::max(0, shadow_every);
    x->temperature = temperature;
    x->rng.seed(seed);
}

void specee_exit_features(const float * l, const float * lp, const float * draft_lp, int32_t n_cand, float * out) {
    specee::exit_features(l, lp, draft_lp, n_cand, out);
}

int32_t specee_ee_set_vocab_predictor(specee_ee * x, const float * w, float b, float threshold) {
    if (x->w_dv == nullptr) {
        specee_error_msg = "the EAGLE head has no draft vocabulary (d2t)";
        return -1;
    }
    if (w == nullptr) {
        x->vocab_on = false;
        return 0;
    }
    std::copy(w, w + SPECEE_EE_N_VOCAB_FEATURES, x->vocab_w);
    x->vocab_b = b;
    x->vocab_thr = threshold;
    x->vocab_on = true;
    return 0;
}

void specee_ee_set_stop_tokens(specee_ee * x, const llama_token * tokens, int32_t n_tokens) {
    set_confirm_tokens(x, tokens, n_tokens);
}

void specee_ee_set_fill(specee_ee * x, bool fill) {
    x->fill = fill;
}

void specee_ee_set_use_head(specee_ee * x, bool on) {
    x->use_head = on;
}

namespace {

// The prompt on the target alone (no head to feed): as specee_eagle_prefill without its head rows.
llama_token prefill_target(specee_ee * x, const llama_token * tokens, int32_t n_tokens, int32_t n_keep, llama_sampler * smpl) {
    specee_eagle * e = x->e;
    if (n_tokens < 1 || n_tokens >= (int32_t) llama_n_ctx(x->tgt)) {
        specee_error_msg = "the prompt is empty or does not fit in the context";
        return -1;
    }
    const int32_t start = std::max(0, std::min(n_keep, n_tokens) - 1);  // re-decode one token for its logits
    llama_memory_seq_rm(llama_get_memory(x->tgt), 0, start, -1);
    for (int32_t c0 = start; c0 < n_tokens; c0 += e->n_batch) {
        const int32_t n = std::min(e->n_batch, n_tokens - c0);
        batch_guard b(llama_batch_init(n, 0, 1));
        std::copy(tokens + c0, tokens + c0 + n, b.b.token);
        set_rows(b.b, n, c0, false);
        b.b.logits[n - 1] = c0 + n == n_tokens;
        if (llama_decode(x->tgt, b.b) != 0) {
            specee_error_msg = "target decode failed during the prompt";
            return -1;
        }
    }
    e->n_past = n_tokens;
    e->id_last = specee_pick(smpl, x->tgt, -1);
    return e->id_last;
}

}  // namespace

llama_token specee_ee_prefill(specee_ee * x, const llama_token * tokens, int32_t n_tokens, int32_t n_keep,
                              llama_sampler * smpl) {
    shortlist_reset(x, tokens, std::max(n_tokens, 0));
    if (!x->use_head) {
        return prefill_target(x, tokens, n_tokens, n_keep, smpl);
    }
    const llama_token t = specee_eagle_prefill(x->e, tokens, n_tokens, n_keep, smpl);
    if (t >= 0) {
        set_candidates(x, llama_get_logits_ith(x->e->dft, 0), x->e->n_vocab);
    }
    return t;
}

namespace {

// Decode id_last at n_past; exits allowed unless x->no_exit.
bool decode_target(specee_ee * x) {
    specee_eagle * e = x->e;
    batch_guard b(llama_batch_init(1, 0, 1));
    b.b.token[0] = e->id_last;
    set_rows(b.b, 1, e->n_past, true);
    x->exit_layer = -1;
    x->vocab_exit = false;
    x->confirmed = false;
    // what the graph hooks build for this step (exit-graph.cpp)
    x->step.with_logits = x->logits_layers();
    x->step.w_dv = x->wants_vocab_node() ? x->w_dv : nullptr;
    if (specee_exit_decode(x->tgt, b.b, &x->step, eval_callback, x) != 0) {
        specee_error_msg = "target decode failed (early-exit step)";
        return false;
    }
    return true;
}

// The exit a full-depth decode's recorded logits imply, as the callback would have taken it.
int32_t replay_exit(specee_ee * x, llama_token * token) {
    const specee_exit_build & b = *x->step.graph;
    std::vector<float> l(x->n_cand), lp(x->n_cand);
    for (int il = 0; il < x->n_layer; ++il) {
        if (!b.can_fill || !wants_check(x, il)) {
            continue;
        }
        ggml_backend_tensor_get(b.logits[il], l.data(), 0, sizeof(float) * x->n_cand);
        if (il > 0) {
            ggml_backend_tensor_get(b.logits[il - 1], lp.data(), 0, sizeof(float) * x->n_cand);
        }
        const llama_token tok = x->step.cand[std::max_element(l.begin(), l.end()) - l.begin()];
        if (predict_exit(x, il, l.data(), il > 0 ? lp.data() : nullptr) && !needs_confirm(x, tok)) {
            *token = tok;
            return il;
        }
    }
    if (x->vocab_on && b.vocab_logits != nullptr && x->force_layer < 0) {
        const int32_t n_dv = (int32_t) x->dv_ids.size();
        x->dv_logits.resize(n_dv);
        ggml_backend_tensor_get(b.vocab_logits, x->dv_logits.data(), 0, sizeof(float) * n_dv);
        const llama_token tok = vocab_exit_token(x, x->dv_logits.data());
        if (tok >= 0 && !needs_confirm(x, tok)) {
            *token = tok;
            return x->n_layer - 1;
        }
    }
    return -1;
}

}  // namespace

int32_t specee_ee_step(specee_ee * x, llama_sampler * smpl, llama_token * out, float * record, llama_token * cands,
                       specee_ee_stats * stats) {
    specee_eagle * e = x->e;
    if (e->n_past >= (int32_t) llama_n_ctx(x->tgt)) {
        return 0;  // context full
    }
    const double t0 = now_ms();
    if (cands) {
        std::copy(x->step.cand.begin(), x->step.cand.end(), cands);
    }
    const bool shadow = record == nullptr && x->shadow_every > 0 && x->stats.n_steps % x->shadow_every == 0;
    x->no_exit = record != nullptr || shadow;
    x->recording = record != nullptr;
    shortlist_add(x, &e->id_last, 1);  // the token this step decodes enters the cache
    if (!decode_target(x)) {
        return -1;
    }
    if (x->step.graph == nullptr) {
        specee_error_msg = "the early-exit graph was not built (unsupported model?)";
        return -1;
    }
    if (record) {
        for (int il = 0; il < x->n_layer; ++il) {
            ggml_backend_tensor_get(x->step.graph->logits[il], record + (size_t) il * x->n_cand, 0, sizeof(float) * x->n_cand);
        }
        std::copy(x->cand_draft_lp.begin(), x->cand_draft_lp.end(), record + (size_t) x->n_layer * x->n_cand);
        float * vrow = record + (size_t) (x->n_layer + 1) * x->n_cand;
        std::fill(vrow, vrow + x->n_cand, 0.0f);
        if (x->step.graph->vocab_logits != nullptr && x->n_cand >= SPECEE_EE_N_VOCAB_FEATURES + 1) {
            const int32_t n_dv = (int32_t) x->dv_ids.size();
            x->dv_logits.resize(n_dv);
            ggml_backend_tensor_get(x->step.graph->vocab_logits, x->dv_logits.data(), 0, sizeof(float) * n_dv);
            const int32_t best = vocab_features(x->dv_logits.data(), n_dv, vrow);
            vrow[SPECEE_EE_N_VOCAB_FEATURES] = (float) x->dv_ids[best];
        }
    }
    if (shadow) {
        llama_token t_exit = -1;
        const int32_t layer = replay_exit(x, &t_exit);
        x->stats.n_shadow += 1;
        if (layer >= 0) {
            const llama_token t_full = argmax(llama_get_logits_ith(x->tgt, 0), e->n_vocab);
            x->stats.n_shadow_exits += 1;
            x->stats.n_shadow_correct += t_exit == t_full ? 1 : 0;
            // Decode again the way a plain step would, so shadowing never changes the text.
            llama_memory_seq_rm(llama_get_memory(x->tgt), 0, e->n_past, -1);
            x->no_exit = false;
            if (!decode_target(x)) {
                return -1;
            }
        }
    }
    const double t1 = now_ms();

    llama_token token;
    if (x->exit_layer >= 0) {
        token = x->exit_token;
        llama_sampler_accept(smpl, token);
    } else {
        token = llama_sampler_sample(smpl, x->tgt, 0);
    }
    const bool hit = x->use_head && std::find(x->step.cand.begin(), x->step.cand.end(), token) != x->step.cand.end();

    // Next candidates: the head's row for (token, features of this step).
    if (x->use_head) {
        if (!encode_features(e, 0, 1, x->exit_layer, x->h_exit.data())) {
            return -1;
        }
        llama_memory_seq_rm(llama_get_memory(e->dft), 0, e->n_past, -1);
        if (!draft_decode(e, &token, e->g.data(), 1, e->n_past, true)) {
            return -1;
        }
        const float * dl = llama_get_logits_ith(e->dft, 0);
        set_candidates(x, dl, e->n_vocab);
        e->first_draft = x->step.cand[0];
        keep_draft_state(e, 0);
    }
    e->n_past += 1;
    e->id_last = token;
    const double t2 = now_ms();

    specee_ee_stats & s = x->stats;
    s.n_steps += 1;
    s.n_exits += x->exit_layer >= 0 ? 1 : 0;
    s.n_vocab_exits += x->vocab_exit ? 1 : 0;
    s.n_cand_hits += hit ? 1 : 0;
    s.n_confirmed += x->confirmed ? 1 : 0;
    s.n_layers_run += x->exit_layer >= 0 ? x->exit_layer + 1 : x->n_layer;  // a vocab exit ran all
    s.exit_hist[x->exit_layer >= 0 ? x->exit_layer : x->n_layer] += 1;
    s.t_target_ms += t1 - t0;
    s.t_draft_ms += t2 - t1;
    *out = token;
    if (stats) {
        *stats = s;
    }
    return 1;
}

void specee_ee_reset_stats(specee_ee * x) {
    x->stats = specee_ee_stats{};
}

int32_t specee_ee_verify(specee_ee * x, llama_sampler * smpl, const llama_token * draft, int32_t k, llama_token * out) {
    specee_eagle * e = x->e;
    const int32_t n = k + 1;
    if (k < 1 || e->n_past + n > (int32_t) llama_n_ctx(x->tgt)) {
        specee_error_msg = "a verify batch needs 1..room drafts";
        return -1;
    }
    // 1. [id_last, d1..dk] at full depth in one batch: a plain decode (the exit hooks are idle
    //    without a step), every row's logits from the full lm_head, so every emitted token is exact
    {
        batch_guard b(llama_batch_init(n, 0, 1));
        b.b.token[0] = e->id_last;
        std::copy(draft, draft + k, b.b.token + 1);
        set_rows(b.b, n, e->n_past, true);
        if (llama_decode(x->tgt, b.b) != 0) {
            specee_error_msg = "target decode failed while verifying";
            return -1;
        }
    }
    const int32_t n_out = specee_verify_drafts(smpl, x->tgt, draft, k, out);
    const int32_t accepted = n_out - 1;
    // 2. keep id_last and the accepted drafts; the head reads their rows' features, as after an
    //    EAGLE verify (eagle.cpp), and its last row gives the next step's candidates
    const int32_t base = e->n_past;
    llama_memory_seq_rm(llama_get_memory(x->tgt), 0, base + n_out, -1);
    shortlist_add(x, &e->id_last, 1);  // the kept tokens enter the cache
    shortlist_add(x, draft, accepted);
    if (x->use_head) {
        if (!encode_features(e, 0, n_out, -1, nullptr)) {
            return -1;
        }
        llama_memory_seq_rm(llama_get_memory(e->dft), 0, base, -1);
        std::vector<llama_token> toks(draft, draft + accepted);
        toks.push_back(out[accepted]);
        if (!draft_decode(e, toks.data(), e->g.data(), n_out, base, true)) {
            return -1;
        }
        set_candidates(x, llama_get_logits_ith(e->dft, accepted), e->n_vocab);
        e->first_draft = x->step.cand[0];
        keep_draft_state(e, accepted);
    }
    e->n_past = base + n_out;
    e->id_last = out[accepted];
    return n_out;
}

int32_t specee_ee_n_past(const specee_ee * x) {
    return x->e->n_past;
}

void specee_ee_get_stats(const specee_ee * x, specee_ee_stats * stats) {
    *stats = x->stats;
}
