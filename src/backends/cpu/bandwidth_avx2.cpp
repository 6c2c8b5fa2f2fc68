// src/backends/cpu/bandwidth_avx2.cpp — the probe's read loop with 32-byte loads, 8 in flight.
#include <immintrin.h>

#include "backends/cpu/bandwidth.h"

namespace weft::cpu {

uint64_t read_all_avx2(const void *p, size_t n) {
    const auto *v = static_cast<const __m256i *>(p);
    __m256i acc[8];
    for (auto &a : acc) a = _mm256_setzero_si256();
    for (size_t i = 0; i < n / 32; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_xor_si256(acc[j], _mm256_load_si256(v + i + j));
    for (int j = 1; j < 8; ++j) acc[0] = _mm256_xor_si256(acc[0], acc[j]);
    return uint64_t(_mm256_extract_epi64(acc[0], 0) ^ _mm256_extract_epi64(acc[0], 1) ^
                    _mm256_extract_epi64(acc[0], 2) ^ _mm256_extract_epi64(acc[0], 3));
}

}  // namespace weft::cpu
