// src/backends/cpu/prefetch.h — software prefetch of weights streamed once per product.
#pragma once

#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>

namespace weft::cpu {

// The hardware prefetcher alone does not run far enough ahead when a kernel does much work per
// byte of weights (several columns per block, or K-quant unpacking): it waits on memory with
// nothing else to do. Asking for the bytes this far ahead into L2 keeps the stream going: products
// of 4 columns run about 2x faster from memory, q5_K/q6_K decode 1.4-2.5x (interleaved_*.cpp).
constexpr size_t weight_prefetch_distance = 12288;

// Prefetches lines [first, first + count) at p + weight_prefetch_distance into L2 (T1: the T0 hint
// measured slower on Zen 4).
[[gnu::always_inline]] inline void prefetch_weights(const uint8_t *p, size_t first, size_t count) {
    for (size_t i = first; i < first + count; ++i)
        _mm_prefetch(reinterpret_cast<const char *>(p + weight_prefetch_distance + 64 * i), _MM_HINT_T1);
}

// The lines of a block of `bytes` bytes that unit t of `units` prefetches: an equal share each.
[[gnu::always_inline]] inline void prefetch_block_share(const uint8_t *block, size_t bytes, int t,
                                                        int units) {
    const size_t lines = (bytes + 63) / 64;
    const size_t first = lines * size_t(t) / size_t(units), end = lines * size_t(t + 1) / size_t(units);
    prefetch_weights(block, first, end - first);
}

}  // namespace weft::cpu
