// A decode that gives way (specee.h, "Interrupting a decode"): ggml's CPU backend asks the context's
// abort callback between graph nodes, and this one reads a flag that another thread may raise.
#include "specee.h"

extern "C" bool specee_interrupt_requested(void * flag) {
    // One byte the caller owns (a ctypes c_bool in the worker), raised by another thread mid-decode.
#if defined(__GNUC__) || defined(__clang__)
    return __atomic_load_n(static_cast<const bool *>(flag), __ATOMIC_RELAXED);
#else
    return *static_cast<const volatile bool *>(flag);  // MSVC: volatile reads are atomic for a byte
#endif
}
