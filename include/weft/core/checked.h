// weft/core/checked.h — overflow-checked arithmetic for sizes computed from untrusted numbers
// (file metadata, tensor shapes): every product of values read from a file goes through these
// before it sizes a tensor or an allocation, so a hostile value becomes an error, never wrapped
// (or, for signed types, undefined) arithmetic.
#pragma once

#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>

#include "weft/core/error.h"

namespace weft {

// x rounded up to a multiple of a (> 0); without overflow where the result fits.
constexpr size_t align_up(size_t x, size_t a) {
    return x + (a - x % a) % a;
}

// a * b into `out`; true when the exact product does not fit in T.
template <std::integral T>
[[nodiscard]] bool mul_overflows(T a, T b, T &out) {
    return __builtin_mul_overflow(a, b, &out);
}
template <std::integral T>
[[nodiscard]] bool add_overflows(T a, T b, T &out) {
    return __builtin_add_overflow(a, b, &out);
}

// a * b, or a weft::error "<what>: A x B overflows" when it does not fit in T.
template <std::integral T>
T checked_mul(T a, T b, std::string_view what) {
    T r;
    if (mul_overflows(a, b, r))
        throw error(std::string(what) + ": " + std::to_string(a) + " x " + std::to_string(b) + " overflows");
    return r;
}
template <std::integral T>
T checked_add(T a, T b, std::string_view what) {
    T r;
    if (add_overflows(a, b, r))
        throw error(std::string(what) + ": " + std::to_string(a) + " + " + std::to_string(b) + " overflows");
    return r;
}

}  // namespace weft
