// src/backends/cpu/float_mm.cpp — the scalar float tile (the oracle) and the run-time ISA choice.
#include "backends/cpu/float_mm.h"

#include <cmath>
#include <cstring>

#include "weft/core/cpu_features.h"
#include "weft/core/fp16.h"

namespace weft::cpu {

namespace {

float weight_at(dtype t, const char *row, int64_t i) {
    switch (t) {
        case dtype::f16: {
            fp16_t h;
            std::memcpy(&h, row + i * 2, sizeof h);
            return fp16_to_fp32(h);
        }
        case dtype::bf16: {
            bf16_t h;
            std::memcpy(&h, row + i * 2, sizeof h);
            return bf16_to_fp32(h);
        }
        default: {
            float f;
            std::memcpy(&f, row + i * 4, sizeof f);
            return f;
        }
    }
}

}  // namespace

void float_tile_scalar(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                       size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride) {
    for (int64_t c = 0; c < n_cols; ++c)
        for (int64_t r = 0; r < n_rows; ++r) {
            const char *row = a + size_t(r) * a_stride;
            const float *col = x + size_t(c) * x_stride;
            float lanes[16] = {};
            for (int64_t i = 0; i < k; ++i)
                lanes[i % 16] = std::fma(weight_at(wtype, row, i), col[i], lanes[i % 16]);
            dst[size_t(c) * dst_stride + size_t(r)] = sum_lanes_16(lanes);
        }
}

bool float_mm_isa_supported(float_mm_isa isa) {
    const cpu_features &f = host_cpu_features();
    switch (isa) {
        case float_mm_isa::scalar:
            return true;
        case float_mm_isa::avx2:
            return f.avx2 && f.fma && f.f16c;
        case float_mm_isa::avx512:
            return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl;
    }
    return false;
}

float_tile_fn float_tile_at(float_mm_isa isa) {
    switch (isa) {
        case float_mm_isa::scalar:
            return float_tile_scalar;
        case float_mm_isa::avx2:
            return float_tile_avx2;
        case float_mm_isa::avx512:
            return float_tile_avx512;
    }
    return float_tile_scalar;
}

float_tile_fn best_float_tile() {
    for (float_mm_isa isa : {float_mm_isa::avx512, float_mm_isa::avx2})
        if (float_mm_isa_supported(isa)) return float_tile_at(isa);
    return float_tile_scalar;
}

}  // namespace weft::cpu
