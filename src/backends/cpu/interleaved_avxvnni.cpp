// src/backends/cpu/interleaved_avxvnni.cpp — the 256-bit group kernel (interleaved_ymm.h) with
// AVX-VNNI's vpdpbusd (VEX): for CPUs with AVX2 and AVX-VNNI but no AVX-512 VNNI (Intel's Alder Lake
// and later client cores), where it replaces maddubs + madd + add with one instruction.
#include "backends/cpu/interleaved_ymm.h"

namespace weft::cpu {

void group_kernel_avxvnni(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0,
                          int64_t n_cols, float *dst, int64_t dst_stride) {
    group_kernel_ymm<true>(l, group, a, c0, n_cols, dst, dst_stride);
}

void groups_kernel_avxvnni(const interleaved_layout &l, const uint8_t *groups, size_t group_stride,
                           int64_t n_groups, const q8_rows &a, int64_t c0, int64_t n_cols, float *dst,
                           int64_t dst_stride) {
    groups_kernel_ymm<true>(l, groups, group_stride, n_groups, a, c0, n_cols, dst, dst_stride);
}

}  // namespace weft::cpu
