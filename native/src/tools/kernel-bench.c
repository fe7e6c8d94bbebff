// specee-kernel-bench: what one mul_mat of n activation rows costs against n = 1, per weight type,
// on ggml's CPU vec_dot path (the file layout our worker decodes with), and whether every row of
// an n-row call is bit-identical to the same row computed alone (what lossless verification needs).
//
//   cc -O2 kernel-bench.c -I<llama.cpp>/ggml/include -L<lib> -lggml -lggml-base -lggml-cpu -o kb
//   ./kb [K M threads]      (default: 1536 8960 2, Qwen2.5-1.5B's ffn_up shape)
#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void * a, const void * b) {
    const double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

// One mul_mat of weights [K x M] (quantised to type) by n rows; returns the median ms and the output.
static double run(enum ggml_type type, const float * wf, const float * xf, int K, int M, int n, int threads, float * out,
                  int reps, float * upstream) {
    const size_t wbytes = ggml_row_size(type, K) * M;
    struct ggml_init_params ip = { wbytes + (size_t) (K + M) * n * 4 + 64 * 1024 * 1024, NULL, false };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * w = ggml_new_tensor_2d(ctx, type, K, M);
    ggml_quantize_chunk(type, wf, w->data, 0, M, K, NULL);
    struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, n);
    memcpy(x->data, xf, sizeof(float) * K * n);
    struct ggml_tensor * y = ggml_mul_mat(ctx, w, x);
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, y);
    double t[64];
    for (int r = 0; r < reps + 2; ++r) {
        const double t0 = now_ms();
        ggml_graph_compute_with_ctx(ctx, g, threads);
        if (r >= 2) {
            t[r - 2] = now_ms() - t0;
        }
    }
    memcpy(out, y->data, sizeof(float) * M * n);
    if (upstream) {
        // ggml's own one-column vec_dot on the same quantised data, row by row, for column 0
        const struct ggml_type_traits_cpu * tr = ggml_get_type_traits_cpu(type);
        void * q = malloc(ggml_row_size(tr->vec_dot_type, K));
        ggml_get_type_traits_cpu(tr->vec_dot_type)->from_float(xf, q, K);
        for (int r = 0; r < M; ++r) {
            tr->vec_dot(K, &upstream[r], 0, (const char *) w->data + ggml_row_size(type, K) * r, 0, q, 0, 1);
        }
        free(q);
    }
    ggml_free(ctx);
    qsort(t, reps, sizeof(double), cmp_double);
    return t[reps / 2];
}

int main(int argc, char ** argv) {
    const int K = argc > 1 ? atoi(argv[1]) : 1536;
    const int M = argc > 2 ? atoi(argv[2]) : 8960;
    const int threads = argc > 3 ? atoi(argv[3]) : 2;
    const enum ggml_type types[] = { GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K,
                                     GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };
    const int sizes[] = { 1, 2, 3, 4, 8 };
    const int nmax = 8;
    ggml_cpu_init();
    srand(7);
    float * wf = malloc(sizeof(float) * K * M);
    float * xf = malloc(sizeof(float) * K * nmax);
    for (long i = 0; i < (long) K * M; ++i) {
        wf[i] = (float) rand() / RAND_MAX - 0.5f;
    }
    for (int i = 0; i < K * nmax; ++i) {
        xf[i] = (float) rand() / RAND_MAX - 0.5f;
    }
    float * one = malloc(sizeof(float) * M * nmax);
    float * many = malloc(sizeof(float) * M * nmax);
    float * ref = malloc(sizeof(float) * M);
    printf("K=%d M=%d threads=%d (ms of one call, ratio to n=1, DIFF: a row differs from its one-row call; last: row results against ggml's own vec_dot)\n", K, M, threads);
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ++ti) {
        const enum ggml_type type = types[ti];
        for (int j = 0; j < nmax; ++j) {
            run(type, wf, xf + (size_t) j * K, K, M, 1, threads, one + (size_t) j * M, 1, j == 0 ? ref : NULL);
        }
        double base = 0;
        printf("%-5s", ggml_type_name(type));
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); ++si) {
            const int n = sizes[si];
            const double ms = run(type, wf, xf, K, M, n, threads, many, 31, NULL);
            if (n == 1) {
                base = ms;
            }
            const int same = memcmp(one, many, sizeof(float) * M * n) == 0;
            printf("  n=%d %7.3f ms %5.2fx%s", n, ms, ms / base, same ? "" : " DIFF");
        }
        printf("  %s\n", memcmp(one, ref, sizeof(float) * M) == 0 ? "= ggml vec_dot" : "!= ggml vec_dot");
    }
    return 0;
}
