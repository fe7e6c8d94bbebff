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
#include "eagle-internal.h"
#include "exit-graph.h"

#include "../llama-context.h"
#include "../llama-kv-cache.h"
#include "../llama-model.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <unordered_map>

using namespace specee;

namespace {

constexpr int ROLE_END = -1;
constexpr int ROLE_VOCAB = -2;  // the draft-vocabulary head after the last layer

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct predictor {
    bool present = false;
    int32_t n_hidden = 0;
    std::vector<float> w1, b1, w2;
    float b2 = 0.0f;
    float threshold = 0.0f;
};

// Each init gets a new generation so a graph built for a freed object is never reused.
uint64_t g_generation = 0;

}  // namespace

// The graph tensors of one built early-exit graph (owned by llama.cpp's graph result).
struct specee_exit_build {
    specee_ee * owner = nullptr;
    uint64_t generation = 0;
    const llama_model * model = nullptr;
    ggml_tensor * cand_ids = nullptr;
    ggml_tensor * cand_rows = nullptr;
    ggml_tensor * h_exit = nullptr;
    ggml_tensor * t_end = nullptr;
    bool can_fill = false;
    bool with_vocab = false;  // built with the draft-vocabulary head
    std::vector<uint8_t> with_logits;  // layers given candidate-logits nodes (specee_ee::logits_layers)
    ggml_tensor * vocab_logits = nullptr;  // [n_dv] after the last layer, when the head has a d2t
    std::vector<ggml_tensor *> logits, h_out, fill_first;
    std::unordered_map<const ggml_tensor *, int> role;  // layer of a logits node, or ROLE_END
};

struct specee_ee {
    specee_eagle * e = nullptr;
    llama_context * tgt = nullptr;
    const llama_model * model = nullptr;
    int32_t n_layer = 0, n_embd = 0, n_cand = 4;
    uint64_t generation = 0;

    // Tokens an exit never emits on its own: end-of-generation tokens (an early exit onto one would
    // end the answer early) and the tokens of the request's stop strings. A step whose exit picks
    // one runs on (later checks may still exit onto another token) and the full lm_head decides.
    std::vector<uint8_t> confirm;
    std::vector<llama_token> stop_tokens;

    std::vector<llama_token> cand;
    std::vector<float> cand_draft_lp;  // the head's log-probabilities of the candidates
    std::vector<predictor> pred;
    bool exits = true;
    int32_t force_layer = -1;
    int32_t shadow_every = 0;
    float temperature = 0.0f;
    bool fill = true;
    std::mt19937 rng{1234};

    specee_exit_build * graph = nullptr;  // the graph built for this object, if any

    // The lm_head rows of the head's draft vocabulary (its d2t), stored compactly in the model's
    // own type: after the last layer they stand in for the full lm_head when a small linear
    // predictor on their logits is sure the full argmax lies among them.
    ggml_context * dv_ctx = nullptr;
    ggml_backend_buffer_t dv_buf = nullptr;
    ggml_tensor * w_dv = nullptr;
    std::vector<llama_token> dv_ids;
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

thread_local specee_ee * t_active = nullptr;  // the early-exit step decoding on this thread

class specee_exit_input : public llm_graph_input_i {
public:
    specee_exit_build b;

    void set_input(const llama_ubatch * /*ubatch*/) override {
        if (b.owner != nullptr && b.cand_ids != nullptr) {
            b.owner->graph = &b;  // this graph (new or reused) is the one about to run
            if (b.cand_ids->buffer != nullptr) {  // unallocated when no layer reads candidates
                ggml_backend_tensor_set(b.cand_ids, b.owner->cand.data(), 0, ggml_nbytes(b.cand_ids));
            }
        }
    }

    // A graph with exit nodes serves only its own steps; one without serves only plain decodes.
    bool can_reuse(const llm_graph_params & /*params*/) override {
        if (b.owner == nullptr) {
            return t_active == nullptr;
        }
        return t_active == b.owner && t_active->generation == b.generation && b.with_vocab == t_active->wants_vocab_node() &&
               b.with_logits == t_active->logits_layers();
    }
};

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

bool wants_check(const specee_ee * x, int layer) {
    if (x->force_layer >= 0) {
        return layer == x->force_layer;
    }
    return x->exits && x->pred[layer].present;
}

// The predictor's 14 features from the candidates' logits at this layer (l) and the previous one
// (lp, null at layer 0): top-4 logits, their softmax probabilities over all candidates, the top
// token's probability change and whether it was already on top, the top-1/top-2 margin, how
// much the top logit grew, and the head's log-probability of all candidates and of its first.
// engine/train/exits.py:features mirrors this exactly.
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

// Features of the draft-vocabulary logits: top logit, its margin over the second, and
// log-sum-exp minus top (how much mass the rest holds). Returns the arg max.
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

// Predictor verdict for candidate logits l (this layer) and lp (previous layer, may be null).
bool predict_exit(const specee_ee * x, int layer, const float * l, const float * lp) {
    if (x->force_layer >= 0) {
        return layer == x->force_layer;
    }
    const predictor & p = x->pred[layer];
    if (!p.present) {
        return false;
    }
    float f[SPECEE_EE_N_FEATURES];
    exit_features(l, lp, x->cand_draft_lp.data(), x->n_cand, f);
    float z = p.b2;
    for (int h = 0; h < p.n_hidden; ++h) {
        const float * w = p.w1.data() + (size_t) h * SPECEE_EE_N_FEATURES;
        float a = p.b1[h];
        for (int i = 0; i < SPECEE_EE_N_FEATURES; ++i) {
            a += w[i] * f[i];
        }
        if (a > 0.0f) {
            z += p.w2[h] * a;
        }
    }
    return z > p.threshold;
}

// The candidate an exit emits: the best one (greedy) or one sampled from their softmax.
llama_token choose_candidate(specee_ee * x, const float * l) {
    const int k = x->n_cand;
    if (x->temperature <= 0.0f) {
        return x->cand[std::max_element(l, l + k) - l];
    }
    std::vector<float> s(l, l + k);
    for (float & v : s) {
        v /= x->temperature;
    }
    std::vector<float> p(k);
    softmax(s.data(), p.data(), k);
    std::discrete_distribution<int> d(p.begin(), p.end());
    return x->cand[d(x->rng)];
}

bool needs_confirm(specee_ee * x, llama_token t) {
    if (t >= 0 && (size_t) t < x->confirm.size() && x->confirm[t] != 0) {
        x->confirmed = true;
        return true;
    }
    return false;
}

bool eval_callback(ggml_tensor * t, bool ask, void * /*user_data*/) {
    specee_ee * x = t_active;
    if (x == nullptr || x->graph == nullptr) {
        return !ask;  // a plain decode: need nothing, never stop
    }
    specee_exit_build & b = *x->graph;
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
    ggml_backend_sched_t sched = x->tgt->get_sched();
    if (role == ROLE_END) {
        ggml_backend_sched_eval_jump(sched, nullptr);  // the fill groups are for exits only
        return false;
    }
    if (role == ROLE_VOCAB) {
        const int32_t n_dv = (int32_t) x->dv_ids.size();
        x->dv_logits.resize(n_dv);
        ggml_backend_tensor_get(t, x->dv_logits.data(), 0, sizeof(float) * n_dv);
        float f[SPECEE_EE_N_VOCAB_FEATURES];
        const int32_t best = vocab_features(x->dv_logits.data(), n_dv, f);
        float z = x->vocab_b;
        for (int i = 0; i < SPECEE_EE_N_VOCAB_FEATURES; ++i) {
            z += x->vocab_w[i] * f[i];
        }
        if (z <= x->vocab_thr || needs_confirm(x, x->dv_ids[best])) {
            return true;  // not sure, or an ending: the full lm_head decides
        }
        x->exit_layer = x->n_layer - 1;
        x->vocab_exit = true;
        x->exit_token = x->dv_ids[best];
        ggml_backend_sched_eval_jump(sched, nullptr);
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
        ggml_backend_sched_eval_jump(sched, b.fill_first[role + 1]);
    } else {
        ggml_backend_sched_eval_jump(sched, nullptr);  // last layer (or no fill): stop here
    }
    return false;
}

std::vector<llama_token> top_k(const float * v, int32_t n, int32_t k) {
    std::vector<std::pair<float, llama_token>> best;  // ascending, size <= k
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
    std::vector<llama_token> out;
    for (auto it = best.rbegin(); it != best.rend(); ++it) {
        out.push_back(it->second);
    }
    return out;
}

// Candidates for the next step from the head's logits, with their log-probabilities under it.
void set_candidates(specee_ee * x, const float * dl, int32_t n_vocab) {
    x->cand = top_k(dl, n_vocab, x->n_cand);
    const float m = dl[x->cand[0]];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        // terms below e^-30 of the best are beneath float precision; tokens outside the draft
        // vocabulary are -inf: skipping them makes this pass a compare per token
        if (dl[i] > m - 30.0f) {
            sum += std::exp((double) (dl[i] - m));
        }
    }
    const float lse = m + (float) std::log(sum);
    x->cand_draft_lp.resize(x->n_cand);
    for (int i = 0; i < x->n_cand; ++i) {
        x->cand_draft_lp[i] = dl[x->cand[i]] - lse;
    }
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

// ---- graph hooks (called by the patched llama builder) ------------------------------------

specee_exit_build * specee_exit_graph_begin(llm_graph_context & g, const llama_model & model) {
    auto inp = std::make_unique<specee_exit_input>();
    specee_exit_build * b = &inp->b;
    g.res->add_input(std::move(inp));
    specee_ee * x = t_active;
    if (x == nullptr || g.n_tokens != 1 || x->model != &model) {
        return nullptr;
    }
    b->owner = x;
    b->generation = x->generation;
    b->model = &model;
    b->cand_ids = ggml_new_tensor_1d(g.ctx0, GGML_TYPE_I32, x->n_cand);
    ggml_set_input(b->cand_ids);
    ggml_set_name(b->cand_ids, "specee_cand_ids");
    b->h_exit = ggml_new_tensor_2d(g.ctx0, GGML_TYPE_F32, g.n_embd, 1);
    ggml_set_input(b->h_exit);
    ggml_set_name(b->h_exit, "specee_h_exit");
    b->cand_rows = ggml_get_rows(g.ctx0, model.output, b->cand_ids);  // [n_embd, n_cand]
    b->with_logits = x->logits_layers();
    b->logits.assign(g.n_layer, nullptr);
    b->h_out.assign(g.n_layer, nullptr);
    b->fill_first.assign(g.n_layer, nullptr);
    x->graph = b;
    return b;
}

void specee_exit_graph_layer(llm_graph_context & g, specee_exit_build * b, int il, ggml_tensor * h) {
    b->h_out[il] = h;
    const bool vocab = il == g.n_layer - 1 && b->owner->wants_vocab_node();
    if (!b->with_logits[il] && !vocab) {
        return;
    }
    ggml_tensor * n = ggml_rms_norm(g.ctx0, h, g.norm_rms_eps);
    n = ggml_mul(g.ctx0, n, b->model->output_norm);
    if (b->with_logits[il]) {
        ggml_tensor * l = ggml_mul_mat(g.ctx0, b->cand_rows, n);  // [n_cand, 1]
        ggml_format_name(l, "specee_cand_logits-%d", il);
        ggml_set_output(l);  // kept: the next check and recording read it after later nodes ran
        ggml_build_forward_expand(g.gf, l);
        b->logits[il] = l;
        b->role[l] = il;
    }
    if (vocab) {
        b->with_vocab = true;
        ggml_tensor * v = ggml_mul_mat(g.ctx0, b->owner->w_dv, n);  // [n_dv, 1]
        ggml_set_name(v, "specee_vocab_logits");
        ggml_set_output(v);
        ggml_build_forward_expand(g.gf, v);
        b->vocab_logits = v;
        b->role[v] = ROLE_VOCAB;
    }
}

void specee_exit_graph_end(llm_graph_context & g, specee_exit_build * b, llm_graph_input_attn_kv * inp_attn,
                           ggml_tensor * inp_pos, ggml_tensor * t_end) {
    b->t_end = t_end;
    b->role[t_end] = ROLE_END;
    // Only the plain layout is filled: rotated or fused K/V would need their own fill.
    if (inp_attn->self_k_rot || inp_attn->self_v_rot || g.hparams.use_kq_norm || g.hparams.f_clamp_kqv > 0.0f) {
        return;
    }
    for (int il = 1; il < g.n_layer; ++il) {
        if (b->model->layers[il].wk == nullptr || b->model->layers[il].wv == nullptr) {
            return;
        }
    }
    const auto * mctx = inp_attn->mctx;
    for (int il = 1; il < g.n_layer; ++il) {
        const llama_layer & layer = b->model->layers[il];
        const int first = ggml_graph_n_nodes(g.gf);
        ggml_tensor * x = ggml_rms_norm(g.ctx0, b->h_exit, g.norm_rms_eps);
        x = ggml_mul(g.ctx0, x, layer.attn_norm);
        ggml_tensor * k = g.build_lora_mm(layer.wk, x, layer.wk_s);
        if (layer.wk_b) {
            k = ggml_add(g.ctx0, k, layer.wk_b);
        }
        ggml_tensor * v = g.build_lora_mm(layer.wv, x, layer.wv_s);
        if (layer.wv_b) {
            v = ggml_add(g.ctx0, v, layer.wv_b);
        }
        k = ggml_reshape_3d(g.ctx0, k, g.n_embd_head_k, g.n_head_kv, 1);
        v = ggml_reshape_3d(g.ctx0, v, g.n_embd_head_v, g.n_head_kv, 1);
        if (layer.attn_k_norm) {  // per-head K norm before RoPE (qwen3)
            k = ggml_mul(g.ctx0, ggml_rms_norm(g.ctx0, k, g.norm_rms_eps), layer.attn_k_norm);
        }
        k = ggml_rope_ext(g.ctx0, k, inp_pos, b->model->get_rope_factors(g.cparams, il), g.n_rot, g.rope_type, g.n_ctx_orig,
                          g.freq_base, g.freq_scale, g.ext_factor, g.attn_factor, g.beta_fast, g.beta_slow);
        ggml_build_forward_expand(g.gf, mctx->cpy_k(g.ctx0, k, inp_attn->get_k_idxs(), il));
        ggml_build_forward_expand(g.gf, mctx->cpy_v(g.ctx0, v, inp_attn->get_v_idxs(), il));
        b->fill_first[il] = ggml_graph_node(g.gf, first);
    }
    b->can_fill = true;
}

// ---- C API ----------------------------------------------------------------------------------

enum llama_flash_attn_type specee_flash_attn_type(const llama_context * ctx) {
    return ctx->get_cparams().flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
}

// The one list of architectures whose graph builders call the exit hooks (src/models/llama.cpp in
// patch 0002, qwen2.cpp and qwen3.cpp in patch 0005; the same builders store the layer inputs EAGLE
// heads read), as GGUF `general.architecture` names. Python asks for it (specee_exit_archs,
// engine/native.py); engine/models/acceleration.py's fallback copy is tested against it.
static const char * const k_exit_archs = "llama,qwen2,qwen3";

const char * specee_exit_archs(void) {
    return k_exit_archs;
}

bool specee_exit_arch_supported(const llama_model * model) {
    const std::string name = llm_arch_name(model->arch);
    const std::string list = std::string(",") + k_exit_archs + ",";
    return list.find("," + name + ",") != std::string::npos;
}

specee_ee * specee_ee_init(specee_eagle * e, int32_t n_cand) {
    if (e == nullptr) {
        specee_error_msg = "early exit needs an EAGLE head for its candidates";
        return nullptr;
    }
    const llama_model & model = e->tgt->get_model();
    if (!specee_exit_arch_supported(&model)) {
        specee_error_msg = std::string("early exit is not available for the ") + llm_arch_name(model.arch) +
                           " architecture (its graph builder has no exit hooks)";
        return nullptr;
    }
    if (model.output_b != nullptr) {
        specee_error_msg = "early exit does not support models with an output bias";
        return nullptr;
    }
    if (n_cand < 2 || n_cand > 256) {
        specee_error_msg = "n_cand must be between 2 and 256";
        return nullptr;
    }
    if (llama_model_n_layer(&model) > SPECEE_EE_MAX_LAYERS || model.output == nullptr) {
        specee_error_msg = "this model's layout is not supported by early exit";
        return nullptr;
    }
    auto * x = new specee_ee();
    x->e = e;
    x->tgt = e->tgt;
    x->model = &model;
    x->n_layer = llama_model_n_layer(&model);
    x->n_embd = llama_model_n_embd(&model);
    x->n_cand = n_cand;
    x->generation = ++g_generation;
    x->pred.resize(x->n_layer);
    const llama_model & dmodel = e->dft->get_model();
    if (dmodel.d2t != nullptr && model.output->ne[0] == x->n_embd) {
        const int64_t n_dv = dmodel.d2t->ne[0];
        std::vector<int64_t> d2t(n_dv);
        ggml_backend_tensor_get(dmodel.d2t, d2t.data(), 0, sizeof(int64_t) * n_dv);
        ggml_init_params ip = {ggml_tensor_overhead() * 2, nullptr, true};
        x->dv_ctx = ggml_init(ip);
        x->w_dv = ggml_new_tensor_2d(x->dv_ctx, model.output->type, x->n_embd, n_dv);
        ggml_set_name(x->w_dv, "specee_draft_vocab_head");
        x->dv_buf = ggml_backend_alloc_ctx_tensors_from_buft(
            x->dv_ctx, ggml_backend_dev_buffer_type(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)));  // host memory; no link to ggml-cpu (a loadable module)
        const size_t row = model.output->nb[1];
        std::vector<uint8_t> buf(row);
        for (int64_t i = 0; i < n_dv; ++i) {
            ggml_backend_tensor_get(model.output, buf.data(), (size_t) d2t[i] * row, row);
            ggml_backend_tensor_set(x->w_dv, buf.data(), (size_t) i * row, row);
            x->dv_ids.push_back((llama_token) d2t[i]);
        }
    }
    x->cand.assign(n_cand, 0);
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
    delete x;
}

int32_t specee_ee_set_predictor(specee_ee * x, int32_t layer, int32_t n_hidden, const float * w1, const float * b1,
                                const float * w2, float b2, float threshold) {
    if (layer < 0 || layer >= x->n_layer || n_hidden < 1 || !w1 || !b1 || !w2) {
        specee_error_msg = "bad predictor (layer out of range or missing weights)";
        return -1;
    }
    const int nf = SPECEE_EE_N_FEATURES;
    predictor & p = x->pred[layer];
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
        p = predictor{};
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
    exit_features(l, lp, draft_lp, n_cand, out);
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

llama_token specee_ee_prefill(specee_ee * x, const llama_token * tokens, int32_t n_tokens, int32_t n_keep,
                              llama_sampler * smpl) {
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
    // The eval callback splits the graph at every node it wants (a sync each, and no CUDA graph):
    // it is installed for early-exit steps only, never for prefill, drafting or other modes. It
    // takes effect when the graph is built, and an exit graph is reused only by exit steps
    // (specee_exit_input::can_reuse), so every decode runs with the callback it was built with.
    auto & cp = const_cast<llama_cparams &>(x->tgt->get_cparams());
    const auto prev_cb = cp.cb_eval;
    void * const prev_cb_data = cp.cb_eval_user_data;
    cp.cb_eval = eval_callback;
    cp.cb_eval_user_data = nullptr;
    t_active = x;
    const int32_t rc = llama_decode(x->tgt, b.b);
    t_active = nullptr;
    cp.cb_eval = prev_cb;
    cp.cb_eval_user_data = prev_cb_data;
    if (rc != 0) {
        specee_error_msg = "target decode failed (early-exit step)";
        return false;
    }
    return true;
}

// The exit a full-depth decode's recorded logits imply, as the callback would have taken it.
int32_t replay_exit(specee_ee * x, llama_token * token) {
    const specee_exit_build & b = *x->graph;
    std::vector<float> l(x->n_cand), lp(x->n_cand);
    for (int il = 0; il < x->n_layer; ++il) {
        if (!b.can_fill || !wants_check(x, il)) {
            continue;
        }
        ggml_backend_tensor_get(b.logits[il], l.data(), 0, sizeof(float) * x->n_cand);
        if (il > 0) {
            ggml_backend_tensor_get(b.logits[il - 1], lp.data(), 0, sizeof(float) * x->n_cand);
        }
        const llama_token tok = x->cand[std::max_element(l.begin(), l.end()) - l.begin()];
        if (predict_exit(x, il, l.data(), il > 0 ? lp.data() : nullptr) && !needs_confirm(x, tok)) {
            *token = tok;
            return il;
        }
    }
    if (x->vocab_on && b.vocab_logits != nullptr && x->force_layer < 0) {
        const int32_t n_dv = (int32_t) x->dv_ids.size();
        x->dv_logits.resize(n_dv);
        ggml_backend_tensor_get(b.vocab_logits, x->dv_logits.data(), 0, sizeof(float) * n_dv);
        float f[SPECEE_EE_N_VOCAB_FEATURES];
        const int32_t best = vocab_features(x->dv_logits.data(), n_dv, f);
        float z = x->vocab_b;
        for (int i = 0; i < SPECEE_EE_N_VOCAB_FEATURES; ++i) {
            z += x->vocab_w[i] * f[i];
        }
        if (z > x->vocab_thr && !needs_confirm(x, x->dv_ids[best])) {
            *token = x->dv_ids[best];
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
        std::copy(x->cand.begin(), x->cand.end(), cands);
    }
    const bool shadow = record == nullptr && x->shadow_every > 0 && x->stats.n_steps % x->shadow_every == 0;
    x->no_exit = record != nullptr || shadow;
    x->recording = record != nullptr;
    if (!decode_target(x)) {
        return -1;
    }
    if (x->graph == nullptr) {
        specee_error_msg = "the early-exit graph was not built (unsupported model?)";
        return -1;
    }
    if (record) {
        for (int il = 0; il < x->n_layer; ++il) {
            ggml_backend_tensor_get(x->graph->logits[il], record + (size_t) il * x->n_cand, 0, sizeof(float) * x->n_cand);
        }
        std::copy(x->cand_draft_lp.begin(), x->cand_draft_lp.end(), record + (size_t) x->n_layer * x->n_cand);
        float * vrow = record + (size_t) (x->n_layer + 1) * x->n_cand;
        std::fill(vrow, vrow + x->n_cand, 0.0f);
        if (x->graph->vocab_logits != nullptr && x->n_cand >= SPECEE_EE_N_VOCAB_FEATURES + 1) {
            const int32_t n_dv = (int32_t) x->dv_ids.size();
            x->dv_logits.resize(n_dv);
            ggml_backend_tensor_get(x->graph->vocab_logits, x->dv_logits.data(), 0, sizeof(float) * n_dv);
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
    const bool hit = std::find(x->cand.begin(), x->cand.end(), token) != x->cand.end();

    // Next candidates: the head's row for (token, features of this step).
    if (!encode_features(e, 0, 1, x->exit_layer, x->h_exit.data())) {
        return -1;
    }
    llama_memory_seq_rm(llama_get_memory(e->dft), 0, e->n_past, -1);
    if (!draft_decode(e, &token, e->g.data(), 1, e->n_past, true)) {
        return -1;
    }
    const float * dl = llama_get_logits_ith(e->dft, 0);
    set_candidates(x, dl, e->n_vocab);
    e->first_draft = x->cand[0];
    const float * hp = llama_get_embeddings_nextn_ith(e->dft, 0);
    std::copy(hp, hp + e->n_embd_d, e->first_h.begin());
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
