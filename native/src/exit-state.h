// What early-exit.cpp (the step logic, on llama.h and ggml only) and exit-graph.cpp (the graph
// hooks and every other use of llama.cpp's internal headers) share: the nodes one built exit graph
// has, what the step decoding on this thread asks the graph builders for, and the few model and
// context facts the step needs that llama.h does not give.
#pragma once

#include "llama.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

struct specee_exit_step;

constexpr int SPECEE_ROLE_END = -1;    // the output head: the graph stops there unless an exit jumped
constexpr int SPECEE_ROLE_VOCAB = -2;  // the draft-vocabulary head after the last layer

// The graph tensors of one built early-exit graph (owned by llama.cpp's graph result).
struct specee_exit_build {
    specee_exit_step * owner = nullptr;
    uint64_t generation = 0;
    const llama_model * model = nullptr;
    ggml_tensor * cand_ids = nullptr;
    ggml_tensor * cand_rows = nullptr;
    ggml_tensor * h_exit = nullptr;
    ggml_tensor * t_end = nullptr;
    bool can_fill = false;
    bool with_vocab = false;           // built with the draft-vocabulary head
    std::vector<uint8_t> with_logits;  // layers given candidate-logits nodes
    ggml_tensor * vocab_logits = nullptr;  // [n_dv] after the last layer, when the head has a d2t
    std::vector<ggml_tensor *> logits, h_out, fill_first;
    std::unordered_map<const ggml_tensor *, int> role;  // layer of a logits node, or SPECEE_ROLE_*
};

// An early-exit object's request to the graph builders, valid while one of its steps decodes.
struct specee_exit_step {
    uint64_t generation = 0;  // a new one per early-exit object: a freed object's graph is never reused
    const llama_model * model = nullptr;
    int32_t n_cand = 0;
    std::vector<llama_token> cand;     // this step's candidates (uploaded when the graph runs)
    std::vector<uint8_t> with_logits;  // layers whose candidates' logits this step reads
    ggml_tensor * w_dv = nullptr;      // the draft-vocabulary head's weights, when this step reads it
    specee_exit_build * graph = nullptr;  // the graph about to run (set when its inputs are set)
};

// Decode one token on ctx with `step` active (graph hooks build the exit nodes for it) and `cb`
// as the scheduler's eval callback, which is restored afterwards. Returns llama_decode's result.
int32_t specee_exit_decode(llama_context * ctx, llama_batch batch, specee_exit_step * step,
                           ggml_backend_sched_eval_callback cb, void * cb_data);

// Resume the running graph at node `at` (null: stop after the current node); eval callbacks only.
void specee_exit_jump(llama_context * ctx, ggml_tensor * at);

// Model facts for early exit: the output head (null if none) and whether it has a bias; an
// EAGLE-3 head's draft-to-target vocabulary map (null if none); the GGUF architecture name.
ggml_tensor * specee_model_output(const llama_model * model);
bool specee_model_output_has_bias(const llama_model * model);
ggml_tensor * specee_model_d2t(const llama_model * model);
const char * specee_model_arch_name(const llama_model * model);

// Whether the context stores layer `lid`'s input (llama_set_embeddings_layer_inp): llama.h can set
// it but not read it back.
bool specee_layer_input_enabled(const llama_context * ctx, int32_t lid);
