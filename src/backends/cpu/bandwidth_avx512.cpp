// src/backends/cpu/bandwidth_avx512.cpp — the probe's read loop with 64-byte loads, 8 in flight.
#include <immintrin.h>

#include "backends/cpu/bandwidth.h"

namespace weft::cpu {

uint64_t read_all_avx512(const void *p, size_t n) {
    const auto *v = static_cast<const __m512i *>(p);
    __m512i acc[8];
    for (auto &a : acc) a = _mm512_setzero_si512();
    for (size_t i = 0; i < n / 64; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] = _mm512_xor_si512(acc[j], _mm512_load_si512(v + i + j));
    for (int j = 1; j < 8; ++j) acc[0] = _mm512_xor_si512(acc[0], acc[j]);
    return uint64_t(_mm512_reduce_add_epi64(acc[0]));
}

}  // namespace weft::cpu
