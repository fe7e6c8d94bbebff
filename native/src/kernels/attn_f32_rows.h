// The f32 attention row (flash_attn_rows.cpp): what every F16-K/V row of an op without ALiBi, softcap
// or sinks computes, decodes and prompt rows alike, on AVX-512 or AVX2 (SPECEE_FA_F32; other CPUs keep
// ggml's one pass per row).
//
// ggml's one pass keeps a row's V accumulator in fp16 and its softmax online cell by cell: a scalar
// exp, a branch and a convert-fma-convert of the whole accumulator per cell and row, three quarters
// of a long prompt's time here. This row is defined over fixed blocks of 64 KV cells counted from
// cell 0, in f32:
//   s[c]  = KQ[c]*scale + mask[c]                 (KQ: ggml_vec_dot_f16, as before)
//   M'    = max(M, max over the block's visible s[c])
//   O, S *= expf(M - M')                          (only when M' > M; nothing yet when M is -inf)
//   p[c]  = exp(s[c] - M') (ggml_v_expf), 0 where the mask hides the cell
//   S    += the block's sum of p, a fixed tree over its lanes
//   O[d]  = fma(p[c], V[c][d], O[d]) for c ascending
// then out = O * (1/S). Every operation is elementwise or a reduction in a fixed order over the
// block, so a row's bits depend on its own Q, mask and the cache, never on the tile, the batch, the
// lanes or the thread: a decode is the same row (tests/test_batch_invariance.py). A hidden cell
// adds fma(0, V, O) = O (the cache's V are finite), so whether a block is cut short at the end of
// the cache, at the last cell any row of a tile sees (less work for decodes and the diagonal), or
// masked does not matter either. The values differ from ggml's fp16 accumulation only by rounding
// (f32 is the more exact of the two: native/build.py --fa-bench measures both against double).
#pragma once

#include "ggml-impl.h"
#include "simd-mappings.h"
#include "vec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace specee_attn {

constexpr int64_t F32_BLOCK = 64;

// The lanes of one ISA: the few operations the ISA-free pieces below need. Each is one intrinsic, so
// a row's arithmetic is spelled out exactly (fma is an fma), whatever template instance runs it.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && !defined(__AVX512FP16__) && defined(__GNUC__)
#define SPECEE_FA_F32 1
#define SPECEE_FA_F32_AVX512 1
struct lanes {
    using vec = __m512;
    static constexpr int64_t W = 16;
    static constexpr int PV_ROWS = 4;  // 4 rows x 4 accumulators + 4 V in 32 registers
    static vec load(const float * x) { return _mm512_loadu_ps(x); }
    static void store(float * x, vec v) { _mm512_storeu_ps(x, v); }
    static vec set1(float x) { return _mm512_set1_ps(x); }
    static vec mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
    static vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
    static vec from_f16(const ggml_fp16_t * x) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) x)); }
};
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__GNUC__)
#define SPECEE_FA_F32 1
struct lanes {
    using vec = __m256;
    static constexpr int64_t W = 8;
    static constexpr int PV_ROWS = 2;  // 2 rows x 4 accumulators + 4 V in 16 registers
    static vec load(const float * x) { return _mm256_loadu_ps(x); }
    static void store(float * x, vec v) { _mm256_storeu_ps(x, v); }
    static vec set1(float x) { return _mm256_set1_ps(x); }
    static vec mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
    static vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
    static vec from_f16(const ggml_fp16_t * x) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) x)); }
};
#else
#define SPECEE_FA_F32 0
#endif

#if SPECEE_FA_F32
// the V widths the accumulators cover: four vectors at a time
inline bool dv_ok(int64_t DV) { return DV % (4*lanes::W) == 0; }

inline void v_to_f32(int64_t DV, const ggml_fp16_t * v, float * out) {
    for (int64_t d = 0; d < DV; d += lanes::W) {
        lanes::store(out + d, lanes::from_f16(v + d));
    }
}

inline void scale_row(int64_t DV, float * O, float f) {
    const lanes::vec fv = lanes::set1(f);
    for (int64_t d = 0; d < DV; d += lanes::W) {
        lanes::store(O + d, lanes::mul(lanes::load(O + d), fv));
    }
}

// O[r][d] = fma(p[r][c], V[c][d], O[r][d]) over the block's cells in order, for R rows at a time (V
// loaded once for them): each row's fma chain is the same whatever R.
template <int R>
inline void pv_rows(int64_t DV, int64_t ncell, const float * Vf, const float * const * p, float * const * O) {
    constexpr int64_t W = lanes::W;
    for (int64_t d = 0; d < DV; d += 4*W) {
        lanes::vec acc[R][4];
        for (int r = 0; r < R; ++r) {
            for (int j = 0; j < 4; ++j) {
                acc[r][j] = lanes::load(O[r] + d + W*j);
            }
        }
        for (int64_t c = 0; c < ncell; ++c) {
            const float * vc = Vf + c*DV + d;
            const lanes::vec v0 = lanes::load(vc);
            const lanes::vec v1 = lanes::load(vc + W);
            const lanes::vec v2 = lanes::load(vc + 2*W);
            const lanes::vec v3 = lanes::load(vc + 3*W);
            for (int r = 0; r < R; ++r) {
                const lanes::vec pb = lanes::set1(p[r][c]);
                acc[r][0] = lanes::fma(pb, v0, acc[r][0]);
                acc[r][1] = lanes::fma(pb, v1, acc[r][1]);
                acc[r][2] = lanes::fma(pb, v2, acc[r][2]);
                acc[r][3] = lanes::fma(pb, v3, acc[r][3]);
            }
        }
        for (int r = 0; r < R; ++r) {
            for (int j = 0; j < 4; ++j) {
                lanes::store(O[r] + d + W*j, acc[r][j]);
            }
        }
    }
}

inline void pv_block(int64_t DV, int64_t ncell, const float * Vf, const float * const * p, float * const * O, int64_t n) {
    constexpr int64_t G = lanes::PV_ROWS;
    int64_t i = 0;
    for (; i + G <= n; i += G) {
        pv_rows<G>(DV, ncell, Vf, p + i, O + i);
    }
    switch (n - i) {
        case 3: pv_rows<3>(DV, ncell, Vf, p + i, O + i); break;
        case 2: pv_rows<2>(DV, ncell, Vf, p + i, O + i); break;
        case 1: pv_rows<1>(DV, ncell, Vf, p + i, O + i); break;
        default: break;
    }
}
#endif

// The softmax of a block and the mask's extent, per ISA (masked lanes on AVX-512, staged on AVX2).
#if SPECEE_FA_F32 && defined(SPECEE_FA_F32_AVX512)
// One row's block: its scores (KQ[c*kq_stride]) to probabilities p[0..64), its max M, sum S and
// accumulator O updated as above; false when the mask hides every cell of the block from the row.
inline bool softmax_block(int64_t DV, int64_t ncell, const float * kq, int64_t kq_stride, const ggml_fp16_t * mask,
                          float scale, float & M, float & S, float * O, float * p) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
    __m512 s[4];
    __mmask16 seen[4];
    for (int q = 0; q < 4; ++q) {
        const int64_t left = std::clamp<int64_t>(ncell - 16*q, 0, 16);
        const __mmask16 in = left == 16 ? (__mmask16) 0xFFFF : (__mmask16) ((1u << left) - 1);
        const __m512i idx = _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(16*q)), _mm512_set1_epi32((int) kq_stride));
        const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), in, idx, kq, 4);
        const __m512 mv = mask ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(in, mask + 16*q)) : _mm512_setzero_ps();
        seen[q] = _mm512_mask_cmp_ps_mask(in, mv, minus_inf, _CMP_NEQ_OQ);
        s[q] = _mm512_mask_blend_ps(seen[q], minus_inf, _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(scale)), mv));
    }
    if ((seen[0] | seen[1] | seen[2] | seen[3]) == 0) {
        return false;
    }
    const float mb = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(s[0], s[1]), _mm512_max_ps(s[2], s[3])));
    const float Mn = std::max(M, mb);
    __m512 pv[4];
    for (int q = 0; q < 4; ++q) {
        pv[q] = _mm512_maskz_mov_ps(seen[q], ggml_v_expf(_mm512_sub_ps(s[q], _mm512_set1_ps(Mn))));
        _mm512_storeu_ps(p + 16*q, pv[q]);
    }
    const float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(pv[0], pv[1]), _mm512_add_ps(pv[2], pv[3])));
    if (M != -INFINITY && Mn > M) {
        const float f = expf(M - Mn);
        scale_row(DV, O, f);
        S *= f;
    }
    S += sum;
    M = Mn;
    return true;
}

// One past the last of the block's cells the mask shows the row (fp16 -inf is 0xFC00); 0: none.
inline int64_t block_visible_end(const ggml_fp16_t * mask, int64_t ncell) {
    if (mask == nullptr) {
        return ncell;
    }
    const __m512i hidden = _mm512_set1_epi16((short) 0xFC00);
    for (int64_t c = (ncell - 1) / 32 * 32; c >= 0; c -= 32) {
        const __mmask32 in = ncell - c >= 32 ? (__mmask32) 0xFFFFFFFF : (__mmask32) ((1u << (ncell - c)) - 1);
        const __mmask32 shown = _mm512_mask_cmpneq_epi16_mask(in, _mm512_maskz_loadu_epi16(in, mask + c), hidden);
        if (shown != 0) {
            return c + 32 - __builtin_clz((unsigned) shown);
        }
    }
    return 0;
}


#elif SPECEE_FA_F32
inline float hmax8(__m256 x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// lanes i + i+4, then the two halves' pairs, then the last two: one fixed tree
inline float hsum8(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// One row's block: its scores (KQ[c*kq_stride]) to probabilities p[0..64), its max M, sum S and
// accumulator O updated as above; false when the mask hides every cell of the block from the row.
inline bool softmax_block(int64_t DV, int64_t ncell, const float * kq, int64_t kq_stride, const ggml_fp16_t * mask,
                          float scale, float & M, float & S, float * O, float * p) {
    alignas(32) float s[F32_BLOCK];
    bool any = false;
    for (int64_t c = 0; c < F32_BLOCK; ++c) {
        const float mv = c >= ncell ? -INFINITY : mask ? GGML_CPU_FP16_TO_FP32(mask[c]) : 0.0f;
        const bool seen = mv != -INFINITY;
        s[c] = seen ? kq[c*kq_stride]*scale + mv : -INFINITY;
        any = any || seen;
    }
    if (!any) {
        return false;
    }
    const __m256 minus_inf = _mm256_set1_ps(-INFINITY);
    __m256 mx = _mm256_load_ps(s);
    for (int q = 1; q < 8; ++q) {
        mx = _mm256_max_ps(mx, _mm256_load_ps(s + 8*q));
    }
    const float Mn = std::max(M, hmax8(mx));
    __m256 pv[8];
    for (int q = 0; q < 8; ++q) {
        const __m256 sq = _mm256_load_ps(s + 8*q);
        const __m256 seen = _mm256_cmp_ps(sq, minus_inf, _CMP_NEQ_OQ);
        pv[q] = _mm256_and_ps(seen, ggml_v_expf(_mm256_sub_ps(sq, _mm256_set1_ps(Mn))));
        _mm256_storeu_ps(p + 8*q, pv[q]);
    }
    const __m256 t0 = _mm256_add_ps(_mm256_add_ps(pv[0], pv[1]), _mm256_add_ps(pv[2], pv[3]));
    const __m256 t1 = _mm256_add_ps(_mm256_add_ps(pv[4], pv[5]), _mm256_add_ps(pv[6], pv[7]));
    const float sum = hsum8(_mm256_add_ps(t0, t1));
    if (M != -INFINITY && Mn > M) {
        const float f = expf(M - Mn);
        scale_row(DV, O, f);
        S *= f;
    }
    S += sum;
    M = Mn;
    return true;
}


// One past the last of the block's cells the mask shows the row (fp16 -inf is 0xFC00); 0: none.
inline int64_t block_visible_end(const ggml_fp16_t * mask, int64_t ncell) {
    if (mask == nullptr) {
        return ncell;
    }
    for (int64_t c = ncell; c > 0; --c) {
        if (mask[c - 1] != 0xFC00) {
            return c;
        }
    }
    return 0;
}
#endif

}  // namespace specee_attn
