// src/core/error.cpp — the always-on assertion's report.
#include "weft/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace weft {

[[noreturn]] void assert_fail(const char *file, int line, const char *expr) {
    std::fprintf(stderr, "weft: %s:%d: internal error: assertion failed: %s\n", file, line, expr);
    std::fflush(stderr);
    std::abort();
}

}  // namespace weft
