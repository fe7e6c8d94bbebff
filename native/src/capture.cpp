// Feature capture for training EAGLE heads and SpecEE predictors (target hidden states per layer).
#include "exit-state.h"
#include "specee.h"

#include "../llama-ext.h"

// Setting a layer's capture makes llama.cpp re-reserve the context's scheduler. Doing that after
// the context has decoded on Vulkan corrupted the heap (lavapipe: an EAGLE or SpecEE decoder made
// after vanilla answered), so a call that changes nothing does not touch the context, and the
// worker turns capture on right after load (EngineSession), before the first decode.
void specee_capture_layer_input(llama_context * ctx, int32_t lid, bool on) {
    if (specee_layer_input_enabled(ctx, lid) != on) {
        llama_set_embeddings_layer_inp(ctx, (uint32_t) lid, on);
    }
}

// llama_get_embeddings_layer_inp aborts on a layer that was never enabled: null instead.
const float * specee_layer_input(llama_context * ctx, int32_t lid) {
    return specee_layer_input_enabled(ctx, lid) ? llama_get_embeddings_layer_inp(ctx, (uint32_t) lid) : nullptr;
}
