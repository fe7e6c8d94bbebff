// Hooks our llama.cpp patches call from the llama-family graph builders (0002: llama; 0005: qwen2, qwen3). They add, only
// while a SpecEE early-exit step is decoding one token: candidate logits after every layer (4 rows
// of the lm_head through the final norm) and, after the output head, one K/V-fill group per layer
// that an exit jumps into. Implemented in exit-graph.cpp.
#pragma once

#include "../llama-graph.h"

struct llama_model;
struct specee_exit_build;

// Null unless an early-exit step is decoding (then the other hooks must be called).
specee_exit_build * specee_exit_graph_begin(llm_graph_context & g, const llama_model & model);
// After layer `il` produced `h` (the input of layer il + 1).
void specee_exit_graph_layer(llm_graph_context & g, specee_exit_build * x, int il, ggml_tensor * h);
// After the output head `t_end`: the K/V-fill groups, last in the graph.
void specee_exit_graph_end(llm_graph_context & g, specee_exit_build * x, llm_graph_input_attn_kv * inp_attn,
                           ggml_tensor * inp_pos, ggml_tensor * t_end);
