// The one file of ours that includes llama.cpp's internal headers (native/REBASE.md lists what it
// uses): the graph hooks the patched model builders call for SpecEE early exit (exit-graph.h), the
// scheduler and eval-callback plumbing of an early-exit step, and the model facts llama.h lacks.
// The step logic that uses them is early-exit.cpp, on llama.h, ggml and exit-state.h only.
//
// The hooks add, only while an early-exit step decodes one token: candidate logits after the
// layers the step reads (final norm + n_cand rows of the lm_head), the draft-vocabulary head after
// the last layer, and after the output head one K/V-fill group per layer that an exit jumps into.
#include "exit-graph.h"
#include "exit-state.h"
#include "specee.h"

#include "../llama-context.h"
#include "../llama-kv-cache.h"
#include "../llama-model.h"

#include <memory>
#include <string>

namespace {

thread_local specee_exit_step * t_step = nullptr;  // the early-exit step decoding on this thread

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
            return t_step == nullptr;
        }
        return t_step == b.owner && t_step->generation == b.generation && b.with_vocab == (t_step->w_dv != nullptr) &&
               b.with_logits == t_step->with_logits;
    }
};

}  // namespace

// ---- graph hooks (called by the patched llama builder) ------------------------------------

specee_exit_build * specee_exit_graph_begin(llm_graph_context & g, const llama_model & model) {
    auto inp = std::make_unique<specee_exit_input>();
    specee_exit_build * b = &inp->b;
    g.res->add_input(std::move(inp));
    specee_exit_step * x = t_step;
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
    b->with_logits = x->with_logits;
    b->logits.assign(g.n_layer, nullptr);
    b->h_out.assign(g.n_layer, nullptr);
    b->fill_first.assign(g.n_layer, nullptr);
    x->graph = b;
    return b;
}

void specee_exit_graph_layer(llm_graph_context & g, specee_exit_build * b, int il, ggml_tensor * h) {
    b->h_out[il] = h;
    const bool vocab = il == g.n_layer - 1 && b->owner->w_dv != nullptr;
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
        b->role[v] = SPECEE_ROLE_VOCAB;
    }
}

void specee_exit_graph_end(llm_graph_context & g, specee_exit_build * b, llm_graph_input_attn_kv * inp_attn,
                           ggml_tensor * inp_pos, ggml_tensor * t_end) {
    b->t_end = t_end;
    b->role[t_end] = SPECEE_ROLE_END;
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

// ---- an early-exit step's decode -------------------------------------------------------------

int32_t specee_exit_decode(llama_context * ctx, llama_batch batch, specee_exit_step * step,
                           ggml_backend_sched_eval_callback cb, void * cb_data) {
    // The eval callback splits the graph at every node it wants (a sync each, and no CUDA graph):
    // it is installed for early-exit steps only, never for prefill, drafting or other modes. It
    // takes effect when the graph is built, and an exit graph is reused only by exit steps
    // (specee_exit_input::can_reuse), so every decode runs with the callback it was built with.
    const llama_cparams & cp = ctx->get_cparams();
    const ggml_backend_sched_eval_callback prev_cb = cp.cb_eval;
    void * const prev_cb_data = cp.cb_eval_user_data;
    ctx->set_eval_callback(cb, cb_data);  // patch 0016
    t_step = step;
    const int32_t rc = llama_decode(ctx, batch);
    t_step = nullptr;
    ctx->set_eval_callback(prev_cb, prev_cb_data);
    return rc;
}

void specee_exit_jump(llama_context * ctx, ggml_tensor * at) {
    ggml_backend_sched_eval_jump(ctx->get_sched(), at);  // patch 0002
}

// ---- model facts ------------------------------------------------------------------------------

ggml_tensor * specee_model_output(const llama_model * model) {
    return model->output;
}

bool specee_model_output_has_bias(const llama_model * model) {
    return model->output_b != nullptr;
}

ggml_tensor * specee_model_d2t(const llama_model * model) {
    return model->d2t;
}

const char * specee_model_arch_name(const llama_model * model) {
    return llm_arch_name(model->arch);
}

bool specee_layer_input_enabled(const llama_context * ctx, int32_t lid) {
    const std::vector<bool> & on = ctx->get_cparams().embeddings_layer_inp;
    return lid >= 0 && (size_t) lid < on.size() && on[lid];
}

// ---- C API ------------------------------------------------------------------------------------

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
