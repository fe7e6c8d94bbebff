// Layer placement for SpecEE (first layers on the GPU) and the device list the planner reads.
#include "placement.h"

#include "specee.h"

#include "ggml-backend.h"

#include <atomic>
#include <cstdio>
#include <string>

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
