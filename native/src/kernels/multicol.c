// Multi-column quantised dot products (see multicol.h). Compiled inside ggml-cpu (patch 0009) so it
// sees the block layouts and the CPU backend's fp16 conversion.
//
// Fidelity rule: per column, every float operation (conversions, products, fused multiply-adds,
// the final horizontal sum) is the one ggml's AVX2 vec_dot performs, in the same order, and every
// integer lane holds the same value, so results are bit-identical to ggml's for any column count.
// Only the weight-side work (unpacking nibbles, high bits and scales) is shared between columns.
// kernel-bench.c (native/src/tools) checks both properties on random weights for every type.
#define GGML_COMMON_DECL_C
#include "ggml-common.h"
#include "ggml-cpu-impl.h"
#include "multicol.h"
#include "simd-mappings.h"

#include <string.h>

// The switches read no environment: the worker sets them at start from engine/knobs.py
// (SPECEE_TEST_MULTICOL_KERNELS, SPECEE_TEST_SPLIT_BY_THREAD), the bench flips them per
// measurement. On unless told otherwise.
static volatile int g_enabled = 1;

static int enabled(void) {
    return g_enabled;
}

void specee_multicol_set(bool on) {
    g_enabled = on ? 1 : 0;
}

static volatile int g_split = 1;
static int64_t g_splits = 0;

void specee_split_by_thread_set(bool on) {
    g_split = on ? 1 : 0;
}

bool specee_split_by_thread(int64_t nr0, int64_t nr1, int64_t planes) {
    // weights by a few activation rows only: attention's per-head products keep upstream's chunks
    const bool split = g_split && planes == 1 && nr1 <= SPECEE_SPLIT_MAX_ROWS && nr0 > nr1;
    if (split) {
        __atomic_fetch_add(&g_splits, 1, __ATOMIC_RELAXED);
    }
    return split;
}

int64_t specee_split_by_thread_count(void) {
    return __atomic_load_n(&g_splits, __ATOMIC_RELAXED);
}

static int64_t g_rows = 0;

void specee_multicol_note(int64_t rows) {
    __atomic_fetch_add(&g_rows, rows, __ATOMIC_RELAXED);
}

int64_t specee_multicol_rows(void) {
    return __atomic_load_n(&g_rows, __ATOMIC_RELAXED);
}

bool specee_multicol_available(void) {
    const int was = g_enabled;
    g_enabled = 1;
    const bool any = specee_vec_dot_multi(GGML_TYPE_Q8_0, 2) != NULL;
    g_enabled = was;
    return any;
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#    include <immintrin.h>

#    define MAXC SPECEE_MULTICOL_MAX
#    define INLINE static inline __attribute__((always_inline))
#    define F16(x) GGML_CPU_FP16_TO_FP32(x)

// sum of the 8 lanes, pairwise in ggml's order
INLINE float hsum8(const __m256 x) {
    __m128 r = _mm256_extractf128_ps(x, 1);
    r = _mm_add_ps(r, _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// 16 bytes of nibbles -> 32 bytes: low nibbles first, then high nibbles
INLINE __m256i nibbles32(const uint8_t * p) {
    const __m128i t = _mm_loadu_si128((const __m128i *) p);
    const __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(_mm256_set1_epi8(0xF), b);
}

// 32 bits -> 32 bytes of 0x00 / 0xFF
INLINE __m256i bits32(const uint8_t * p) {
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int) v),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i probe = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(probe, _mm256_set1_epi64x(-1));
}

// unsigned x signed bytes, 4 adjacent products per int32 lane, as floats (ggml's instruction choice)
INLINE __m256 dot_us8(const __m256i ax, const __m256i sy) {
#    if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy));
#    elif defined(__AVXVNNI__)
    return _mm256_cvtepi32_ps(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ax, sy));
#    else
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ax, sy)));
#    endif
}

// signed x signed bytes; ax = |x| is the shared half
INLINE __m256 dot_i8(const __m256i x, const __m256i ax, const __m256i y) {
#    if defined(__AVXVNNIINT8__)
    (void) ax;
    return _mm256_cvtepi32_ps(_mm256_dpbssd_epi32(_mm256_setzero_si256(), x, y));
#    else
    return dot_us8(ax, _mm256_sign_epi8(y, x));
#    endif
}

INLINE void q4_1_body(int n, float * s, const void * vx, const void * const * vy, const float * ys, const int nc) {
    const block_q4_1 * x = vx;
    const int nb = n / QK8_1;
    const block_q8_1 * y[MAXC];
    __m256 acc[MAXC];
    float summs[MAXC];
    for (int c = 0; c < nc; ++c) {
        y[c] = vy[c];
        acc[c] = _mm256_setzero_ps();
        summs[c] = 0;
    }
    for (int ib = 0; ib < nb; ++ib) {
        const float m = F16(x[ib].m);
        const __m256 d0 = _mm256_set1_ps(F16(x[ib].d));
        const __m256i qx = nibbles32(x[ib].qs);
        for (int c = 0; c < nc; ++c) {
            const float * yc = ys + 2 * (c * nb + ib);  // the column's block scale d and sum s
            summs[c] += m * yc[1];
            const __m256 d = _mm256_mul_ps(d0, _mm256_set1_ps(yc[0]));
            const __m256i qy = _mm256_loadu_si256((const __m256i *) y[c][ib].qs);
            acc[c] = _mm256_fmadd_ps(d, dot_us8(qx, qy), acc[c]);
        }
    }
    for (int c = 0; c < nc; ++c) {
        s[c] = hsum8(acc[c]) + summs[c];
    }
}

// Q8_0 and Q5_0 share everything but how a block's 32 signed quants are unpacked: one body, the
// block's scale and quants passed as inlined accessors
typedef float (*block_scale_fn)(const void * vx, int ib);
typedef __m256i (*block_quants_fn)(const void * vx, int ib);

INLINE float q8_0_scale(const void * vx, int ib) {
    return F16(((const block_q8_0 *) vx)[ib].d);
}

INLINE __m256i q8_0_quants(const void * vx, int ib) {
    return _mm256_loadu_si256((const __m256i *) ((const block_q8_0 *) vx)[ib].qs);
}

INLINE float q5_0_scale(const void * vx, int ib) {
    return F16(((const block_q5_0 *) vx)[ib].d);
}

INLINE __m256i q5_0_quants(const void * vx, int ib) {
    const block_q5_0 * x = (const block_q5_0 *) vx + ib;
    // 5-bit values minus 16: the fifth bit clear sets the high nibble to 0xF (two's complement)
    const __m256i hi = _mm256_andnot_si256(bits32(x->qh), _mm256_set1_epi8((char) 0xF0));
    return _mm256_or_si256(nibbles32(x->qs), hi);
}

INLINE void signed32_body(int n, float * s, const void * vx, const void * const * vy, const float * ys, const int nc,
                          block_scale_fn scale, block_quants_fn quants) {
    const int nb = n / QK8_0;
    const block_q8_0 * y[MAXC];
    __m256 acc[MAXC];
    for (int c = 0; c < nc; ++c) {
        y[c] = vy[c];
        acc[c] = _mm256_setzero_ps();
    }
    for (int ib = 0; ib < nb; ++ib) {
        const float dx = scale(vx, ib);
        const __m256i qx = quants(vx, ib);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        for (int c = 0; c < nc; ++c) {
            const __m256 d = _mm256_set1_ps(dx * ys[2 * (c * nb + ib)]);
            const __m256i qy = _mm256_loadu_si256((const __m256i *) y[c][ib].qs);
            acc[c] = _mm256_fmadd_ps(d, dot_i8(qx, ax, qy), acc[c]);
        }
    }
    for (int c = 0; c < nc; ++c) {
        s[c] = hsum8(acc[c]);
    }
}

INLINE void q8_0_body(int n, float * s, const void * vx, const void * const * vy, const float * ys, const int nc) {
    signed32_body(n, s, vx, vy, ys, nc, q8_0_scale, q8_0_quants);
}

INLINE void q5_0_body(int n, float * s, const void * vx, const void * const * vy, const float * ys, const int nc) {
    signed32_body(n, s, vx, vy, ys, nc, q5_0_scale, q5_0_quants);
}

INLINE void unpack_scales_mins(const uint8_t * p, uint32_t u[4]) {
    memcpy(u, p, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    const uint32_t u1 = u[1] & 0x3f3f3f3f;
    u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    u[2] = u1;
    u[0] &= 0x3f3f3f3f;
}

// A block_q4_K's / block_q5_K's 8 six-bit scales and 8 six-bit mins (12 packed bytes) as int16:
// the scales in both 128-bit halves (returned), the mins in *mins (ggml's AVX2 q4_K/q5_K unpack)
INLINE __m256i k_scales_mins(const uint8_t * packed, __m128i * mins) {
    uint32_t u[4];
    unpack_scales_mins(packed, u);
    const __m256i mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32((int) u[3], (int) u[2], (int) u[1], (int) u[0]));
    *mins = _mm256_extracti128_si256(mins_and_scales, 1);
    const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
    return _mm256_insertf128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
}

INLINE void q4_K_body(int n, float * s, const void * vx, const void * const * vy, const float * ys, const int nc) {
    (void) ys;  // block_q8_K's scale is a float already
    const block_q4_K * x = vx;
    const block_q8_K * y[MAXC];
    __m256 acc[MAXC];
    __m128 acc_m[MAXC];
    for (int c = 0; c < nc; ++c) {
        y[c] = vy[c];
        acc[c] = _mm256_setzero_ps();
        acc_m[c] = _mm_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int i = 0; i < n / QK_K; ++i) {
        const float xd = F16(x[i].d);
        const float xmin = F16(x[i].dmin);
        __m128i mins;
        const __m256i scales = k_scales_mins(x[i].scales, &mins);

        __m256i sumi[MAXC];
        for (int c = 0; c < nc; ++c) {
            const float dmin = -y[c][i].d * xmin;
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y[c][i].bsums);
            const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
            const __m128i prod = _mm_madd_epi16(mins, q8s);
            acc_m[c] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[c]);
            sumi[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < QK_K / 64; ++j) {
            // every int16 lane gets sub-block 2j's (2j+1's) scale
            const __m256i scale_l = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short) (((4 * j + 1) << 8) | (4 * j))));
            const __m256i scale_h = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short) (((4 * j + 3) << 8) | (4 * j + 2))));
            const __m256i q4bits = _mm256_loadu_si256((const __m256i *) (x[i].qs + 32 * j));
            const __m256i q4l = _mm256_and_si256(q4bits, m4);
            const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
            for (int c = 0; c < nc; ++c) {
                const int8_t * q8 = y[c][i].qs + 64 * j;
                const __m256i p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, _mm256_loadu_si256((const __m256i *) q8)));
                const __m256i p16h =
                    _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, _mm256_loadu_si256((const __m256i *) (q8 + 32))));
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p16l, p16h));
            }
        }
        for (int c = 0; c < nc; ++c) {
            const float d = y[c][i].d * xd;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for (int c = 0; c < nc; ++c) {
        __m128 m = _mm_add_ps(acc_m[c], _mm_movehl_ps(acc_m[c], acc_m[c]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        s[c] = hsum8(acc[c]) + _mm_cvtss_f32(m);
    }
}

INLINE void q5_K_body(int n, float * s, const void * vx, const void * const * vy, const float * ys, const int nc) {
    (void) ys;
    const block_q5_K * x = vx;
    const block_q8_K * y[MAXC];
    __m256 acc[MAXC];
    float summs[MAXC];
    for (int c = 0; c < nc; ++c) {
        y[c] = vy[c];
        acc[c] = _mm256_setzero_ps();
        summs[c] = 0;
    }
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int i = 0; i < n / QK_K; ++i) {
        const float xd = F16(x[i].d);
        const float xmin = F16(x[i].dmin);
        __m128i mins;
        const __m256i scales = k_scales_mins(x[i].scales, &mins);
        __m256i sumi[MAXC];
        for (int c = 0; c < nc; ++c) {
            // the mins' part: an exact integer times -y.d * dmin, added as a float per block (ggml's summs)
            const float dmin = -y[c][i].d * xmin;
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y[c][i].bsums);
            const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
            const __m128i prod = _mm_madd_epi16(mins, q8s);
            const __m128i hsum = _mm_hadd_epi32(_mm_hadd_epi32(prod, _mm_setzero_si128()), _mm_setzero_si128());
            summs[c] += dmin * _mm_extract_epi32(hsum, 0);
            sumi[c] = _mm256_setzero_si256();
        }
        const __m256i hbits = _mm256_loadu_si256((const __m256i *) x[i].qh);
        for (int j = 0; j < QK_K / 64; ++j) {
            const __m256i scale_0 = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short) (((4 * j + 1) << 8) | (4 * j))));
            const __m256i scale_1 = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short) (((4 * j + 3) << 8) | (4 * j + 2))));
            const __m256i q5bits = _mm256_loadu_si256((const __m256i *) (x[i].qs + 32 * j));
            // the fifth bit of element e of sub-block 2j (2j+1) is bit 2j (2j+1) of qh[e], moved to bit 4
            const __m256i h0 = _mm256_slli_epi16(_mm256_srli_epi16(_mm256_and_si256(hbits, _mm256_set1_epi8((char) (1 << (2 * j)))), 2 * j), 4);
            const __m256i h1 =
                _mm256_slli_epi16(_mm256_srli_epi16(_mm256_and_si256(hbits, _mm256_set1_epi8((char) (1 << (2 * j + 1)))), 2 * j + 1), 4);
            const __m256i q5_0 = _mm256_add_epi8(_mm256_and_si256(q5bits, m4), h0);
            const __m256i q5_1 = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(q5bits, 4), m4), h1);
            for (int c = 0; c < nc; ++c) {
                const int8_t * q8 = y[c][i].qs + 64 * j;
                const __m256i p0 = _mm256_madd_epi16(scale_0, _mm256_maddubs_epi16(q5_0, _mm256_loadu_si256((const __m256i *) q8)));
                const __m256i p1 = _mm256_madd_epi16(scale_1, _mm256_maddubs_epi16(q5_1, _mm256_loadu_si256((const __m256i *) (q8 + 32))));
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p0, p1));
            }
        }
        for (int c = 0; c < nc; ++c) {
            const float d = y[c][i].d * xd;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for (int c = 0; c < nc; ++c) {
        s[c] = hsum8(acc[c]) + summs[c];
    }
}

#    if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Q6_K with AVX-512: ggml's AVX2 vec_dot leaves, per super-block, 8 int32 lanes (lane l: the
// scaled products of elements 32k + 4l .. 32k + 4l + 3 of each 128-element half, minus 32 times
// the scaled sums of elements 32l .. 32l + 31) and converts them to floats. Those integers are
// exact, so this body makes the same 8 per lane two 32-element groups at a time (a zmm's halves:
// elements 64m .. 64m + 63, contiguous in the activation row) and folds the halves, with madd and
// add fused (dpwssd): half the instructions per activation row. The float work is ggml's.
INLINE void q6_K_body(int n, float * s, const void * vx, const void * const * vy, const float * ys, const int nc) {
    (void) ys;
    const block_q6_K * x = vx;
    const block_q8_K * y[MAXC];
    __m256 acc[MAXC];
    for (int c = 0; c < nc; ++c) {
        y[c] = vy[c];
        acc[c] = _mm256_setzero_ps();
    }
    const __m512i m15 = _mm512_set1_epi8(15);
    // the high bits: low half (elements 0-31 of a 128) bits 0-1 to bit 4, high half (32-63) bits 2-3 to
    // bit 4; then (64-95) bits 4-5 stay, (96-127) bits 6-7 to bit 4
    const __m512i hmask_a = _mm512_inserti64x4(_mm512_set1_epi8(3), _mm256_set1_epi8(12), 1);
    const __m512i hshift_a = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i hmask_b = _mm512_inserti64x4(_mm512_set1_epi8(48), _mm256_set1_epi8(-64), 1);
    const __m512i hshift_b = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    // int16 lane l of group m's scales: scale 4m + l / 8 (16 elements each)
    __m512i scale_idx[4];
    for (int m = 0; m < 4; ++m) {
        int16_t idx[32];
        for (int l = 0; l < 32; ++l) {
            idx[l] = (int16_t) (4 * m + l / 8);
        }
        scale_idx[m] = _mm512_loadu_si512((const void *) idx);
    }
    for (int i = 0; i < n / QK_K; ++i) {
        const float xd = F16(x[i].d);
        const __m128i scales = _mm_loadu_si128((const __m128i *) x[i].scales);
        const __m256i scales_16 = _mm256_cvtepi8_epi16(scales);
        __m512i q[4], sc[4];
        for (int j = 0; j < QK_K / 128; ++j) {
            const __m512i ql = _mm512_loadu_si512((const void *) (x[i].ql + 64 * j));
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *) (x[i].qh + 32 * j)));
            const __m512i ha = _mm512_sllv_epi16(_mm512_and_si512(qh, hmask_a), hshift_a);
            const __m512i hb = _mm512_srlv_epi16(_mm512_and_si512(qh, hmask_b), hshift_b);
            // elements 0-31 and 32-63 of this half, then 64-95 and 96-127
            q[2 * j] = _mm512_or_si512(_mm512_and_si512(ql, m15), ha);
            q[2 * j + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m15), hb);
        }
        const __m512i sc16 = _mm512_castsi256_si512(scales_16);
        for (int m = 0; m < 4; ++m) {
            sc[m] = _mm512_permutexvar_epi16(scale_idx[m], sc16);
        }
        for (int c = 0; c < nc; ++c) {
            const int8_t * q8 = y[c][i].qs;
            __m512i sum = _mm512_setzero_si512();
            for (int m = 0; m < 4; ++m) {
                sum = _mm512_dpwssd_epi32(sum, sc[m], _mm512_maddubs_epi16(q[m], _mm512_loadu_si512((const void *) (q8 + 64 * m))));
            }
            const __m256i sumi = _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
            // the -32 offset of every 6-bit value, applied once per block through the q8 sums
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y[c][i].bsums);
            const __m256i sub = _mm256_slli_epi32(_mm256_madd_epi16(q8sums, scales_16), 5);
            const float d = y[c][i].d * xd;
            acc[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(&d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, sub)), acc[c]);
        }
    }
    for (int c = 0; c < nc; ++c) {
        s[c] = hsum8(acc[c]);
    }
}
#    else
INLINE void q6_K_body(int n, float * s, const void * vx, const void * const * vy, const float * ys, const int nc) {
    (void) ys;
    const block_q6_K * x = vx;
    const block_q8_K * y[MAXC];
    __m256 acc[MAXC];
    for (int c = 0; c < nc; ++c) {
        y[c] = vy[c];
        acc[c] = _mm256_setzero_ps();
    }
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i m15 = _mm256_set1_epi8(15);
    for (int i = 0; i < n / QK_K; ++i) {
        const float xd = F16(x[i].d);
        const __m128i scales = _mm_loadu_si128((const __m128i *) x[i].scales);
        const __m256i scales_16 = _mm256_cvtepi8_epi16(scales);
        __m256i sumi[MAXC], sub[MAXC];
        for (int c = 0; c < nc; ++c) {
            // the -32 offset of every 6-bit value, applied once per block through the q8 sums
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y[c][i].bsums);
            sub[c] = _mm256_slli_epi32(_mm256_madd_epi16(q8sums, scales_16), 5);
            sumi[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < QK_K / 128; ++j) {
            const uint8_t * ql = x[i].ql + 64 * j;
            const __m256i bits1 = _mm256_loadu_si256((const __m256i *) ql);
            const __m256i bits2 = _mm256_loadu_si256((const __m256i *) (ql + 32));
            const __m256i bitsH = _mm256_loadu_si256((const __m256i *) (x[i].qh + 32 * j));
            const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(bitsH, m3), 4);
            const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(bitsH, _mm256_set1_epi8(12)), 2);
            const __m256i h2 = _mm256_and_si256(bitsH, _mm256_set1_epi8(48));
            const __m256i h3 = _mm256_srli_epi16(_mm256_and_si256(bitsH, _mm256_set1_epi8(-64)), 2);
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(bits1, m15), h0),
                _mm256_or_si256(_mm256_and_si256(bits2, m15), h1),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m15), h2),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m15), h3),
            };
            __m256i sc[4];
            for (int k = 0; k < 4; ++k) {
                // int16 lanes 0-7 get scale 2t, lanes 8-15 scale 2t+1 (t = 4j + k: 16 values each)
                const long long t = 4 * j + k;
                const __m128i idx = _mm_set_epi64x(0x0101010101010101LL * (2 * t + 1), 0x0101010101010101LL * (2 * t));
                sc[k] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, idx));
            }
            for (int c = 0; c < nc; ++c) {
                const int8_t * q8 = y[c][i].qs + 128 * j;
                __m256i p[4];
                for (int k = 0; k < 4; ++k) {
                    p[k] = _mm256_madd_epi16(sc[k], _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *) (q8 + 32 * k))));
                }
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p[0], p[1]));
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p[2], p[3]));
            }
        }
        for (int c = 0; c < nc; ++c) {
            const float d = y[c][i].d * xd;
            const __m256i v = _mm256_sub_epi32(sumi[c], sub[c]);
            acc[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(&d), _mm256_cvtepi32_ps(v), acc[c]);
        }
    }
    for (int c = 0; c < nc; ++c) {
        s[c] = hsum8(acc[c]);
    }
}
#    endif

// ggml-cpu's repacked Q4_K (repack.h's block_q4_Kx8: 8 weight rows' super-blocks interleaved, each
// row's 8 quants of a sub-block pair in one 8-byte run; in the 64 bytes at qs + 256 sb + 64 k, row
// j's run (bytes 8j..8j+7) holds elements 8k..8k+7 of sub-block 2sb in its low nibbles and of
// 2sb+1 in its high ones; scales + 24 sb (+ 12): the 8 rows' scale and min of sub-block 2sb (2sb+1)
// packed as a block_q4_K packs its 8 sub-blocks' ones).
typedef struct {
    ggml_half d[8];
    ggml_half dmin[8];
    uint8_t scales[96];
    uint8_t qs[1024];
} q4_Kx8;

#    if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && \
        defined(__AVX512VNNI__)
// One sub-block pair's weights, unpacked once: the 8 rows' quants as bytes, their scales as ints.
typedef struct {
    __m512i lo[4], hi[4];  // sub-block 2sb (2sb+1): elements 8k..8k+7 of row j in bytes 8j..8j+7 of [k]
    __m512i sc0, sc1;      // row j's scale of sub-block 2sb (2sb+1) in 64-bit lane j
} q4_Kx8_pair;

INLINE void q4_Kx8_unpack(const uint8_t * qs, const uint32_t u0[4], const uint32_t u1[4], q4_Kx8_pair * w) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    for (int k = 0; k < 4; ++k) {
        const __m512i raw = _mm512_loadu_si512((const void *) (qs + 64 * k));
        w->lo[k] = _mm512_and_si512(raw, m4);
        w->hi[k] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    }
    w->sc0 = _mm512_cvtepu8_epi64(_mm_set_epi32(0, 0, (int) u0[1], (int) u0[0]));
    w->sc1 = _mm512_cvtepu8_epi64(_mm_set_epi32(0, 0, (int) u1[1], (int) u1[0]));
}

// Row j's exact sum over the pair (scale of 2sb times its 32 products, plus 2sb+1's) as float lane j:
// one dpbusd per 64 products (8 rows x 8 elements) instead of ggml's maddubs, add, shuffle and blend.
INLINE __m256 q4_Kx8_pair_sums(const q4_Kx8_pair * w, const int8_t * q8) {
    __m512i sl = _mm512_setzero_si512(), sh = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
        int64_t al, ah;
        memcpy(&al, q8 + 8 * k, 8);
        memcpy(&ah, q8 + 32 + 8 * k, 8);
        sl = _mm512_dpbusd_epi32(sl, w->lo[k], _mm512_set1_epi64(al));
        sh = _mm512_dpbusd_epi32(sh, w->hi[k], _mm512_set1_epi64(ah));
    }
    // a row's two 32-bit halves summed into its 64-bit lane's low half, times the row's scale
    sl = _mm512_add_epi32(sl, _mm512_srli_epi64(sl, 32));
    sh = _mm512_add_epi32(sh, _mm512_srli_epi64(sh, 32));
    const __m512i isum = _mm512_add_epi64(_mm512_mul_epi32(sl, w->sc0), _mm512_mul_epi32(sh, w->sc1));
    // exact int32-range values: the same floats as ggml's cvtepi32_ps
    return _mm512_cvtepi64_ps(isum);
}
#    else
// AVX2: the same exact sums from maddubs (int16 lanes hold at most 8 products of 15 x 128) and madd.
typedef struct {
    __m256i lo[2][4], hi[2][4];  // [h][k]: rows 4h..4h+3, elements 8k..8k+7 of sub-block 2sb (2sb+1)
    __m256i sc0[2], sc1[2];      // row 4h + j's scale of sub-block 2sb (2sb+1) in 64-bit lane j
} q4_Kx8_pair;

INLINE void q4_Kx8_unpack(const uint8_t * qs, const uint32_t u0[4], const uint32_t u1[4], q4_Kx8_pair * w) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int h = 0; h < 2; ++h) {
        for (int k = 0; k < 4; ++k) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *) (qs + 64 * k + 32 * h));
            w->lo[h][k] = _mm256_and_si256(raw, m4);
            w->hi[h][k] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        }
        w->sc0[h] = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int) u0[h]));
        w->sc1[h] = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int) u1[h]));
    }
}

INLINE __m256i q4_Kx8_half(const __m256i * q, const int8_t * a) {
    __m256i s16 = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
        int64_t v;
        memcpy(&v, a + 8 * k, 8);
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(q[k], _mm256_set1_epi64x(v)));
    }
    const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    return _mm256_add_epi32(s32, _mm256_srli_epi64(s32, 32));
}

INLINE __m256 q4_Kx8_pair_sums(const q4_Kx8_pair * w, const int8_t * q8) {
    __m256i v[2];
    for (int h = 0; h < 2; ++h) {
        v[h] = _mm256_add_epi64(_mm256_mul_epi32(q4_Kx8_half(w->lo[h], q8), w->sc0[h]),
                                _mm256_mul_epi32(q4_Kx8_half(w->hi[h], q8 + 32), w->sc1[h]));
    }
    // rows 0-3 in the even dwords, 4-7 in the odd ones, then in order
    const __m256i mixed = _mm256_blend_epi32(v[0], _mm256_slli_epi64(v[1], 32), 0xAA);
    return _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(mixed, _mm256_set_epi32(7, 5, 3, 1, 6, 4, 2, 0)));
}
#    endif

// Fidelity: ggml's gemv (arch/x86/repack.cpp, made to round like its gemm by patch 0008) sums each
// sub-block pair's products exactly in integers (no int16 lane can overflow there) and then, per
// weight row, does acc = fma(float(isum), d * a.d, acc) and the same for the mins, once per pair,
// and subtracts the two at the end. Integer sums are exact whichever instructions make them, so
// this kernel makes them its own way (q4_Kx8_pair_sums) and keeps every float operation of
// ggml's, in its order, per weight row.
INLINE void q4_Kx8_body(int n, float * s, size_t bs, const void * vx, const void * const * vy, int nrows, const int nc) {
    const int nb = n / QK_K;
    for (int x = 0; x < nrows / 8; ++x) {
        const q4_Kx8 * w = (const q4_Kx8 *) vx + (size_t) x * nb;
        __m256 acc[MAXC], acc_m[MAXC];
        for (int c = 0; c < nc; ++c) {
            acc[c] = _mm256_setzero_ps();
            acc_m[c] = _mm256_setzero_ps();
        }
        for (int b = 0; b < nb; ++b) {
            const __m256 col_d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) w[b].d));
            const __m256 col_dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) w[b].dmin));
            __m256 dsc[MAXC], dmn[MAXC];
            __m128i q8s[MAXC];
            for (int c = 0; c < nc; ++c) {
                const block_q8_K * a = (const block_q8_K *) vy[c] + b;
                const __m256 row_d = _mm256_set1_ps(a->d);
                dsc[c] = _mm256_mul_ps(col_d, row_d);
                dmn[c] = _mm256_mul_ps(col_dmin, row_d);
                // the activations' sums per sub-block of 32 (int16: at most 32 * 128)
                q8s[c] = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *) a->bsums),
                                        _mm_loadu_si128((const __m128i *) (a->bsums + 8)));
            }
            for (int sb = 0; sb < QK_K / 64; ++sb) {
                uint32_t u0[4], u1[4];
                unpack_scales_mins(w[b].scales + 24 * sb, u0);
                unpack_scales_mins(w[b].scales + 24 * sb + 12, u1);
                q4_Kx8_pair pair;
                q4_Kx8_unpack(w[b].qs + 256 * sb, u0, u1, &pair);
                // (min of 2sb, min of 2sb+1) per weight row as int16 pairs, as ggml's mins_01
                const __m256i mins01 =
                    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_set_epi32(0, 0, (int) u0[3], (int) u0[2]),
                                                           _mm_set_epi32(0, 0, (int) u1[3], (int) u1[2])));
                for (int c = 0; c < nc; ++c) {
                    const int8_t * q8 = ((const block_q8_K *) vy[c] + b)->qs + 64 * sb;
                    acc[c] = _mm256_fmadd_ps(q4_Kx8_pair_sums(&pair, q8), dsc[c], acc[c]);
                    const __m256i q8pair = _mm256_set1_epi32(_mm_extract_epi32(q8s[c], 0));
                    q8s[c] = _mm_bsrli_si128(q8s[c], 4);
                    acc_m[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(q8pair, mins01)), dmn[c], acc_m[c]);
                }
            }
        }
        for (int c = 0; c < nc; ++c) {
            _mm256_storeu_ps(s + (size_t) c * bs + 8 * x, _mm256_sub_ps(acc[c], acc_m[c]));
        }
    }
}

static void multi_q4_Kx8(int n, float * s, size_t bs, const void * vx, const void * const * vy, int nrows, int nc) {
    switch (nc) {
        case 1: q4_Kx8_body(n, s, bs, vx, vy, nrows, 1); break;
        case 2: q4_Kx8_body(n, s, bs, vx, vy, nrows, 2); break;
        case 3: q4_Kx8_body(n, s, bs, vx, vy, nrows, 3); break;
        case 4: q4_Kx8_body(n, s, bs, vx, vy, nrows, 4); break;
        case 5: q4_Kx8_body(n, s, bs, vx, vy, nrows, 5); break;
        case 6: q4_Kx8_body(n, s, bs, vx, vy, nrows, 6); break;
        case 7: q4_Kx8_body(n, s, bs, vx, vy, nrows, 7); break;
        default: q4_Kx8_body(n, s, bs, vx, vy, nrows, 8); break;
    }
}

// One entry point per type; the column count becomes a constant so each body unrolls fully.
#    define SPECEE_MULTI(T)                                                                          \
        static void multi_##T(int n, float * s, const void * vx, const void * const * vy, const float * ys, int nc) { \
            switch (nc) {                                                                           \
                case 1: T##_body(n, s, vx, vy, ys, 1); break;                                       \
                case 2: T##_body(n, s, vx, vy, ys, 2); break;                                       \
                case 3: T##_body(n, s, vx, vy, ys, 3); break;                                       \
                case 4: T##_body(n, s, vx, vy, ys, 4); break;                                       \
                case 5: T##_body(n, s, vx, vy, ys, 5); break;                                       \
                case 6: T##_body(n, s, vx, vy, ys, 6); break;                                       \
                case 7: T##_body(n, s, vx, vy, ys, 7); break;                                       \
                default: T##_body(n, s, vx, vy, ys, 8); break;                                      \
            }                                                                                       \
        }
SPECEE_MULTI(q4_1)
SPECEE_MULTI(q8_0)
SPECEE_MULTI(q5_0)
SPECEE_MULTI(q4_K)
SPECEE_MULTI(q5_K)
SPECEE_MULTI(q6_K)

// The activation rows' block scales (d and, for Q8_1, the block sum s) as floats, per thread: the
// conversion from fp16 is exact, so the kernels read the very values ggml's vec_dot converts.
static _Thread_local float * tl_scales = NULL;
static _Thread_local size_t tl_capacity = 0;

const float * specee_multicol_scales(enum ggml_type type, int n, const void * first, size_t stride, int ncols) {
    const bool q8_1 = type == GGML_TYPE_Q4_1;
    if (!q8_1 && type != GGML_TYPE_Q8_0 && type != GGML_TYPE_Q5_0) {
        return NULL;  // the K-quants' activation blocks carry a float scale already
    }
    const int nb = n / QK8_0;
    const size_t need = (size_t) ncols * specee_multicol_scales_per_row(n);
    if (need > tl_capacity) {
        float * grown = realloc(tl_scales, need * sizeof(float));
        GGML_ASSERT(grown != NULL);
        tl_scales = grown;
        tl_capacity = need;
    }
    for (int c = 0; c < ncols; ++c) {
        const char * row = (const char *) first + (size_t) c * stride;
        float * out = tl_scales + (size_t) c * specee_multicol_scales_per_row(n);
        for (int ib = 0; ib < nb; ++ib) {
            if (q8_1) {
                const block_q8_1 * y = (const block_q8_1 *) row + ib;
                out[2 * ib] = F16(y->d);
                out[2 * ib + 1] = F16(y->s);
            } else {
                const block_q8_0 * y = (const block_q8_0 *) row + ib;
                out[2 * ib] = F16(y->d);
                out[2 * ib + 1] = 0.0f;
            }
        }
    }
    return tl_scales;
}

specee_vec_dot_multi_t specee_vec_dot_multi(enum ggml_type type, int64_t ncols) {
    if (!enabled() || ncols < 1) {
        return NULL;
    }
    if (ncols == 1 && type != GGML_TYPE_Q4_1 && type != GGML_TYPE_Q8_0 && type != GGML_TYPE_Q5_0) {
        // a K-quant's one-row product has nothing to share: ggml's own vec_dot (the AVX-512 Q6_K
        // body took 0.41-0.46 ms a row against ggml's 0.38 in kernel-bench's 1536 x 8960)
        return NULL;
    }
    switch (type) {
        case GGML_TYPE_Q4_1: return multi_q4_1;
        case GGML_TYPE_Q8_0: return multi_q8_0;
        case GGML_TYPE_Q5_0: return multi_q5_0;
        case GGML_TYPE_Q4_K: return multi_q4_K;
        case GGML_TYPE_Q5_K: return multi_q5_K;
        case GGML_TYPE_Q6_K: return multi_q6_K;
        default: return NULL;
    }
}

specee_repacked_multi_t specee_q4_K_8x8_multi(int64_t ncols) {
    if (!enabled() || ncols < 1 || ncols > SPECEE_MULTICOL_MAX) {
        return NULL;
    }
    return multi_q4_Kx8;
}

#else

specee_repacked_multi_t specee_q4_K_8x8_multi(int64_t ncols) {
    (void) ncols;
    return NULL;
}

const float * specee_multicol_scales(enum ggml_type type, int n, const void * first, size_t stride, int ncols) {
    (void) type;
    (void) n;
    (void) first;
    (void) stride;
    (void) ncols;
    return NULL;
}

specee_vec_dot_multi_t specee_vec_dot_multi(enum ggml_type type, int64_t ncols) {
    (void) type;
    (void) ncols;
    (void) enabled;
    return NULL;
}

#endif
