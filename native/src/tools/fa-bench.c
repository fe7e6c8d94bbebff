// flash_attn_ext alone on the installed ggml: our f32 rows in query-row tiles (native/src/kernels/
// flash_attn_rows.cpp) against ggml's one pass per row (specee_fa_tiles_set(false)), interleaved, best of
// REPS; prints each one's largest error against attention in double precision on three rows, their
// largest difference, whether every run of each gave the same bits, and whether three rows computed
// alone (as decodes are) give the bits they had in the batch (exit 1 where either is not so).
// Built by native/build.py --fa-bench (tests/test_batch_invariance.py runs it).
// usage: fa-bench N_BATCH POS THREADS REPS [DK N_HEAD N_HEAD_KV]   (defaults: the default model, 64 9 3)
#include "ggml-cpu.h"
#include "ggml.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <time.h>
void specee_fa_tiles_set(bool on);  // ggml-cpu, native/src/kernels/flash_attn_rows.h
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char ** argv) {
    int N = atoi(argv[1]), pos = atoi(argv[2]), th = atoi(argv[3]), reps = atoi(argv[4]);
    int DK = argc > 5 ? atoi(argv[5]) : 64, NH = argc > 6 ? atoi(argv[6]) : 9, NHKV = argc > 7 ? atoi(argv[7]) : 3;
    int nkv = pos + N; nkv = (nkv + 255) / 256 * 256;
    ggml_cpu_init();
    struct ggml_init_params ip = { (size_t) 1 << 31, NULL, false };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, DK, N, NH, 1);
    struct ggml_tensor * k = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, DK, nkv, NHKV, 1);
    struct ggml_tensor * v = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, DK, nkv, NHKV, 1);
    struct ggml_tensor * m = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, nkv, N, 1, 1);
    srand(1);
    for (int64_t i = 0; i < ggml_nelements(q); ++i) ((float *) q->data)[i] = (rand() / (float) RAND_MAX - 0.5f) * 4;
    for (int64_t i = 0; i < ggml_nelements(k); ++i) ((ggml_fp16_t *) k->data)[i] = ggml_fp32_to_fp16((rand() / (float) RAND_MAX - 0.5f) * 4);
    for (int64_t i = 0; i < ggml_nelements(v); ++i) ((ggml_fp16_t *) v->data)[i] = ggml_fp32_to_fp16((rand() / (float) RAND_MAX - 0.5f) * 2);
    for (int r = 0; r < N; ++r) for (int c = 0; c < nkv; ++c)
        ((ggml_fp16_t *) m->data)[r * nkv + c] = ggml_fp32_to_fp16(c <= pos + r ? 0.0f : -INFINITY);
    struct ggml_tensor * out = ggml_flash_attn_ext(ctx, q, k, v, m, 1.0f / sqrtf(DK), 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);  // llama.cpp sets it too
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, out);
    const char * modes[] = { "per_row", "tiles" };
    double best[2] = { 1e9, 1e9 };
    size_t n_out = ggml_nelements(out);
    float * ref[2] = { malloc(ggml_nbytes(out)), malloc(ggml_nbytes(out)) };
    int same = 1;
    for (int rep = 0; rep < reps; ++rep) {
        for (int i = 0; i < 2; ++i) {
            int mode = (rep % 2) ? 1 - i : i;
            specee_fa_tiles_set(mode != 0);
            double t0 = now();
            ggml_graph_compute_with_ctx(ctx, g, th);
            double t = now() - t0;
            if (t < best[mode]) best[mode] = t;
            if (rep == 0) memcpy(ref[mode], out->data, ggml_nbytes(out));
            else same &= memcmp(ref[mode], out->data, ggml_nbytes(out)) == 0;
        }
    }
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < n_out; ++i) {
        double d = fabs((double) ref[0][i] - ref[1][i]);
        if (d > max_diff) max_diff = d;
        if (fabs(ref[0][i]) > max_ref) max_ref = fabs(ref[0][i]);
    }
    // a double-precision reference (Q rounded to fp16, as both paths do) for a few rows, every head
    double err[2] = { 0, 0 };
    int rows[3] = { 0, N / 2, N - 1 };
    double * sc = malloc(sizeof(double) * nkv);
    for (int ri = 0; ri < 3; ++ri) for (int h = 0; h < NH; ++h) {
        int r = rows[ri], hk = h / (NH / NHKV);
        double mx = -INFINITY, sum = 0;
        for (int c = 0; c <= pos + r; ++c) {
            double d = 0;
            for (int e = 0; e < DK; ++e) {
                float qv = ggml_fp16_to_fp32(ggml_fp32_to_fp16(((float *) q->data)[(h * N + r) * DK + e]));
                d += (double) qv * ggml_fp16_to_fp32(((ggml_fp16_t *) k->data)[((size_t) hk * nkv + c) * DK + e]);
            }
            sc[c] = d / sqrt(DK);
            if (sc[c] > mx) mx = sc[c];
        }
        for (int c = 0; c <= pos + r; ++c) { sc[c] = exp(sc[c] - mx); sum += sc[c]; }
        for (int e = 0; e < DK; ++e) {
            double o = 0;
            for (int c = 0; c <= pos + r; ++c) o += sc[c] * ggml_fp16_to_fp32(((ggml_fp16_t *) v->data)[((size_t) hk * nkv + c) * DK + e]);
            o /= sum;
            for (int m = 0; m < 2; ++m) {
                double d = fabs(ref[m][((size_t) r * NH + h) * DK + e] - o);  // out: [DK][NH][N]
                if (d > err[m]) err[m] = d;
            }
        }
    }
    // a row alone (a decode: one query row, its own mask row) must give the bits it had in the batch
    int alone_same = 1;
    specee_fa_tiles_set(true);
    for (int ri = 0; ri < 3; ++ri) {
        int r = rows[ri];
        struct ggml_tensor * q1 = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, DK, 1, NH, 1);
        struct ggml_tensor * m1 = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, nkv, 1, 1, 1);
        for (int h = 0; h < NH; ++h) memcpy((float *) q1->data + h * DK, (float *) q->data + (h * N + r) * DK, DK * sizeof(float));
        memcpy(m1->data, (ggml_fp16_t *) m->data + (size_t) r * nkv, nkv * sizeof(ggml_fp16_t));
        struct ggml_tensor * o1 = ggml_flash_attn_ext(ctx, q1, k, v, m1, 1.0f / sqrtf(DK), 0.0f, 0.0f);
        ggml_flash_attn_ext_set_prec(o1, GGML_PREC_F32);
        struct ggml_cgraph * g1 = ggml_new_graph(ctx);
        ggml_build_forward_expand(g1, o1);
        ggml_graph_compute_with_ctx(ctx, g1, th);
        alone_same &= memcmp(o1->data, ref[1] + (size_t) r * NH * DK, NH * DK * sizeof(float)) == 0;
    }
    printf("rows alone: %s\n", alone_same ? "the same bits as in the batch" : "DIFFERENT FROM THE BATCH");
    same &= alone_same;
    printf("largest error against double precision: per_row %.2e  tiles %.2e\n", err[0], err[1]);
    printf("N %d pos %d DK %d heads %d/%d threads %d: per_row %.3f s  tiles %.3f s  ratio %.2f  max diff %.2e (of %.2e)  %s\n",
           N, pos, DK, NH, NHKV, th, best[0], best[1], best[1] / best[0], max_diff, max_ref, same ? "repeatable" : "NOT REPEATABLE");
    return same ? 0 : 1;
}
