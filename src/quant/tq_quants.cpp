// src/quant/tq_quants.cpp — scalar reference kernels of the ternary types tq1_0 and tq2_0.
//
// Both hold 256 values in {-d, 0, +d} (d: the block's largest magnitude, fp16), one code in
// {0, 1, 2} per value: tq2_0 packs them four to a byte, tq1_0 five to a byte in base 3 (see
// blocks.h). Both are dotted against q8_K activations, as in the established implementation.
//
// The quantizer is the established one, which takes no importance: each value becomes the nearest
// of -1, 0, +1 after division by d (halves rounded away from zero, as lroundf does).
#include <algorithm>
#include <cmath>
#include <iterator>

#include "quant/kernels.h"
#include "weft/quant/blocks.h"

namespace weft::quant {
namespace {

// The parts of a tq1_0 block in element order: `bytes` bytes from `first` of the byte array
// `in_qh` picks, each holding `codes` codes; code k of byte m is element base + bytes * k + m.
struct tq1_part {
    bool in_qh;
    int first, bytes, codes, base;
};
constexpr tq1_part tq1_parts[3] = {{false, 0, 32, 5, 0}, {false, 32, 16, 5, 160}, {true, 0, 4, 4, 240}};

// The 256 codes of a tq1_0 block, in element order.
void tq1_codes(const block_tq1_0 &b, uint8_t *codes) {
    for (const tq1_part &p : tq1_parts) {
        const uint8_t *bytes = (p.in_qh ? b.qh : b.qs) + p.first;
        for (int k = 0; k < p.codes; ++k)
            for (int m = 0; m < p.bytes; ++m)
                codes[p.base + p.bytes * k + m] = uint8_t(tq1_code(bytes[m], k));
    }
}

// The 256 codes of a tq2_0 block, in element order.
void tq2_codes(const block_tq2_0 &b, uint8_t *codes) {
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 4; ++l)
            for (int m = 0; m < 32; ++m) codes[128 * h + 32 * l + m] = (b.qs[32 * h + m] >> (2 * l)) & 3;
}

// One block's scale and codes: d = the largest magnitude, code = lround(x / d) + 1.
float ternary_codes(const float *x, uint8_t *codes) {
    float amax = 0;
    for (int j = 0; j < qk_k; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float id = amax != 0 ? 1 / amax : 0.f;
    for (int j = 0; j < qk_k; ++j) codes[j] = uint8_t(std::lround(x[j] * id) + 1);
    return amax;
}

void quantize_tq1_0(const float *x, void *dst, int64_t n) {
    auto *y = static_cast<block_tq1_0 *>(dst);
    for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
        uint8_t codes[qk_k];
        y[i].d = fp32_to_fp16(ternary_codes(x, codes));
        for (const tq1_part &p : tq1_parts) {
            uint8_t *bytes = (p.in_qh ? y[i].qh : y[i].qs) + p.first;
            for (int m = 0; m < p.bytes; ++m) {
                unsigned v = 0;  // the codes as a five-digit base-3 number, the first one leading
                for (int k = 0; k < 5; ++k) v = 3 * v + (k < p.codes ? codes[p.base + p.bytes * k + m] : 0u);
                bytes[m] = uint8_t((v * 256 + 242) / 243);
            }
        }
    }
}

void quantize_tq2_0(const float *x, void *dst, int64_t n) {
    auto *y = static_cast<block_tq2_0 *>(dst);
    for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
        uint8_t codes[qk_k];
        y[i].d = fp32_to_fp16(ternary_codes(x, codes));
        std::fill(std::begin(y[i].qs), std::end(y[i].qs), uint8_t(0));
        for (int h = 0; h < 2; ++h)
            for (int l = 0; l < 4; ++l)
                for (int m = 0; m < 32; ++m)
                    y[i].qs[32 * h + m] =
                        uint8_t(y[i].qs[32 * h + m] | (codes[128 * h + 32 * l + m] << (2 * l)));
    }
}

void codes_to_float(const uint8_t *codes, float d, float *dst) {
    for (int j = 0; j < qk_k; ++j) dst[j] = float(int(codes[j]) - 1) * d;
}

// Sum of (code - 1) * y over a block: exact.
int ternary_dot(const uint8_t *codes, const int8_t *y) {
    int sum = 0;
    for (int j = 0; j < qk_k; ++j) sum += (int(codes[j]) - 1) * y[j];
    return sum;
}

// One integer sum per block, then one fused multiply-add per block into a single float sum, in
// block order (std::fma rounds once whatever the compiler's contraction settings), so the CPU
// backend's AVX2 kernels (row_kernels_avx2.cpp) give the same bits.
template <class Block, void (*codes_of)(const Block &, uint8_t *)>
void vec_dot_ternary(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const Block *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        uint8_t codes[qk_k];
        codes_of(x[i], codes);
        sum = std::fma(fp16_to_fp32(x[i].d) * y[i].d, float(ternary_dot(codes, y[i].qs)), sum);
    }
    *s = sum;
}

template <class Block, void (*codes_of)(const Block &, uint8_t *)>
void to_float_ternary(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const Block *>(src);
    for (int64_t i = 0; i < n / qk_k; ++i, dst += qk_k) {
        uint8_t codes[qk_k];
        codes_of(x[i], codes);
        codes_to_float(codes, fp16_to_fp32(x[i].d), dst);
    }
}

}  // namespace

void from_float_tq1_0_ref(const float *src, void *dst, int64_t n) {
    quantize_tq1_0(src, dst, n);
}
void from_float_tq2_0_ref(const float *src, void *dst, int64_t n) {
    quantize_tq2_0(src, dst, n);
}

void to_float_tq1_0(const void *src, float *dst, int64_t n) {
    to_float_ternary<block_tq1_0, tq1_codes>(src, dst, n);
}
void to_float_tq2_0(const void *src, float *dst, int64_t n) {
    to_float_ternary<block_tq2_0, tq2_codes>(src, dst, n);
}

void vec_dot_tq1_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_ternary<block_tq1_0, tq1_codes>(n, s, vx, vy);
}
void vec_dot_tq2_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_ternary<block_tq2_0, tq2_codes>(n, s, vx, vy);
}

}  // namespace weft::quant
