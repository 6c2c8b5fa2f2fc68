// weft/quant/blocks.h — the on-disk block layouts of the quantized types, byte-identical to GGUF's.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "weft/core/fp16.h"

namespace weft {

// Elements per block. The "legacy" types quantize 32 values per block with one (or two) fp16
// numbers; the K-quants group 256 values into a super-block of 16 or 8 sub-blocks whose scales
// are themselves quantized against one fp16 super-scale.
inline constexpr int qk4_0 = 32;
inline constexpr int qk4_1 = 32;
inline constexpr int qk5_0 = 32;
inline constexpr int qk5_1 = 32;
inline constexpr int qk8_0 = 32;
inline constexpr int qk8_1 = 32;
inline constexpr int qk_k = 256;
inline constexpr int qk4_nl = 32;
inline constexpr int k_scale_size = 12;  // 8 six-bit scales + 8 six-bit mins of q4_K / q5_K

// x = d * (q - 8), q in [0, 15]; element j in the low nibble of qs[j], element j + 16 in the high.
struct block_q4_0 {
    fp16_t d;
    uint8_t qs[qk4_0 / 2];
};

// x = d * q + m, q in [0, 15]; same nibble order as q4_0.
struct block_q4_1 {
    fp16_t d;
    fp16_t m;
    uint8_t qs[qk4_1 / 2];
};

// x = d * (q - 16), q in [0, 31]: four low bits as in q4_0, the fifth bit of element j is bit j of qh.
struct block_q5_0 {
    fp16_t d;
    uint8_t qh[4];
    uint8_t qs[qk5_0 / 2];
};

// x = d * q + m, q in [0, 31]; bits as in q5_0.
struct block_q5_1 {
    fp16_t d;
    fp16_t m;
    uint8_t qh[4];
    uint8_t qs[qk5_1 / 2];
};

// x = d * q, q in [-127, 127].
struct block_q8_0 {
    fp16_t d;
    int8_t qs[qk8_0];
};

// Activations for q4_1 / q5_1: as q8_0 plus s = d * sum(qs), which carries the weight minimum.
struct block_q8_1 {
    fp16_t d;
    fp16_t s;
    int8_t qs[qk8_1];
};

// 16 sub-blocks of 16: x = d * (scales & 15) * q - dmin * (scales >> 4), q in [0, 3].
// Element 128 * h + 32 * s + l (h < 2, s < 4, l < 32) is bits 2s..2s+1 of qs[32 * h + l].
struct block_q2_k {
    uint8_t scales[qk_k / 16];
    uint8_t qs[qk_k / 4];
    fp16_t d;
    fp16_t dmin;
};

// 16 sub-blocks of 16: x = d * (scale - 32) * (q - 4 * !hbit), with six-bit scales packed in
// 12 bytes (low nibbles in bytes 0..7, high two bits in bytes 8..11). Low bits as in q2_K; the
// high bit of element e is bit e / 32 of hmask[e % 32].
struct block_q3_k {
    uint8_t hmask[qk_k / 8];
    uint8_t qs[qk_k / 4];
    uint8_t scales[12];
    fp16_t d;
};

// 8 sub-blocks of 32: x = d * scale * q - dmin * min, q in [0, 15], six-bit scales and mins in
// `scales` (see scale_min_k4). Element 64 * p + l is the low nibble of qs[32 * p + l], element
// 64 * p + 32 + l the high nibble.
struct block_q4_k {
    fp16_t d;
    fp16_t dmin;
    uint8_t scales[k_scale_size];
    uint8_t qs[qk_k / 2];
};

// As q4_K with a fifth bit: element 64 * p + l has it in bit 2p of qh[l], 64 * p + 32 + l in bit 2p + 1.
struct block_q5_k {
    fp16_t d;
    fp16_t dmin;
    uint8_t scales[k_scale_size];
    uint8_t qh[qk_k / 8];
    uint8_t qs[qk_k / 2];
};

// 16 sub-blocks of 16: x = d * scales[s] * (q - 32), q in [0, 63]. Per half h of 128 elements,
// element 128h + 32c + l takes its low nibble from ql[64h + l + 32 * (c & 1)] (low nibble for
// c < 2, high for c >= 2) and its two high bits from bits 2c..2c+1 of qh[32h + l].
struct block_q6_k {
    uint8_t ql[qk_k / 2];
    uint8_t qh[qk_k / 4];
    int8_t scales[qk_k / 16];
    fp16_t d;
};

// Activations for the K-quants: x = d * q, with the sums of each group of 16 quants precomputed
// (they multiply the weight minimums without touching the quants again).
struct block_q8_k {
    float d;
    int8_t qs[qk_k];
    int16_t bsums[qk_k / 16];
};

// The non-linear 4-bit types share one codebook: a 4-bit index selects one of these 16 levels
// (denser near zero, where most weights are), which is then multiplied by the block's scale.
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

// x = d * kvalues_iq4nl[q], q in [0, 15]; same nibble order as q4_0 (element j in the low nibble
// of qs[j], element j + 16 in the high one).
struct block_iq4_nl {
    fp16_t d;
    uint8_t qs[qk4_nl / 2];
};

// 8 sub-blocks of 32: x = d * (scale - 32) * kvalues_iq4nl[q], with six-bit scales: the low nibble
// of scale j in scales_l[j / 2] (low nibble for even j), its top two bits in bits 2j..2j+1 of
// scales_h. Sub-block j's quants are qs[16 j .. 16 j + 15], nibbles ordered as in iq4_nl.
struct block_iq4_xs {
    fp16_t d;
    uint16_t scales_h;
    uint8_t scales_l[qk_k / 64];
    uint8_t qs[qk_k / 2];
};

// MXFP4 (OCP microscaling FP4, gpt-oss's experts): 32 values share a power-of-two scale, each an
// E2M1 float in {0, 0.5, 1, 1.5, 2, 3, 4, 6} with a sign bit. The levels are stored doubled as
// integers (index 8 is -0) so that they fit int8 and an integer dot product; the scale is then
// halved: x = kvalues_mxfp4[q] * 2^(e - 128) (e8m0_to_fp32_half).
inline constexpr int qk_mxfp4 = 32;
inline constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// e: the shared exponent (e8m0: no sign, no mantissa; 2^(e - 127), here halved). Nibbles as q4_0's:
// element j in the low nibble of qs[j], element j + 16 in the high one.
struct block_mxfp4 {
    uint8_t e;
    uint8_t qs[qk_mxfp4 / 2];
};

// 2^(e - 128) exactly, as float bits: a normal float for e >= 2, the subnormals 2^-127 and 2^-128
// for e = 1 and 0 (one mantissa bit, 0x00400000 and 0x00200000).
inline uint32_t e8m0_half_bits(uint8_t e) {
    return e < 2 ? uint32_t(0x00200000u) << e : uint32_t(e - 1) << 23;
}
inline float e8m0_to_fp32_half(uint8_t e) {
    return std::bit_cast<float>(e8m0_half_bits(e));
}

// The ternary types (BitNet b1.58, TriLMs): x = d * t with t in {-1, 0, +1}, stored as the code
// c = t + 1 in {0, 1, 2}; d is the block's largest magnitude.
//
// tq2_0: four 2-bit codes a byte; element 128 h + 32 l + m (h < 2, l < 4, m < 32) is in bits
// 2l..2l+1 of qs[32 h + m].
struct block_tq2_0 {
    uint8_t qs[qk_k / 4];
    fp16_t d;
};

// tq1_0: five codes a byte (3^5 = 243 <= 256), as the fraction v / 243 of the base-3 number
// v = c0 c1 c2 c3 c4 (c0 most significant) scaled to a byte rounding up: byte = ceil(256 v / 243),
// so code k is the integer part of 3 * frac(3^k * byte / 256) (tq1_code). Element 32 k + m is code
// k of qs[m] (m < 32), element 160 + 16 k + m code k of qs[32 + m] (m < 16), and element
// 240 + 4 k + j code k of qh[j] (j < 4, four codes a byte, the fifth always 0).
struct block_tq1_0 {
    uint8_t qs[48];
    uint8_t qh[qk_k / 64];
    fp16_t d;
};

// Code k (< 5) of a tq1_0 byte.
inline int tq1_code(uint8_t byte, int k) {
    constexpr uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return (uint8_t(byte * pow3[k]) * 3) >> 8;
}

// The grid i-quants: groups of 4 or 8 magnitudes are one index into a codebook (src/quant/iq_grids.cpp)
// with the signs stored apart; super-blocks of 256 with an fp16 scale and small sub-block scales.
//
// iq3_s: element 32 s + 8 g + 4 h + j (s < 8 sub-blocks, g < 4, h < 2, j < 4) is
// d * (1 + 2 scale_s) * grid[qs[8 s + 2 g + h] + 256 * bit (2 g + h) of qh[s]] byte j, negative when
// bit 4 h + j of signs[4 s + g] is set; scale_s is the low nibble of scales[s / 2] for even s,
// the high one for odd s.
// iq2_xxs: sub-block s (< 8) is qs[4 s .. 4 s + 3] read as 8 bytes b0..b7 (little-endian): group g
// (< 4) of 8 elements is grid point b_g, its signs the even-parity pattern of bits 7 g..7 g + 6 of
// the 32-bit word w = b4..b7, and x = d * (1 + 2 (w >> 28)) / 8 * grid value.
struct block_iq2_xxs {
    fp16_t d;
    uint16_t qs[qk_k / 8];
};

// iq2_xs: group g (< 32) of 8 elements is grid point qs[g] & 511 with the even-parity signs of
// qs[g] >> 9; x = d * (1 + 2 scale) / 8 * grid value, scale the low nibble of scales[g / 4] for
// g % 4 < 2, the high one otherwise.
struct block_iq2_xs {
    fp16_t d;
    uint16_t qs[qk_k / 8];
    uint8_t scales[qk_k / 32];
};

// iq2_s: group g (< 32) of 8 elements is grid point qs[g] + 256 * (bits 2 (g % 4)..+1 of qh[g / 4]),
// negative where bit j of qs[32 + g] is set (all 8 signs stored); x = d * (1 + 2 scale) / 8 * grid
// value, scale the low nibble of scales[g / 4] for g % 4 < 2, the high one otherwise.
struct block_iq2_s {
    fp16_t d;
    uint8_t qs[qk_k / 4];
    uint8_t qh[qk_k / 32];
    uint8_t scales[qk_k / 32];
};

// iq3_xxs: sub-block s (< 8): qs[8 s .. 8 s + 7] index grid points of 4 (two per group of 8); the
// little-endian word w = qs[64 + 4 s .. 64 + 4 s + 3] holds the even-parity signs of group g in bits
// 7 g..7 g + 6 and the scale in bits 28..31: x = d * (1 + 2 (w >> 28)) / 4 * grid value.
struct block_iq3_xxs {
    fp16_t d;
    uint8_t qs[3 * qk_k / 8];
};

// iq1_s: sub-block s (< 8) of 32, group g (< 4) of 8 is iq1s grid point qs[4 s + g] + 256 * (bits
// 3 g..3 g + 2 of qh[s]); x = d * (1 + 2 (bits 12..14 of qh[s])) * (value + delta), delta = -1/8 when
// bit 15 of qh[s] is set, +1/8 otherwise.
struct block_iq1_s {
    fp16_t d;
    uint8_t qs[qk_k / 8];
    uint16_t qh[qk_k / 32];
};

// iq1_m: no separate scale: the fp16 d is the top nibbles of the four 16-bit words of scales (word
// k's bits 12..15 are bits 4k..4k+3 of d). Group g (< 32) of 8 is grid point qs[g] + 256 * (3 bits
// of qh[g / 2]: bits 0..2 for even g, 4..6 for odd), delta -1/8 when the next bit (3 or 7) is set;
// x = d * (1 + 2 ls) * (value + delta), where sub-block s (< 8) takes ls from scale word s / 2: bits
// 6 (s % 2)..+2 for its first 16 values, bits 6 (s % 2) + 3..+5 for the last 16.
struct block_iq1_m {
    uint8_t qs[qk_k / 8];
    uint8_t qh[qk_k / 16];
    uint8_t scales[qk_k / 32];
};

struct block_iq3_s {
    fp16_t d;
    uint8_t qs[qk_k / 4];
    uint8_t qh[qk_k / 32];
    uint8_t signs[qk_k / 8];
    uint8_t scales[qk_k / 64];
};

static_assert(sizeof(block_q4_0) == 18, "q4_0 block is 18 bytes");
static_assert(sizeof(block_q4_1) == 20, "q4_1 block is 20 bytes");
static_assert(sizeof(block_q5_0) == 22, "q5_0 block is 22 bytes");
static_assert(sizeof(block_q5_1) == 24, "q5_1 block is 24 bytes");
static_assert(sizeof(block_q8_0) == 34, "q8_0 block is 34 bytes");
static_assert(sizeof(block_q8_1) == 36, "q8_1 block is 36 bytes");
static_assert(sizeof(block_q2_k) == 84, "q2_K block is 84 bytes");
static_assert(sizeof(block_q3_k) == 110, "q3_K block is 110 bytes");
static_assert(sizeof(block_q4_k) == 144, "q4_K block is 144 bytes");
static_assert(sizeof(block_q5_k) == 176, "q5_K block is 176 bytes");
static_assert(sizeof(block_q6_k) == 210, "q6_K block is 210 bytes");
static_assert(sizeof(block_q8_k) == 292, "q8_K block is 292 bytes");
static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl block is 18 bytes");
static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs block is 136 bytes");
static_assert(sizeof(block_iq2_xxs) == 66, "iq2_xxs block is 66 bytes");
static_assert(sizeof(block_iq2_xs) == 74, "iq2_xs block is 74 bytes");
static_assert(sizeof(block_iq2_s) == 82, "iq2_s block is 82 bytes");
static_assert(sizeof(block_iq3_xxs) == 98, "iq3_xxs block is 98 bytes");
static_assert(sizeof(block_iq1_s) == 50, "iq1_s block is 50 bytes");
static_assert(sizeof(block_iq1_m) == 56, "iq1_m block is 56 bytes");
static_assert(sizeof(block_iq3_s) == 110, "iq3_s block is 110 bytes");
static_assert(sizeof(block_tq1_0) == 54, "tq1_0 block is 54 bytes");
static_assert(sizeof(block_tq2_0) == 66, "tq2_0 block is 66 bytes");
static_assert(sizeof(block_mxfp4) == 17, "mxfp4 block is 17 bytes");

// Sub-block j (< 8) of a q4_K / q5_K block: its six-bit scale and min. Bytes 0..3 hold scales
// 0..3 (low six bits), bytes 4..7 mins 0..3; scales/mins 4..7 keep their low nibbles in bytes
// 8..11 and their top two bits in the spare top bits of bytes 0..7.
inline void scale_min_k4(int j, const uint8_t *q, uint8_t *scale, uint8_t *min) {
    if (j < 4) {
        *scale = q[j] & 63;
        *min = q[j + 4] & 63;
    } else {
        *scale = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Sub-block j (< 16) of a q3_K block: its signed scale in [-32, 31].
inline int scale_q3_k(int j, const uint8_t *scales) {
    const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
}

// Sub-block j (< 8) of an iq4_xs block: its signed scale in [-32, 31].
inline int scale_iq4_xs(int j, const block_iq4_xs &b) {
    const int low = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
    const int high = (b.scales_h >> (2 * j)) & 3;
    return (low | (high << 4)) - 32;
}

}  // namespace weft
