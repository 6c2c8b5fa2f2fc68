// src/backends/cpu/simd_level.cpp — the instruction-set level of this CPU, from its features.
#include "backends/cpu/simd_level.h"

#include "weft/core/cpu_features.h"

namespace weft::cpu {

bool simd_level_supported(simd_level level) {
    const cpu_features &f = host_cpu_features();
    const bool avx2 = f.avx2 && f.fma && f.f16c;
    const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl;
    switch (level) {
        case simd_level::scalar:
            return true;
        case simd_level::avx2:
            return avx2;
        case simd_level::avx512:
            return avx512;
        case simd_level::avx512_vnni:
            return avx512 && f.avx512vnni;
    }
    return false;
}

simd_level best_simd_level() {
    for (simd_level level : {simd_level::avx512_vnni, simd_level::avx512, simd_level::avx2})
        if (simd_level_supported(level)) return level;
    return simd_level::scalar;
}

}  // namespace weft::cpu
