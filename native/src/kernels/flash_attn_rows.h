// Flash attention on the CPU, tiled over query rows, each row the same bits in any batch
// (flash_attn_rows.cpp; ops.cpp calls it when SPECEE_FA_ROWS is defined).
#pragma once

#include "ggml-backend.h"

#include <stdbool.h>

struct ggml_compute_params;
struct ggml_tensor;

// Computes dst (GGML_OP_FLASH_ATTN_EXT) when Q is F32 and K, V are F16 and returns true; returns
// false, having done nothing, otherwise (the caller runs ggml's own path). Every thread of the op
// calls it and gets the same answer.
bool specee_flash_attn_rows(const struct ggml_compute_params * params, struct ggml_tensor * dst);

// Exported from ggml-cpu for measurements and tests (the worker sets them at start from
// engine/knobs.py; the kernels read no environment): tiles off runs ggml's one pass per row (fp16
// accumulators: other bits, slower); tile_rows (<= 64) and kv_block (<= 64) tune the tiles (0: the defaults), wide
// false keeps AVX-512 CPUs on the generic tiled loop.
extern "C" {
GGML_BACKEND_API void specee_fa_tiles_set(bool on);
GGML_BACKEND_API void specee_fa_tune(int tile_rows, int kv_block, bool wide);
}
