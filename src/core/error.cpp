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

namespace {

// Length of the UTF-8 sequence at s[i] encoding a printable code point (>= U+00A0), or 0.
size_t printable_utf8(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = b(0);
    size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (n == 0 || c >= 0xF8 || i + n > s.size()) return 0;
    uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < n; ++k) {
        if ((b(k) & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (b(k) & 0x3F);
    }
    const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
    if (overlong || cp < 0xA0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

}  // namespace

std::string printable(std::string_view s, size_t max) {
    std::string out;
    size_t i = 0;
    for (; i < s.size() && i < max;) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7F) {
            out += char(c);
            ++i;
            continue;
        }
        if (const size_t n = c >= 0x80 ? printable_utf8(s, i) : 0; n > 0) {
            out.append(s.substr(i, n));
            i += n;
            continue;
        }
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", c);
        out += hex;
        ++i;
    }
    if (i < s.size()) out += "...";
    return out;
}

std::string quoted(std::string_view s, size_t max) {
    return "'" + printable(s, max) + "'";
}

}  // namespace weft
