// weft/core/error.h — the error tiers: WEFT_ASSERT for broken invariants, weft::error for bad input.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace weft {

// Bad input (a file, a request, a flag, an op called with mismatched shapes): the message names
// what was wrong and where. Thrown, caught at the public API boundary or in the tool.
class error : public std::runtime_error {
  public:
    explicit error(const std::string &what) : std::runtime_error(what) {}
};

[[noreturn]] void assert_fail(const char *file, int line, const char *expr);

// Text from a file or a request made safe for a terminal or a log: control bytes (C0, DEL), the
// C1 controls and bytes that are not valid UTF-8 become \xNN (printable UTF-8 passes); at most
// `max` bytes of s are shown, then "..." .
std::string printable(std::string_view s, size_t max = 256);
// printable(s, max) in single quotes.
std::string quoted(std::string_view s, size_t max = 64);

}  // namespace weft

// A broken internal invariant: always on, names file and line, aborts.
#define WEFT_ASSERT(x)                                         \
    do {                                                       \
        if (!(x)) ::weft::assert_fail(__FILE__, __LINE__, #x); \
    } while (0)
