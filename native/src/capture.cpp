// Feature capture for training EAGLE heads and SpecEE predictors (target hidden states per layer).
#include "specee.h"

#include "../llama-ext.h"

#include <algorithm>
#include <vector>

namespace {
// llama_get_embeddings_layer_inp aborts on a layer that was never enabled; remember which are.
std::vector<std::pair<const llama_context *, int32_t>> g_captured;
}  // namespace

void specee_capture_layer_input(llama_context * ctx, int32_t lid, bool on) {
    llama_set_embeddings_layer_inp(ctx, (uint32_t) lid, on);
    const auto key = std::make_pair((const llama_context *) ctx, lid);
    g_captured.erase(std::remove(g_captured.begin(), g_captured.end(), key), g_captured.end());
    if (on) {
        g_captured.emplace_back(ctx, lid);
    }
}

const float * specee_layer_input(llama_context * ctx, int32_t lid) {
    for (const auto & c : g_captured) {
        if (c.first == ctx && c.second == lid) {
            return llama_get_embeddings_layer_inp(ctx, (uint32_t) lid);
        }
    }
    return nullptr;
}
