// src/backends/cpu/simd_level.h — the one place the CPU backend decides which instruction-set build
// of a kernel runs: the best level this CPU has, lowered by WEFT_FORCE_SCALAR / WEFT_MAX_ISA=avx2.
#pragma once

#include <algorithm>
#include <cstddef>

namespace weft::cpu {

// Each level includes the ones before it: avx2 means AVX2 + FMA + F16C; avx512 adds AVX-512
// F/BW/VL; avx512_vnni adds VNNI (vpdpbusd).
enum class simd_level : int { scalar = 0, avx2 = 1, avx512 = 2, avx512_vnni = 3 };

bool simd_level_supported(simd_level level);
simd_level best_simd_level();

// The entry of `by_level` (indexed by simd_level) for the best level this CPU has; levels past the
// table's end take its last entry.
template <class T, size_t N>
T best_of(const T (&by_level)[N]) {
    return by_level[std::min(size_t(best_simd_level()), N - 1)];
}

}  // namespace weft::cpu
