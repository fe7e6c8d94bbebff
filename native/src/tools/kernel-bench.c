// specee-kernel-bench: what one mul_mat of n activation rows costs against n = 1, per weight type,
// on ggml's CPU paths (the file layout: vec_dot; Q4_K repacked as the worker loads it where exact:
// gemv/gemm), with our multi-column kernels off (ggml's own) and on (patches 0009, 0020), and
// whether every row of every n-row call is bit-identical to the same row computed alone by ggml
// (what lossless verification needs).
//
//   cc -O2 kernel-bench.c -I<llama.cpp>/ggml/include -L<lib> -lggml -lggml-base -lggml-cpu -o kb
//   ./kb [K M threads [types]]  (default: 1536 8960 2, Qwen2.5-1.5B's ffn_up shape; types: a comma
//                               list of ggml type names, "q4_K/repack" for the repacked layout;
//                               Qwen's lm_head: ./kb 1536 151936 2 q6_K)
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ggml-cpu's switch for our kernels and their count of weight rows computed (multicol.h)
void specee_multicol_set(bool on);
int64_t specee_multicol_rows(void);

#define NMAX 8

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void * a, const void * b) {
    const double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

// The CPU backend's repacking buffer type (weights interleaved at upload), or NULL.
static ggml_backend_buffer_type_t repack_buft(void) {
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    typedef ggml_backend_buffer_type_t * (*get_extra_t)(ggml_backend_dev_t);
    get_extra_t get = (get_extra_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t * b = get ? get(dev) : NULL; b && *b; ++b) {
        if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) {
            return *b;
        }
    }
    return NULL;
}

// The weights [K x M] quantised to type, in the file layout or repacked.
struct weights {
    struct ggml_context * ctx;
    ggml_backend_buffer_t buf;
    struct ggml_tensor * w;
};

static struct weights make_weights(enum ggml_type type, bool repacked, const float * wf, int K, int M) {
    struct weights r = { 0 };
    const size_t wbytes = ggml_row_size(type, K) * M;
    struct ggml_init_params ip = { wbytes + 1024 * 1024, NULL, repacked };
    r.ctx = ggml_init(ip);
    r.w = ggml_new_tensor_2d(r.ctx, type, K, M);
    if (repacked) {
        r.buf = ggml_backend_alloc_ctx_tensors_from_buft(r.ctx, repack_buft());
        void * q = malloc(wbytes);
        ggml_quantize_chunk(type, wf, q, 0, M, K, NULL);
        ggml_backend_tensor_set(r.w, q, 0, wbytes);  // repacks
        free(q);
    } else {
        ggml_quantize_chunk(type, wf, r.w->data, 0, M, K, NULL);
    }
    return r;
}

// One mul_mat of the weights by n rows; returns the fastest of reps calls (on a shared machine the
// closest to what the kernel costs undisturbed) and the output.
static double run(const struct weights * W, const float * xf, int K, int M, int n, int threads, float * out, int reps) {
    struct ggml_init_params ip = { (size_t) (K + M) * n * 4 + ggml_graph_overhead() + 64 * 1024 * 1024, NULL, false };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, n);
    memcpy(x->data, xf, sizeof(float) * K * n);
    struct ggml_tensor * y = ggml_mul_mat(ctx, W->w, x);
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, y);
    double t[64];
    if (reps > 63) {
        reps = 63;
    }
    for (int r = 0; r < reps + 1; ++r) {
        const double t0 = now_ms();
        ggml_graph_compute_with_ctx(ctx, g, threads);
        if (r >= 1) {
            t[r - 1] = now_ms() - t0;
        }
    }
    memcpy(out, y->data, sizeof(float) * M * n);
    ggml_free(ctx);
    qsort(t, reps, sizeof(double), cmp_double);
    return t[0];
}

int main(int argc, char ** argv) {
    const int K = argc > 1 ? atoi(argv[1]) : 1536;
    const int M = argc > 2 ? atoi(argv[2]) : 8960;
    const int threads = argc > 3 ? atoi(argv[3]) : 2;
    const char * names = argc > 4 ? argv[4] : "q4_0,q4_1,q5_0,q8_0,q4_K,q5_K,q6_K,q4_K/repack";
    const int reps = M > 50000 ? 9 : 31;
    ggml_cpu_init();
    srand(7);
    float * wf = malloc(sizeof(float) * K * M);
    float * xf = malloc(sizeof(float) * K * NMAX);
    for (long i = 0; i < (long) K * M; ++i) {
        wf[i] = (float) rand() / RAND_MAX - 0.5f;
    }
    for (int i = 0; i < K * NMAX; ++i) {
        xf[i] = (float) rand() / RAND_MAX - 0.5f;
    }
    float * one = malloc(sizeof(float) * M * NMAX);
    float * many = malloc(sizeof(float) * M * NMAX);
    float * ref = malloc(sizeof(float) * M);
    printf("K=%d M=%d threads=%d: ms of one call of n rows (fastest of several), its ratio to n=1 of the same line; ggml: our "
           "kernels off, ours: on (the two interleaved per n); DIFF: a row differs from ggml's one-row call; last: "
           "ggml's one-row calls against ggml's vec_dot (file layout); (not ours): our kernels never ran for this type\n",
           K, M, threads);
    char list[256];
    snprintf(list, sizeof(list), "%s", names);
    for (char * name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        const bool repacked = strstr(name, "/repack") != NULL;
        char base[32];
        snprintf(base, sizeof(base), "%.*s", (int) strcspn(name, "/"), name);
        enum ggml_type type = GGML_TYPE_COUNT;
        for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
            const char * tn = ggml_type_name((enum ggml_type) t);
            if (tn && strcmp(tn, base) == 0 && ggml_get_type_traits((enum ggml_type) t)->blck_size > 0) {
                type = (enum ggml_type) t;
            }
        }
        if (type == GGML_TYPE_COUNT || (repacked && !repack_buft())) {
            printf("%-12s unknown type or no repacked layout here\n", name);
            continue;
        }
        struct weights W = make_weights(type, repacked, wf, K, M);
        // reference: each activation row alone through ggml's own kernels
        specee_multicol_set(false);
        for (int j = 0; j < NMAX; ++j) {
            run(&W, xf + (size_t) j * K, K, M, 1, threads, one + (size_t) j * M, 1);
        }
        int same_vec_dot = -1;
        if (!repacked) {
            const struct ggml_type_traits_cpu * tr = ggml_get_type_traits_cpu(type);
            void * q = malloc(ggml_row_size(tr->vec_dot_type, K));
            ggml_get_type_traits_cpu(tr->vec_dot_type)->from_float(xf, q, K);
            for (int r = 0; r < M; ++r) {
                tr->vec_dot(K, &ref[r], 0, (const char *) W.w->data + ggml_row_size(type, K) * r, 0, q, 0, 1);
            }
            free(q);
            same_vec_dot = memcmp(one, ref, sizeof(float) * M) == 0;
        }
        double ms[2][NMAX + 1];
        int diff[2][NMAX + 1];
        int64_t taken = 0;  // weight rows our kernels computed
        for (int n = 1; n <= NMAX; ++n) {
            for (int mode = 0; mode < 2; ++mode) {
                specee_multicol_set(mode == 1);
                const int64_t rows0 = specee_multicol_rows();
                ms[mode][n] = run(&W, xf, K, M, n, threads, many, reps);
                taken += specee_multicol_rows() - rows0;
                diff[mode][n] = memcmp(one, many, sizeof(float) * M * n) != 0;
            }
        }
        specee_multicol_set(true);
        for (int mode = 0; mode < 2; ++mode) {
            printf("%-12s %-4s", name, mode ? "ours" : "ggml");
            for (int n = 1; n <= NMAX; ++n) {
                printf("  n=%d %7.3f %4.2fx%s", n, ms[mode][n], ms[mode][n] / ms[mode][1], diff[mode][n] ? " DIFF" : "");
            }
            printf("%s\n", mode == 1 ? (taken ? "" : "  (not ours: ggml's kernels ran)")
                            : same_vec_dot < 0 ? "" : same_vec_dot ? "  = ggml vec_dot" : "  != ggml vec_dot");
        }
        ggml_free(W.ctx);
        if (W.buf) {
            ggml_backend_buffer_free(W.buf);
        }
    }
    return 0;
}
