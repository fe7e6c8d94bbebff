// SpecEE Chat build identity: lets Python (and `specee doctor`) confirm it runs our patched llama.cpp.
#include "llama.h"

#ifndef SPECEE_BUILD_KEY
#define SPECEE_BUILD_KEY "unknown"
#endif
#ifndef SPECEE_PATCHES
#define SPECEE_PATCHES ""
#endif

// Bump when the native API grows; Python refuses a build older than it expects.
#define SPECEE_NATIVE_API_VERSION 12

#define SPECEE_STR2(x) #x
#define SPECEE_STR(x) SPECEE_STR2(x)

const char * llama_specee_build_info(void) {
    return "{\"api_version\": " SPECEE_STR(SPECEE_NATIVE_API_VERSION)
           ", \"build_key\": \"" SPECEE_BUILD_KEY "\""
           ", \"patches\": \"" SPECEE_PATCHES "\""
           ", \"features\": [\"build-info\", \"layer-capture\", \"eagle\", \"early-exit\", \"placement\"]}";
}
