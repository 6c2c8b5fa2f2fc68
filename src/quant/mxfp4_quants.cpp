// src/quant/mxfp4_quants.cpp — scalar reference kernels of mxfp4 (OCP microscaling FP4).
//
// A block of 32 stores one shared exponent e and 32 four-bit indices into kvalues_mxfp4 (the E2M1
// values doubled); x = level * 2^(e - 128). The quantizer is the established one, so that files
// are byte-identical to its output: e puts the block's largest magnitude in [4, 8) times 2^(e - 127)
// (6, the largest E2M1 value, is in that range), then each value takes the level nearest to it,
// the first in table order on ties. It takes no importance matrix (nor does the established one).
// The dot product is against q8_0 activations, one integer sum and one fma per block, as iq4_nl's.
#include <cmath>

#include "quant/kernels.h"
#include "weft/quant/blocks.h"

namespace weft::quant {
namespace {

// The shared exponent of a block whose largest magnitude is amax: floor(log2(amax)) - 2 + 127,
// through the C library's log2f as the established quantizer computes it (near a power of two its
// rounding decides the floor; same library, same bytes). 0 for an all-zero block. Below 2^-125 the
// exponent is negative and the established code converts it to a byte as x86 does (the low 8 bits
// of the 32-bit integer): kept, so that such blocks come out the same.
uint8_t shared_exponent(float amax) {
    if (!(amax > 0.0f)) return 0;
    const float e = std::floor(log2f(amax)) - 2 + 127;
    return uint8_t(int32_t(e));
}

// The index whose level times d is nearest to x: errors |level * d - x| computed in float as the
// established quantizer does, the first index on ties (so 0 over -0 at index 8).
int nearest_mxfp4_index(float x, float d) {
    int best = 0;
    float best_err = std::fabs(float(kvalues_mxfp4[0]) * d - x);
    for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(float(kvalues_mxfp4[i]) * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

// The integer dot product of 32 levels (16 packed bytes) with 32 activation quants.
int dot_mxfp4_32(const uint8_t *qs, const int8_t *y) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) {
        sum += kvalues_mxfp4[qs[j] & 0xF] * y[j];
        sum += kvalues_mxfp4[qs[j] >> 4] * y[j + 16];
    }
    return sum;
}

}  // namespace

void from_float_mxfp4_ref(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_mxfp4 *>(dst);
    for (int64_t i = 0; i < n / qk_mxfp4; ++i, src += qk_mxfp4) {
        float amax = 0;
        for (int j = 0; j < qk_mxfp4; ++j) amax = std::fabs(src[j]) > amax ? std::fabs(src[j]) : amax;
        const uint8_t e = shared_exponent(amax);
        const float d = e8m0_to_fp32_half(e);
        y[i].e = e;
        for (int j = 0; j < qk_mxfp4 / 2; ++j)
            y[i].qs[j] = uint8_t(nearest_mxfp4_index(src[j], d) |
                                 (nearest_mxfp4_index(src[j + qk_mxfp4 / 2], d) << 4));
    }
}

void to_float_mxfp4(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const block_mxfp4 *>(src);
    for (int64_t i = 0; i < n / qk_mxfp4; ++i, dst += qk_mxfp4) {
        const float d = e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < qk_mxfp4 / 2; ++j) {
            dst[j] = float(kvalues_mxfp4[x[i].qs[j] & 0xF]) * d;
            dst[j + qk_mxfp4 / 2] = float(kvalues_mxfp4[x[i].qs[j] >> 4]) * d;
        }
    }
}

// One integer sum per block, then one fused multiply-add per block into a single float sum, in
// block order (the order of the interleaved kernels too: see backends/cpu/interleaved.h). The
// scale is a power of two, so d_w * d_a is exact unless it leaves float's normal range.
void vec_dot_mxfp4_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_mxfp4 *>(vx);
    const auto *y = static_cast<const block_q8_0 *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_mxfp4; ++i)
        sum = std::fma(e8m0_to_fp32_half(x[i].e) * fp16_to_fp32(y[i].d),
                       float(dot_mxfp4_32(x[i].qs, y[i].qs)), sum);
    *s = sum;
}

}  // namespace weft::quant
