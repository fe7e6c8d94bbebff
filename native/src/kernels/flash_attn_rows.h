// Flash attention for prompt batches, tiled over query rows, each row bit-identical to ggml-cpu's
// one pass per row (flash_attn_rows.cpp; ops.cpp calls it when SPECEE_FA_ROWS is defined).
#pragma once

struct ggml_compute_params;
struct ggml_tensor;

// Computes dst (GGML_OP_FLASH_ATTN_EXT) when Q is F32 and K, V are F16 and returns true; returns
// false, having done nothing, otherwise (the caller runs ggml's own path). Every thread of the op
// calls it and gets the same answer.
bool specee_flash_attn_rows(const struct ggml_compute_params * params, struct ggml_tensor * dst);
