// weft/core/error.h — the error tiers: WEFT_ASSERT for broken invariants, weft::error for bad input.
#pragma once

#include <stdexcept>
#include <string>

namespace weft {

// Bad input (a file, a request, a flag, an op called with mismatched shapes): the message names
// what was wrong and where. Thrown, caught at the public API boundary or in the tool.
class error : public std::runtime_error {
  public:
    explicit error(const std::string &what) : std::runtime_error(what) {}
};

[[noreturn]] void assert_fail(const char *file, int line, const char *expr);

}  // namespace weft

// A broken internal invariant: always on, names file and line, aborts.
#define WEFT_ASSERT(x)                                         \
    do {                                                       \
        if (!(x)) ::weft::assert_fail(__FILE__, __LINE__, #x); \
    } while (0)
