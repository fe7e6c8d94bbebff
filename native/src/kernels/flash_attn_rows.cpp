// Flash attention on the CPU in tiles of query rows, every row computed the same way in any batch
// (compiled into ggml-cpu by patch 0009; ops.cpp calls it first, patch 0018).
//
// Patch 0018 keeps a query row's attention independent of the batch it sits in, so a prompt row
// cached by prefill equals what a one-token decode computes. ggml's way to that is one pass per row
// over all its KV cells, which re-reads megabytes of K/V per row from L3 at 7k tokens. Here a tile of
// query rows (a few positions, times the query heads that share a KV head under GQA) walks the KV
// cells in blocks small enough to stay in L1: each block is loaded once and every row of the tile
// advances over it. On AVX-512 and AVX2 each row is our f32 row (attn_f32_rows.h: a block-wise
// online softmax with f32 accumulators, its bits fixed by the row alone); ops with ALiBi, softcap or
// sinks, and other CPUs, run ggml's one-pass statements per row instead, blocking changing only
// where a row's state sits between cells. Every F16-K/V row goes through here, decodes included, so
// there is one compiled copy of the row's arithmetic.
#include "flash_attn_rows.h"

#include "common.h"
#include "ggml-cpu.h"
#include "ggml-impl.h"
#include "vec.h"
#include "attn_f32_rows.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

// A tile holds at most this many query rows (positions x heads); their Q and fp16 accumulators
// (256 B a row at head size 64) stay in L1 beside one block of K/V cells.
constexpr int MAX_ROWS = 64;
// the widest V row the AVX-512 path keeps converted in registers
constexpr int MAX_DV = 512;

// Switches for measurements and tests, set by the worker at start (engine/knobs.py) or by a
// bench: the kernels read no environment (issue 47: no knob read per call).
std::atomic<bool> g_tiles{true};
std::atomic<bool> g_wide{true};
std::atomic<int>  g_tile_rows{MAX_ROWS};
std::atomic<int>  g_kv_block{64};

#if defined(__AVX512F__) && !defined(__AVX512FP16__) && defined(__GNUC__)
#define SPECEE_FA_AVX512 1

// ggml_vec_dot_f16 on AVX-512 (simd-mappings.h GGML_F32Cx16_*, F16_STEP 64, four accumulators) is,
// for one K row x and one Q row y of length n (a multiple of 64): sum[j][l] = fma chain over the
// steps of x[st*64+16j+l]*y[st*64+16j+l] from +0; t[l] = (sum[0][l]+sum[2][l]) + (sum[1][l]+sum[3][l]);
// then _mm512_reduce_add_ps(t) pairs lane i with i+8, then i with i+4, then 0 with 2 and 1 with 3,
// then the two. Products of two fp16 values are exact in f32, so each fma equals an add of the
// product. Here the same operations run with the lanes holding 16 query rows instead of 16
// elements (rows transposed in QT: QT[group][e][row]), for every cell of a block: one broadcast K
// element serves 16 rows. Result: KQ[cell][row], bit for bit ggml_vec_dot_f16(n, K[cell], Q[row]).
// A group of fewer rows than MIN_LANES (a decode's lone row) takes ggml's own vec_dot per row
// instead: the same values, without 16 lanes' work for a few rows.
#define SPECEE_FA_LANE_DOTS 1
constexpr int64_t LANES = 16;
constexpr int64_t MIN_LANES = 6;

inline void k_to_f32(int64_t DK, const ggml_fp16_t * kc, float * out) {
    for (int64_t e = 0; e < DK; e += 16) {
        _mm512_storeu_ps(out + e, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (kc + e))));
    }
}

// one cell's dot products with a group of 16 rows (qt: QT of the group), into out[0..16)
inline void cell_dots(int64_t DK, const float * kf, const float * qt, float * out) {
    __m512 t[16];
    for (int l = 0; l < 16; ++l) {
        __m512 a0 = _mm512_setzero_ps();
        __m512 a1 = _mm512_setzero_ps();
        __m512 a2 = _mm512_setzero_ps();
        __m512 a3 = _mm512_setzero_ps();
        for (int64_t st = 0; st < DK; st += 64) {
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(kf[st +  0 + l]), _mm512_loadu_ps(qt + (st +  0 + l)*16), a0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(kf[st + 16 + l]), _mm512_loadu_ps(qt + (st + 16 + l)*16), a1);
            a2 = _mm512_fmadd_ps(_mm512_set1_ps(kf[st + 32 + l]), _mm512_loadu_ps(qt + (st + 32 + l)*16), a2);
            a3 = _mm512_fmadd_ps(_mm512_set1_ps(kf[st + 48 + l]), _mm512_loadu_ps(qt + (st + 48 + l)*16), a3);
        }
        t[l] = _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
    }
    for (int i = 0; i < 8; ++i) {
        t[i] = _mm512_add_ps(t[i + 8], t[i]);
    }
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm512_add_ps(t[i + 4], t[i]);
    }
    const __m512 f0 = _mm512_add_ps(t[0], t[2]);
    const __m512 f1 = _mm512_add_ps(t[1], t[3]);
    _mm512_storeu_ps(out, _mm512_add_ps(f0, f1));
}

// ggml_vec_mad_f16 / ggml_vec_scale_f16 on AVX-512 for n a multiple of 64: per 16 elements
// y = fp16(fp32(x)*v + fp32(y)) (one fma) / y = fp16(fp32(y)*v), rounding to nearest. The cell's V
// row is converted once for all rows here instead of once per row: the same values.
inline void mad_f16_avx512(int64_t DV, ggml_fp16_t * y, const __m512 * vf, float v) {
    const __m512 vx = _mm512_set1_ps(v);
    for (int64_t i = 0; i < DV/16; ++i) {
        __m512 ay = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (y + 16*i)));
        ay = _mm512_fmadd_ps(vf[i], vx, ay);
        _mm256_storeu_si256((__m256i *) (y + 16*i), _mm512_cvtps_ph(ay, 0));
    }
}

inline void scale_f16_avx512(int64_t DV, ggml_fp16_t * y, float v) {
    const __m512 vx = _mm512_set1_ps(v);
    for (int64_t i = 0; i < DV/16; ++i) {
        __m512 ay = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (y + 16*i)));
        ay = _mm512_mul_ps(ay, vx);
        _mm256_storeu_si256((__m256i *) (y + 16*i), _mm512_cvtps_ph(ay, 0));
    }
}

// The online-softmax updates of one block of cells for every row of the tile, cell by cell (a
// row's cells in ggml's order), each row's statements those of ggml's one-pass loop.
void updates_avx512(int64_t DV, int64_t ic0, int64_t ncell, const char * v_block, size_t nbv1, const float * KQ,
                    int64_t nr, const ggml_fp16_t * const * mp_row, const float * slope_row, float scale,
                    float logit_softcap, float * M_row, float * S_row, ggml_fp16_t * VKQ16) {
    __m512 vf[MAX_DV/16];
    for (int64_t c = 0; c < ncell; ++c) {
        const int64_t ic = ic0 + c;
        const ggml_fp16_t * vc = (const ggml_fp16_t *) (v_block + c*nbv1);
        for (int64_t i = 0; i < DV/16; ++i) {
            vf[i] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (vc + 16*i)));
        }
        for (int64_t r = 0; r < nr; ++r) {
            const ggml_fp16_t * mp = mp_row[r];
            const float mv = mp ? slope_row[r]*GGML_CPU_FP16_TO_FP32(mp[ic]) : 0.0f;
            if (mv == -INFINITY) {
                continue;
            }

            float s = KQ[c*MAX_ROWS + r]; // KQ value

            s = s*scale; // scale KQ value

            if (logit_softcap != 0.0f) {
                s = logit_softcap*tanhf(s);
            }

            s += mv; // apply mask

            float M = M_row[r];
            const float Mold = M;

            float ms = 1.0f; // upon new higher max val, scale VKQ and KQ sum with this value
            float vs = 1.0f; // post-softmax KQ value, expf(s - M)

            ggml_fp16_t * VKQr = VKQ16 + r*DV;

            if (s > M) {
                // s is new maximum, ms < 1.0f, vs == expf(s - s) == 1.0f
                M = s;
                ms = expf(Mold - M);

                // V = V*expf(Mold - M)
                scale_f16_avx512(DV, VKQr, ms);
            } else {
                // no new maximum, ms == 1.0f, vs != 1.0f
                vs = expf(s - M);
            }

            // V += v*expf(s - M)
            mad_f16_avx512(DV, VKQr, vf, vs);

            M_row[r] = M;
            S_row[r] = S_row[r]*ms + vs; // scale and increment sum with partial sum
        }
    }
}

#else
#define SPECEE_FA_AVX512 0
#endif

#if !SPECEE_FA_AVX512 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__GNUC__)
// ggml_vec_dot_f16 on AVX2 (GGML_F32Cx8_*, F16_STEP 32, four accumulators of 8, fmadd) is, for one K
// row x and one Q row y of length n (a multiple of 32): sum[j][l] = fma chain over the steps of
// x[st*32+8j+l]*y[st*32+8j+l] from +0; a[l] = (sum[0][l]+sum[2][l]) + (sum[1][l]+sum[3][l]); then
// GGML_F32x8_REDUCE's tail adds lane l to l+4 and hadds twice: ((a0+a4)+(a1+a5)) + ((a2+a6)+(a3+a7)).
// Here the same operations run with the lanes holding 8 query rows (QT[group][e][row]): KQ[cell][row],
// bit for bit ggml_vec_dot_f16(n, K[cell], Q[row]); groups of fewer than MIN_LANES rows take ggml's own.
#define SPECEE_FA_LANE_DOTS 1
constexpr int64_t LANES = 8;
constexpr int64_t MIN_LANES = 3;

inline void k_to_f32(int64_t DK, const ggml_fp16_t * kc, float * out) {
    for (int64_t e = 0; e < DK; e += 8) {
        _mm256_storeu_ps(out + e, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (kc + e))));
    }
}

// one cell's dot products with a group of 8 rows (qt: QT of the group), into out[0..8)
inline void cell_dots(int64_t DK, const float * kf, const float * qt, float * out) {
    __m256 a[8];
    for (int l = 0; l < 8; ++l) {
        __m256 s0 = _mm256_setzero_ps();
        __m256 s1 = _mm256_setzero_ps();
        __m256 s2 = _mm256_setzero_ps();
        __m256 s3 = _mm256_setzero_ps();
        for (int64_t st = 0; st < DK; st += 32) {
            s0 = _mm256_fmadd_ps(_mm256_broadcast_ss(kf + st +  0 + l), _mm256_loadu_ps(qt + (st +  0 + l)*8), s0);
            s1 = _mm256_fmadd_ps(_mm256_broadcast_ss(kf + st +  8 + l), _mm256_loadu_ps(qt + (st +  8 + l)*8), s1);
            s2 = _mm256_fmadd_ps(_mm256_broadcast_ss(kf + st + 16 + l), _mm256_loadu_ps(qt + (st + 16 + l)*8), s2);
            s3 = _mm256_fmadd_ps(_mm256_broadcast_ss(kf + st + 24 + l), _mm256_loadu_ps(qt + (st + 24 + l)*8), s3);
        }
        a[l] = _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
    }
    const __m256 t0 = _mm256_add_ps(a[0], a[4]);
    const __m256 t1 = _mm256_add_ps(a[1], a[5]);
    const __m256 t2 = _mm256_add_ps(a[2], a[6]);
    const __m256 t3 = _mm256_add_ps(a[3], a[7]);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3)));
}
#endif
#ifndef SPECEE_FA_LANE_DOTS
#define SPECEE_FA_LANE_DOTS 0
#endif

#if SPECEE_FA_LANE_DOTS
// KQ[cell][row] for a block's cells and a tile's rows, LANES rows at a time through cell_dots (this
// ISA's copy of ggml_vec_dot_f16's tree); a group of fewer than MIN_LANES rows takes ggml's vec_dot.
void dots_lanes(int64_t DK, int64_t ncell, const char * k_block, size_t nbk1, const float * QT, int64_t nr,
                float * Kf, float * KQ, ggml_vec_dot_t kq_vec_dot, const ggml_fp16_t * Q_q) {
    for (int64_t c = 0; c < ncell; ++c) {
        k_to_f32(DK, (const ggml_fp16_t *) (k_block + c*nbk1), Kf + c*DK);
    }
    for (int64_t g = 0; g*LANES < nr; ++g) {
        if (nr - g*LANES < MIN_LANES) {
            for (int64_t c = 0; c < ncell; ++c) {
                for (int64_t r = g*LANES; r < nr; ++r) {
                    kq_vec_dot(DK, KQ + c*MAX_ROWS + r, 0, k_block + c*nbk1, 0, Q_q + r*DK, 0, 1);
                }
            }
            continue;
        }
        for (int64_t c = 0; c < ncell; ++c) {
            cell_dots(DK, Kf + c*DK, QT + g*LANES*DK, KQ + c*MAX_ROWS + g*LANES);
        }
    }
}
#endif

#if SPECEE_FA_F32
using namespace specee_attn;

// One tile's rows over all KV cells (k_head/v_head: the tile's KV head at cell 0), block by block;
// leaves each row's O32, M and S. QT: the rows transposed for dots_lanes (nullptr: one vec_dot a
// cell and row, the same values).
void f32_tile(int64_t DK, int64_t DV, int64_t n_kv, int64_t nr, const char * k_head, size_t nbk1, const char * v_head,
              size_t nbv1, const float * QT, const ggml_fp16_t * Q_q, const ggml_fp16_t * const * mp_row, float scale,
              ggml_vec_dot_t kq_vec_dot, float * Kf, float * KQ, float * Vf, float * P, float * O32, float * M_row,
              float * S_row) {
    std::memset(O32, 0, nr*DV*sizeof(float));
    bool visible[MAX_ROWS];
    const float * pa[MAX_ROWS];
    float * oa[MAX_ROWS];
    for (int64_t ic0 = 0; ic0 < n_kv; ic0 += F32_BLOCK) {
        // the block's cells up to the last any row sees: past it p is 0 for every row (the same bits)
        int64_t ncell = 0;
        for (int64_t r = 0; r < nr; ++r) {
            const int64_t end = block_visible_end(mp_row[r] ? mp_row[r] + ic0 : nullptr, std::min(F32_BLOCK, n_kv - ic0));
            visible[r] = end > 0;
            ncell = std::max(ncell, end);
        }
        if (ncell == 0) {
            continue;
        }
        const char * k_block = k_head + ic0*nbk1;
        const char * v_block = v_head + ic0*nbv1;
#if SPECEE_FA_LANE_DOTS
        if (QT != nullptr && nr >= MIN_LANES) {
            dots_lanes(DK, ncell, k_block, nbk1, QT, nr, Kf, KQ, kq_vec_dot, Q_q);
        } else
#endif
        {
            for (int64_t c = 0; c < ncell; ++c) {
                for (int64_t r = 0; r < nr; ++r) {
                    kq_vec_dot(DK, KQ + c*MAX_ROWS + r, 0, k_block + c*nbk1, 0, Q_q + r*DK, 0, 1);
                }
            }
        }
        for (int64_t c = 0; c < ncell; ++c) {
            v_to_f32(DV, (const ggml_fp16_t *) (v_block + c*nbv1), Vf + c*DV);
        }
        int64_t n = 0;
        for (int64_t r = 0; r < nr; ++r) {
            if (visible[r] && softmax_block(DV, ncell, KQ + r, MAX_ROWS, mp_row[r] ? mp_row[r] + ic0 : nullptr, scale,
                                            M_row[r], S_row[r], O32 + r*DV, P + r*F32_BLOCK)) {
                pa[n] = P + r*F32_BLOCK;
                oa[n] = O32 + r*DV;
                ++n;
            }
        }
        pv_block(DV, ncell, Vf, pa, oa, n);
    }
}
#endif

}  // namespace

bool specee_flash_attn_rows(const ggml_compute_params * params, ggml_tensor * dst) {
    const ggml_tensor * q     = dst->src[0];
    const ggml_tensor * k     = dst->src[1];
    const ggml_tensor * v     = dst->src[2];
    const ggml_tensor * mask  = dst->src[3];
    const ggml_tensor * sinks = dst->src[4];

    if (q->type != GGML_TYPE_F32 || k->type != GGML_TYPE_F16 || v->type != GGML_TYPE_F16) {
        return false;
    }
    // tiles off (specee_fa_tiles_set): ggml's one-pass-per-row loop instead (fp16 accumulators; for
    // measuring this kernel against it and for the tests that check they agree to rounding).
    if (!g_tiles.load(std::memory_order_relaxed)) {
        return false;
    }

    GGML_TENSOR_LOCALS(int64_t, neq, q,   ne)
    GGML_TENSOR_LOCALS(size_t,  nbq, q,   nb)
    GGML_TENSOR_LOCALS(int64_t, nek, k,   ne)
    GGML_TENSOR_LOCALS(size_t,  nbk, k,   nb)
    GGML_TENSOR_LOCALS(int64_t, nev, v,   ne)
    GGML_TENSOR_LOCALS(size_t,  nbv, v,   nb)
    GGML_TENSOR_LOCALS(int64_t, ne,  dst, ne)
    GGML_TENSOR_LOCALS(size_t,  nb,  dst, nb)

    const int64_t DK = nek0;
    const int64_t DV = nev0;
    const int64_t N  = neq1;

    const int ith = params->ith;
    const int nth = params->nth;

    // broadcast factors
    const int64_t rk2 = neq2/nek2;
    const int64_t rk3 = neq3/nek3;
    const int64_t rv2 = neq2/nev2;
    const int64_t rv3 = neq3/nev3;

    float scale         = 1.0f;
    float max_bias      = 0.0f;
    float logit_softcap = 0.0f;

    memcpy(&scale,         (float *) dst->op_params + 0, sizeof(float));
    memcpy(&max_bias,      (float *) dst->op_params + 1, sizeof(float));
    memcpy(&logit_softcap, (float *) dst->op_params + 2, sizeof(float));

    if (logit_softcap != 0) {
        scale /= logit_softcap;
    }

    const uint32_t n_head      = neq2;
    const uint32_t n_head_log2 = 1u << (uint32_t) floor(log2(n_head));

    const float m0 = powf(2.0f, -(max_bias       ) / n_head_log2);
    const float m1 = powf(2.0f, -(max_bias / 2.0f) / n_head_log2);

    ggml_type         const k_vec_dot_type = ggml_get_type_traits_cpu(k->type)->vec_dot_type;
    ggml_from_float_t const q_to_vec_dot   = ggml_get_type_traits_cpu(k_vec_dot_type)->from_float;
    ggml_vec_dot_t    const kq_vec_dot     = ggml_get_type_traits_cpu(k->type)->vec_dot;

    // The tile: `heads` query heads sharing one KV head, times up to `positions` query positions.
    // A decode (or a short batch) with too few tiles to keep every thread busy takes one head a tile.
    const int64_t group = rk2 == rv2 && rk2 <= MAX_ROWS ? rk2 : 1;
    const int64_t tile_rows = std::clamp<int64_t>(g_tile_rows.load(std::memory_order_relaxed), 1, MAX_ROWS);
    const int64_t kv_block = std::clamp<int64_t>(g_kv_block.load(std::memory_order_relaxed), 1, GGML_FA_TILE_KV);

    int64_t heads = group;
    int64_t positions = std::max<int64_t>(1, tile_rows / heads);
    int64_t n_pos_tiles = (N + positions - 1) / positions;
    if (heads > 1 && neq3 * (neq2 / heads) * n_pos_tiles < 2 * nth) {
        heads = 1;
        positions = tile_rows;
        n_pos_tiles = (N + positions - 1) / positions;
    }
    const int64_t n_head_tiles = neq2 / heads;
    const int64_t n_tiles = neq3 * n_head_tiles * n_pos_tiles;

    // per-thread scratch inside what ggml_graph_plan reserves for the tiled prefill path
    const size_t per_thread = GGML_FA_TILE_Q*DK + 2*GGML_FA_TILE_Q*GGML_FA_TILE_KV + GGML_FA_TILE_Q*DV +
                              GGML_FA_TILE_KV*DV + GGML_FA_TILE_KV*DK;
    if ((size_t) (MAX_ROWS*(DK + DV)/2 + DV) > per_thread) {
        return false;
    }
    float       * VKQ32 = (float *) params->wdata + ith*per_thread;            // one row's result
    ggml_fp16_t * Q_q   = (ggml_fp16_t *) (VKQ32 + DV);                      // [row][DK]
    ggml_fp16_t * VKQ16 = Q_q + MAX_ROWS*DK;                                 // [row][DV]

#if SPECEE_FA_LANE_DOTS
    // ggml's fp16 dot is one step of 4*LANES elements (four vectors); other head sizes (leftovers
    // summed in double) take its vec_dot per row. specee_fa_tune(.., wide false): vec_dot always (to
    // measure the tiles' reuse alone). On AVX-512 the same scratch serves ggml's fp16 accumulation
    // (ops the f32 rows do not take).
    float * QT = (float *) (VKQ16 + MAX_ROWS*DV);                            // [row group][DK][LANES]
    float * Kf = QT + MAX_ROWS*DK;                                           // [cell][DK]
    float * KQ = Kf + GGML_FA_TILE_KV*DK;                                    // [cell][MAX_ROWS]
    const bool lane_dots = DK % (4*LANES) == 0 && g_wide.load(std::memory_order_relaxed) &&
                           (size_t) (KQ + GGML_FA_TILE_KV*MAX_ROWS - VKQ32) <= per_thread;
#endif
#if SPECEE_FA_AVX512
    const bool wide = lane_dots && DV % 64 == 0 && DV <= MAX_DV;
#endif
#if SPECEE_FA_F32
    // The f32 row (attn_f32_rows.h) for every row of an op without ALiBi, softcap or sinks: decided by
    // the op, never by the batch, so a decode and a prompt row take the same arithmetic.
    const bool f32_rows = max_bias == 0.0f && logit_softcap == 0.0f && sinks == nullptr && dv_ok(DV);
    thread_local std::vector<float> f32_scratch;
    float * O32 = nullptr;
    float * P   = nullptr;
    float * Vf  = nullptr;
    float * KQf = nullptr;
    if (f32_rows) {
        const size_t need = (size_t) MAX_ROWS*DV + MAX_ROWS*F32_BLOCK + F32_BLOCK*DV + F32_BLOCK*MAX_ROWS;
        if (f32_scratch.size() < need) {
            f32_scratch.resize(need);
        }
        O32 = f32_scratch.data();
        P   = O32 + MAX_ROWS*DV;
        Vf  = P + MAX_ROWS*F32_BLOCK;
        KQf = Vf + F32_BLOCK*DV;
    }
#if SPECEE_FA_LANE_DOTS
    const float * QT_f32 = lane_dots ? QT : nullptr;
    float * Kf_f32 = Kf;
#else
    const float * QT_f32 = nullptr;
    float * Kf_f32 = nullptr;
#endif
#endif

    float               S_row[MAX_ROWS];
    float               M_row[MAX_ROWS];
    float               slope_row[MAX_ROWS];
    const ggml_fp16_t * mp_row[MAX_ROWS];

    if (ith == 0) {
        ggml_threadpool_chunk_set(params->threadpool, nth);
    }
    ggml_barrier(params->threadpool);

    // the last positions first: under a causal mask they see the most cells
    for (int64_t tile = ith; tile < n_tiles; tile = ggml_threadpool_chunk_add(params->threadpool, 1)) {
        const int64_t pt  = n_pos_tiles - 1 - tile / (neq3*n_head_tiles);
        const int64_t iq3 = (tile % (neq3*n_head_tiles)) / n_head_tiles;
        const int64_t ih0 = (tile % n_head_tiles) * heads;
        const int64_t p0  = pt * positions;
        const int64_t np  = std::min(positions, N - p0);
        const int64_t nr  = np * heads;

        // every head of the tile reads the same K/V head
        const int64_t ik3 = iq3 / rk3;
        const int64_t ik2 = ih0 / rk2;
        const int64_t iv3 = iq3 / rv3;
        const int64_t iv2 = ih0 / rv2;

        for (int64_t r = 0; r < nr; ++r) {
            const int64_t iq1 = p0 + r / heads;
            const int64_t iq2 = ih0 + r % heads;
            const uint32_t h = iq2; // head index
            slope_row[r] = (max_bias > 0.0f) ? h < n_head_log2 ? powf(m0, h + 1) : powf(m1, 2*(h - n_head_log2) + 1) : 1.0f;
            S_row[r] = 0.0f;
            M_row[r] = -INFINITY;
            memset(VKQ16 + r*DV, 0, DV*sizeof(ggml_fp16_t));
            mp_row[r] = mask ? (ggml_fp16_t *)((char *) mask->data + iq1*mask->nb[1] + (iq2%mask->ne[2])*mask->nb[2] + (iq3%mask->ne[3])*mask->nb[3]) : NULL;
            const float * pq = (const float *) ((char *) q->data + (iq1*nbq1 + iq2*nbq2 + iq3*nbq3));
            q_to_vec_dot(pq, Q_q + r*DK, DK);
        }
#if SPECEE_FA_LANE_DOTS
        if (lane_dots && nr >= MIN_LANES) {
            for (int64_t r = 0; r < (nr + LANES - 1)/LANES*LANES; ++r) {
                for (int64_t e = 0; e < DK; ++e) {
                    QT[((r/LANES)*DK + e)*LANES + r%LANES] = r < nr ? GGML_CPU_FP16_TO_FP32(Q_q[r*DK + e]) : 0.0f;
                }
            }
        }
#endif

#if SPECEE_FA_F32
        if (f32_rows) {
            f32_tile(DK, DV, nek1, nr, (const char *) k->data + (ik2*nbk2 + ik3*nbk3), nbk1,
                     (const char *) v->data + (iv2*nbv2 + iv3*nbv3), nbv1, QT_f32, Q_q, mp_row, scale, kq_vec_dot,
                     Kf_f32, KQf, Vf, P, O32, M_row, S_row);
            for (int64_t r = 0; r < nr; ++r) {
                const int64_t iq1 = p0 + r / heads;
                const int64_t iq2 = ih0 + r % heads;
                const float S_inv = S_row[r] == 0.0f ? 0.0f : 1.0f/S_row[r];
                float * out = (float *) ((char *) dst->data + (iq3*ne2*ne1 + iq2 + iq1*ne1)*nb1);
                for (int64_t d = 0; d < DV; ++d) {
                    out[d] = O32[r*DV + d]*S_inv;
                }
            }
            continue;
        }
#endif
        for (int64_t ic0 = 0; ic0 < nek1; ic0 += kv_block) {
            const int64_t ic1 = std::min(ic0 + kv_block, nek1);
#if SPECEE_FA_AVX512
            if (wide && nr >= MIN_LANES) {
                const char * k_block = (const char *) k->data + (ic0*nbk1 + ik2*nbk2 + ik3*nbk3);
                const char * v_block = (const char *) v->data + (ic0*nbv1 + iv2*nbv2 + iv3*nbv3);
                dots_lanes(DK, ic1 - ic0, k_block, nbk1, QT, nr, Kf, KQ, kq_vec_dot, Q_q);
                updates_avx512(DV, ic0, ic1 - ic0, v_block, nbv1, KQ, nr, mp_row, slope_row, scale, logit_softcap,
                               M_row, S_row, VKQ16);
                continue;
            }
#endif
            for (int64_t r = 0; r < nr; ++r) {
                const ggml_fp16_t * mp    = mp_row[r];
                const float         slope = slope_row[r];
                const ggml_fp16_t * Qr    = Q_q + r*DK;
                ggml_fp16_t *       VKQr  = VKQ16 + r*DV;

                float S = S_row[r];
                float M = M_row[r];

                // ggml's one-pass row (ggml_compute_forward_flash_attn_ext_f16_one_chunk, F16 V),
                // over this block of cells
                for (int64_t ic = ic0; ic < ic1; ++ic) {
                    const float mv = mp ? slope*GGML_CPU_FP16_TO_FP32(mp[ic]) : 0.0f;
                    if (mv == -INFINITY) {
                        continue;
                    }

                    float s; // KQ value

                    const char * k_data = (const char *) k->data + ( ic*nbk1 + ik2*nbk2 + ik3*nbk3);
                    kq_vec_dot(DK, &s, 0, k_data, 0, Qr, 0, 1);

                    s = s*scale; // scale KQ value

                    if (logit_softcap != 0.0f) {
                        s = logit_softcap*tanhf(s);
                    }

                    s += mv; // apply mask

                    const float Mold = M;

                    float ms = 1.0f; // upon new higher max val, scale VKQ and KQ sum with this value
                    float vs = 1.0f; // post-softmax KQ value, expf(s - M)

                    const char * v_data = ((const char *) v->data + (ic*nbv1 + iv2*nbv2 + iv3*nbv3));

                    if (s > M) {
                        // s is new maximum, ms < 1.0f, vs == expf(s - s) == 1.0f
                        M = s;
                        ms = expf(Mold - M);

                        // V = V*expf(Mold - M)
                        ggml_vec_scale_f16(DV, VKQr, ms);
                    } else {
                        // no new maximum, ms == 1.0f, vs != 1.0f
                        vs = expf(s - M);
                    }

                    // V += v*expf(s - M)
                    ggml_vec_mad_f16(DV, VKQr, (const ggml_fp16_t *) v_data, vs);

                    S = S*ms + vs; // scale and increment sum with partial sum
                }

                S_row[r] = S;
                M_row[r] = M;
            }
        }

        for (int64_t r = 0; r < nr; ++r) {
            const int64_t iq1 = p0 + r / heads;
            const int64_t iq2 = ih0 + r % heads;
            const uint32_t h = iq2;
            float S = S_row[r];
            float M = M_row[r];

            for (int64_t d = 0; d < DV; ++d) {
                VKQ32[d] = GGML_CPU_FP16_TO_FP32(VKQ16[r*DV + d]);
            }

            // sinks
            if (sinks) {
                const float s = ((float *)((char *) sinks->data))[h];

                float ms = 1.0f;
                float vs = 1.0f;

                if (s > M) {
                    ms = expf(M - s);
                    M = s;
                    ggml_vec_scale_f32(DV, VKQ32, ms);
                } else {
                    vs = expf(s - M);
                }

                S = S*ms + vs;
            }

            // V /= S
            const float S_inv = S == 0.0f ? 0.0f : 1.0f/S;
            ggml_vec_scale_f32(DV, VKQ32, S_inv);

            // permute(0, 2, 1, 3)
            memcpy((char *) dst->data + (iq3*ne2*ne1 + iq2 + iq1*ne1)*nb1, VKQ32, nb1);
        }
    }
    return true;
}

void specee_fa_tiles_set(bool on) {
    g_tiles.store(on, std::memory_order_relaxed);
}

void specee_fa_tune(int tile_rows, int kv_block, bool wide) {
    g_tile_rows.store(tile_rows > 0 ? tile_rows : MAX_ROWS, std::memory_order_relaxed);
    g_kv_block.store(kv_block > 0 ? kv_block : 64, std::memory_order_relaxed);
    g_wide.store(wide, std::memory_order_relaxed);
}
