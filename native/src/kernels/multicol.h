// Multi-column dot products for ggml-cpu's mul_mat (compiled into ggml-cpu by patch 0009).
//
// A speculative verification decodes a handful of tokens at once; ggml's vec_dot path then unpacks
// every quantised weight block once per token. These kernels unpack a weight row's block once and
// take its dot product with up to SPECEE_MULTICOL_MAX activation columns, whose fp16 block scales
// they read converted once per product (specee_multicol_scales), which pays for one row too. Each column's arithmetic
// is the same instruction sequence as ggml's one-column vec_dot for that type on this CPU, so a
// row's result does not depend on how many columns were computed with it (verification stays
// bit-identical to one-token decodes) nor on whether this kernel or ggml's computed it.
#pragma once

#include "ggml-backend.h"
#include "ggml.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPECEE_MULTICOL_MAX 8

// s[c] = dot(weight row vx, activation column vy[c]) for c < nc (1 <= nc <= SPECEE_MULTICOL_MAX);
// n: the row length in elements; vy[c] in the type's vec_dot_type (ggml's type traits); ys: the
// columns' block scales from specee_multicol_scales (column c's at ys + c * per_row), or NULL for
// the K-quants, whose activation blocks carry a float scale.
typedef void (*specee_vec_dot_multi_t)(int n, float * s, const void * vx, const void * const * vy, const float * ys,
                                       int nc);

// Every block scale of ncols activation rows (the first at `first`, `stride` bytes apart) as floats,
// converted once per mul_mat instead of once per weight row: for Q4_1, Q8_0 and Q5_0 weights (their
// activations are Q8_1 / Q8_0 blocks with fp16 scales); NULL for other types. The buffer is the
// calling thread's and stays valid until its next call.
const float * specee_multicol_scales(enum ggml_type type, int n, const void * first, size_t stride, int ncols);
static inline size_t specee_multicol_scales_per_row(int n) {
    return 2 * (size_t) (n / 32);
}

// The kernel for weights of this type times ncols activation rows, or NULL (ggml's vec_dot is
// used): x86 with AVX2/FMA/F16C for Q4_1, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K from two rows on; Q4_1, Q5_0
// and Q8_0 for one row too, where converting the row's scales once is what saves time (a one-row
// decode of the default model: see multicol.c). Off: specee_multicol_set(false).
specee_vec_dot_multi_t specee_vec_dot_multi(enum ggml_type type, int64_t ncols);

// ggml-cpu's repacked Q4_K weights (block_q4_Kx8, the x86 layout for Q4_K when the worker loads
// weights repacked) times nc <= SPECEE_MULTICOL_MAX activation rows (block_q8_K, vy[c] each):
// s[c * bs + r] for the nrows weight rows (a multiple of 8) at vx. Each row's result is
// bit-identical to ggml's gemv and gemm for that layout (patch 0008 made those two agree), so a
// decode, a verify batch and a prompt batch agree whichever path computed them. AVX-512 VNNI or
// AVX2 (the same results); NULL without AVX2/FMA/F16C or with the kernels off (ggml's gemv/gemm).
typedef void (*specee_repacked_multi_t)(int n, float * s, size_t bs, const void * vx, const void * const * vy, int nrows,
                                        int nc);
specee_repacked_multi_t specee_q4_K_8x8_multi(int64_t ncols);

// Exported from ggml-cpu for the worker (engine/knobs.py, read once at its start: the kernels read
// no environment) and for measurements (`specee bench --cost-curve` compares both in one run):
// turn the kernels on or off for the following mul_mats; whether this build has any.
GGML_BACKEND_API void specee_multicol_set(bool on);
GGML_BACKEND_API bool specee_multicol_available(void);
// Whether a mul_mat of nr0 weight rows by nr1 activation rows (planes: ne12 * ne13) gives each
// thread one contiguous run of weight rows (patch 0019) instead of upstream's 64- or 16-row chunks
// that the threads take in turns: true for batches of up to SPECEE_SPLIT_MAX_ROWS rows (a decode,
// a verify). On a 2-core EPYC, SmolLM2-135M Q4_1 (`specee bench --cost-curve`): one row 7.54 ->
// 6.63 ms, two rows 1.38x and four 1.24x faster. A row's arithmetic is unchanged, only its thread.
// Off: specee_split_by_thread_set(false).
#define SPECEE_SPLIT_MAX_ROWS 16
bool specee_split_by_thread(int64_t nr0, int64_t nr1, int64_t planes);
GGML_BACKEND_API void specee_split_by_thread_set(bool on);
// How many times a thread took its run so far (tests: proof that the split happened).
GGML_BACKEND_API int64_t specee_split_by_thread_count(void);
// Weight rows the kernels have computed so far (tests: proof that a batch took this path).
GGML_BACKEND_API int64_t specee_multicol_rows(void);
void specee_multicol_note(int64_t rows);

#ifdef __cplusplus
}
#endif
