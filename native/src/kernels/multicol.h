// Multi-column dot products for ggml-cpu's mul_mat (compiled into ggml-cpu by patch 0009).
//
// A speculative verification decodes a handful of tokens at once; ggml's vec_dot path then unpacks
// every quantised weight block once per token. These kernels unpack a weight row's block once and
// take its dot product with up to SPECEE_MULTICOL_MAX activation columns. Each column's arithmetic
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

#define SPECEE_MULTICOL_MAX 4

// s[c] = dot(weight row vx, activation column vy[c]) for c < nc (1 <= nc <= SPECEE_MULTICOL_MAX);
// n: the row length in elements; vy[c] in the type's vec_dot_type (ggml's type traits).
typedef void (*specee_vec_dot_multi_t)(int n, float * s, const void * vx, const void * const * vy, int nc);

// The kernel for weights of this type, or NULL (ggml's vec_dot is used): x86 with AVX2/FMA/F16C
// for Q4_1, Q5_0, Q8_0, Q4_K and Q6_K. SPECEE_MULTICOL=0 in the environment turns them off.
specee_vec_dot_multi_t specee_vec_dot_multi(enum ggml_type type);

// Exported from ggml-cpu for measurements (`specee bench --cost-curve` compares both in one run):
// turn the kernels on or off for the following mul_mats; whether this build has any.
GGML_BACKEND_API void specee_multicol_set(bool on);
GGML_BACKEND_API bool specee_multicol_available(void);
// Weight rows the kernels have computed so far (tests: proof that a batch took this path).
GGML_BACKEND_API int64_t specee_multicol_rows(void);
void specee_multicol_note(int64_t rows);

#ifdef __cplusplus
}
#endif
