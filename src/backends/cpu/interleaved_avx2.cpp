// src/backends/cpu/interleaved_avx2.cpp — the 256-bit group kernel (interleaved_ymm.h) with AVX2's
// maddubs/madd integer dots.
#include "backends/cpu/interleaved_ymm.h"

namespace weft::cpu {

void group_kernel_avx2(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0,
                       int64_t n_cols, float *dst, int64_t dst_stride) {
    group_kernel_ymm<false>(l, group, a, c0, n_cols, dst, dst_stride);
}

void groups_kernel_avx2(const interleaved_layout &l, const uint8_t *groups, size_t group_stride,
                        int64_t n_groups, const q8_rows &a, int64_t c0, int64_t n_cols, float *dst,
                        int64_t dst_stride) {
    groups_kernel_ymm<false>(l, groups, group_stride, n_groups, a, c0, n_cols, dst, dst_stride);
}

}  // namespace weft::cpu
