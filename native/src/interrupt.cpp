// A decode that gives way (specee.h, "Interrupting a decode"): ggml's CPU backend asks the context's
// abort callback between graph nodes, and this one reads a flag that another thread may raise.
#include "specee.h"

#include <cstdio>
#include <cstring>

extern "C" bool specee_interrupt_requested(void * flag) {
    // One byte the caller owns (a ctypes c_bool in the worker), raised by another thread mid-decode.
#if defined(__GNUC__) || defined(__clang__)
    return __atomic_load_n(static_cast<const bool *>(flag), __ATOMIC_RELAXED);
#else
    return *static_cast<const volatile bool *>(flag);  // MSVC: volatile reads are atomic for a byte
#endif
}

namespace {
ggml_log_callback g_next = nullptr;
void * g_next_data = nullptr;

// llama_decode logs one warning per sequence when it drops a stopped batch's rows: routine for an
// interrupted step (several per request a server admits), so they would bury the log's real lines.
void quiet_interrupts(ggml_log_level level, const char * text, void * /*data*/) {
    if (text != nullptr && std::strstr(text, "removing memory module entries") != nullptr) {
        return;
    }
    if (g_next != nullptr) {
        g_next(level, text, g_next_data);
    } else if (text != nullptr) {
        std::fputs(text, stderr);
    }
}
}  // namespace

extern "C" void specee_interrupt_quiet_log(void) {
    ggml_log_callback cb = nullptr;
    void * data = nullptr;
    llama_log_get(&cb, &data);
    if (cb == quiet_interrupts) {
        return;
    }
    g_next = cb;
    g_next_data = data;
    llama_log_set(quiet_interrupts, nullptr);
}
