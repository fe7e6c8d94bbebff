// Layer placement for SpecEE (first layers on the GPU) and the device list the planner reads.
#include "placement.h"

#include "specee.h"

#include "ggml-backend.h"

#include "../llama-ext.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {
std::atomic<int> g_first{-1};
std::atomic<bool> g_output{false};
thread_local std::string g_devices;

std::string json_escape(const char * s) {
    std::string out;
    for (; s && *s; ++s) {
        if (*s == '"' || *s == '\\') {
            out += '\\';
        }
        if ((unsigned char) *s >= 0x20) {
            out += *s;
        }
    }
    return out;
}
}  // namespace

int specee_first_gpu_layers() {
    return g_first.load();
}

bool specee_output_on_gpu() {
    return g_output.load();
}

void specee_set_first_layers_on_gpu(int32_t n_first, bool output_on_gpu) {
    g_first = n_first;
    g_output = output_on_gpu;
}

const char * specee_devices_json(void) {
    std::string out = "[";
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        size_t free = 0, total = 0;
        ggml_backend_dev_memory(dev, &free, &total);
        const char * type = "cpu";
        switch (ggml_backend_dev_type(dev)) {
            case GGML_BACKEND_DEVICE_TYPE_GPU: type = "gpu"; break;
            case GGML_BACKEND_DEVICE_TYPE_IGPU: type = "igpu"; break;
            case GGML_BACKEND_DEVICE_TYPE_ACCEL: type = "accel"; break;
            default: break;
        }
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
        char buf[64];
        out += i ? ", " : "";
        out += "{\"name\": \"" + json_escape(ggml_backend_dev_name(dev)) + "\", \"description\": \"" +
               json_escape(ggml_backend_dev_description(dev)) + "\", \"backend\": \"" +
               json_escape(reg ? ggml_backend_reg_name(reg) : "") + "\", \"type\": \"" + type + "\"";
        snprintf(buf, sizeof(buf), ", \"memory_free\": %zu, \"memory_total\": %zu}", free, total);
        out += buf;
    }
    out += "]";
    g_devices = out;
    return g_devices.c_str();
}

const char * specee_measure_memory(const char * model_path, int32_t n_ctx, int32_t n_gpu_layers, int32_t n_first,
                                   bool output_on_gpu) {
    // llama.cpp's own dry run (what --fit measures): metadata only, allocations simulated.
    llama_model_params mp = llama_model_default_params();
    mp.no_alloc = true;
    mp.load_mode = LLAMA_LOAD_MODE_NONE;  // a dry run cannot map the file into buffers
    mp.n_gpu_layers = n_gpu_layers;
    ggml_log_callback prev_log = nullptr;
    void * prev_data = nullptr;
    llama_log_get(&prev_log, &prev_data);
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);  // a dry run is quiet
    struct restore_log {
        ggml_log_callback cb;
        void * data;
        ~restore_log() { llama_log_set(cb, data); }
    } restore{prev_log, prev_data};
    specee_set_first_layers_on_gpu(n_first, output_on_gpu);
    llama_model * model = llama_model_load_from_file(model_path, mp);
    specee_set_first_layers_on_gpu(-1, false);
    if (model == nullptr) {
        return nullptr;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) n_ctx;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) {
        llama_model_free(model);
        return nullptr;
    }
    size_t host[3] = {0, 0, 0}, dev[3] = {0, 0, 0};
    for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx)) {
        // RAM is what the CPU's own buffer types hold (the repacked weights of CPU_REPACK are not
        // "host" buffers, yet live in RAM) plus pinned host buffers of a GPU backend
        ggml_backend_dev_t d = ggml_backend_buft_get_device(buft);
        const bool in_ram = ggml_backend_buft_is_host(buft) || d == nullptr ||
                            ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_CPU ||
                            ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_ACCEL;
        size_t * t = in_ram ? host : dev;
        t[0] += mb.model;
        t[1] += mb.context;
        t[2] += mb.compute;
    }
    llama_free(ctx);
    llama_model_free(model);
    char buf[256];
    snprintf(buf, sizeof(buf),
             "{\"host\": {\"model\": %zu, \"context\": %zu, \"compute\": %zu}, "
             "\"device\": {\"model\": %zu, \"context\": %zu, \"compute\": %zu}}",
             host[0], host[1], host[2], dev[0], dev[1], dev[2]);
    g_devices = buf;
    return g_devices.c_str();
}

double specee_measure_read_bandwidth(int32_t n_threads, int64_t n_bytes) {
    // Decode streams every weight once per token from several threads: each thread sums its own
    // slice (first touched by that thread, so pages sit near it) with independent accumulators so
    // the loop is bound by memory, not by an add chain. The median of five passes (single passes
    // ranged 37-58 GB/s here on a shared host).
    n_threads = std::max(1, n_threads);
    const size_t n = (size_t) std::max<int64_t>(n_bytes, 1 << 20) / sizeof(uint64_t) / (size_t) n_threads / 8 * 8;
    std::vector<std::vector<uint64_t>> slices(n_threads);
    std::vector<uint64_t> sink(n_threads * 8, 0);
    auto run = [&](auto && body) {
        std::vector<std::thread> ts;
        for (int t = 0; t < n_threads; ++t) {
            ts.emplace_back(body, t);
        }
        for (auto & th : ts) {
            th.join();
        }
    };
    run([&](int t) { slices[t].assign(n, (uint64_t) t + 1); });
    std::vector<double> gbs;
    for (int pass = 0; pass < 5; ++pass) {
        const auto t0 = std::chrono::steady_clock::now();
        run([&](int t) {
            const uint64_t * p = slices[t].data();
            uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (size_t i = 0; i < n; i += 8) {
                for (int k = 0; k < 8; ++k) {
                    a[k] += p[i + k];
                }
            }
            for (int k = 0; k < 8; ++k) {
                sink[t * 8 + k] += a[k];
            }
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        gbs.push_back((double) n * sizeof(uint64_t) * n_threads / s / 1e9);
    }
    std::sort(gbs.begin(), gbs.end());
    volatile uint64_t keep = 0;
    for (const uint64_t v : sink) {
        keep = keep + v;
    }
    return gbs[gbs.size() / 2];
}
