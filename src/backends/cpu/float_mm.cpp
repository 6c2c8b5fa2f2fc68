// src/backends/cpu/float_mm.cpp — the scalar float tile (the oracle) and the run-time ISA choice.
#include "backends/cpu/float_mm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <string_view>

#include "backends/cpu/canonical_math.h"
#include "backends/cpu/f16_int16_mm.h"
#include "weft/core/fp16.h"
#include "weft/core/tensor.h"

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

namespace {
// What tensor::extra points at for grouped float weights.
const int float_group_marker = 0;
}  // namespace

bool can_group_float(const tensor &t) {
    // f32 weights stay in rows, computed by the tiles in the reference engine's order (16 lanes and
    // their tree), so an f32 model, the one checked against the reference, matches it bit for bit;
    // f16 and bf16, the types people run, take the faster grouped order.
    return is_float_weight(t.type) && t.type != dtype::f32 && t.ne[3] == 1 &&
           t.ne[1] % float_group_rows == 0 && (!takes_bf16_pairs(t.type) || t.ne[0] % 2 == 0) &&
           t.is_contiguous() && !t.is_view() && t.extra == nullptr;
}

bool is_grouped_float(const tensor &t) {
    return t.extra == &float_group_marker || is_grouped_f16_int16(t);
}

bool takes_f16_int16(const tensor &t) {
    static const bool enabled = [] {
        const char *v = std::getenv("WEFT_F16_INT16");
        return !(v && std::string_view(v) == "0");
    }();
    return enabled && can_group_f16_int16(t);
}

size_t grouped_float_size(const tensor &t) {
    return takes_f16_int16(t) ? f16_int16_size(t) : t.nbytes();
}

void group_float_tensor(tensor &t, const void *src, void *dst) {
    if (takes_f16_int16(t)) {
        group_f16_int16(t, src, dst);
        mark_f16_int16(t);
        return;
    }
    const size_t elt = type_traits(t.type).type_size;
    const int64_t k = t.ne[0];
    const auto *in = static_cast<const char *>(src);
    auto *out = static_cast<char *>(dst);
    auto regroup = [&](auto element) {
        using E = decltype(element);
        const auto *src_e = reinterpret_cast<const E *>(in);
        auto *dst_e = reinterpret_cast<E *>(out);
        for (int64_t g = 0; g < t.nrows() / float_group_rows; ++g)  // a stack's matrices one after the other
            for (int64_t r = 0; r < float_group_rows; ++r) {
                const E *row = src_e + (g * float_group_rows + r) * k;
                E *col = dst_e + g * k * float_group_rows + r;
                for (int64_t i = 0; i < k; ++i) col[i * float_group_rows] = row[i];
            }
    };
    if (takes_bf16_pairs(t.type)) {
        // value pairs (float_mm.h): the 32-bit word of pair j of row r at (j * 16 + r) * 2, the
        // subnormal weights made zero (vdpbf16ps takes them as zero)
        const auto *src_e = reinterpret_cast<const uint16_t *>(in);
        auto *dst_e = reinterpret_cast<uint16_t *>(out);
        for (int64_t g = 0; g < t.nrows() / float_group_rows; ++g)
            for (int64_t r = 0; r < float_group_rows; ++r) {
                const uint16_t *row = src_e + (g * float_group_rows + r) * k;
                uint16_t *to = dst_e + g * k * float_group_rows + 2 * r;
                for (int64_t i = 0; i < k; ++i) {
                    const uint16_t w = row[i];
                    to[(i / 2) * 2 * float_group_rows + i % 2] =
                        (w & 0x7f80u) == 0 ? uint16_t(w & 0x8000u) : w;
                }
            }
    } else if (elt == 2) {
        regroup(uint16_t{});
    } else {
        regroup(uint32_t{});
    }
    t.extra = const_cast<int *>(&float_group_marker);
}

namespace {

// vdpbf16ps's flush of a result below the smallest normal (float_mm.h)
float flush_subnormal(float v) {
    return std::fabs(v) < std::numeric_limits<float>::min() ? std::copysign(0.0f, v) : v;
}

float low_bf16(uint32_t pair) {
    return bf16_to_fp32(uint16_t(pair & 0xFFFFu));
}
float high_bf16(uint32_t pair) {
    return bf16_to_fp32(uint16_t(pair >> 16));
}

void bf16_groups_scalar(const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                        const uint32_t *pairs, int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    const int64_t kp = k / 2;
    for (int64_t g = 0; g < n_groups; ++g)
        for (int64_t c = 0; c < n_cols; ++c)
            for (int64_t r = 0; r < float_group_rows; ++r) {
                const char *w = groups + size_t(g) * group_stride + size_t(r) * sizeof(uint32_t);
                float acc = 0.0f;
                for (int64_t j = 0; j < kp; ++j) {
                    uint32_t wp;
                    std::memcpy(&wp, w + size_t(j) * float_group_rows * sizeof(uint32_t), sizeof wp);
                    const uint32_t xp = pairs[panel_index(j, c, kp, width)];
                    acc = flush_subnormal(std::fma(high_bf16(wp), high_bf16(xp), acc));
                    acc = flush_subnormal(std::fma(low_bf16(wp), low_bf16(xp), acc));
                }
                dst[size_t(c) * dst_stride + size_t(g * float_group_rows + r)] = acc;
            }
}

}  // namespace

void round_to_bf16_pairs_scalar(const float *x, int64_t k, uint32_t *pairs) {
    for (int64_t j = 0; j < k / 2; ++j)
        pairs[j] = uint32_t(round_to_bf16(x[2 * j])) | uint32_t(round_to_bf16(x[2 * j + 1])) << 16;
}

round_pairs_fn round_to_bf16_pairs_at(simd_level level) {
    return level == simd_level::scalar ? round_to_bf16_pairs_scalar : round_to_bf16_pairs_avx2;
}

round_pairs_fn best_round_to_bf16_pairs() {
    return best_of({round_to_bf16_pairs_scalar, round_to_bf16_pairs_avx2});
}

void float_groups_scalar(dtype wtype, const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                         const float *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    if (takes_bf16_pairs(wtype))
        return bf16_groups_scalar(groups, group_stride, n_groups, k, reinterpret_cast<const uint32_t *>(x),
                                  width, n_cols, dst, dst_stride);
    const size_t elt = type_traits(wtype).type_size;
    for (int64_t g = 0; g < n_groups; ++g)
        for (int64_t c = 0; c < n_cols; ++c)
            for (int64_t r = 0; r < float_group_rows; ++r) {
                const char *w = groups + size_t(g) * group_stride + size_t(r) * elt;
                float acc = 0.0f;
                for (int64_t i = 0; i < k; ++i)
                    acc = std::fma(weight_at(wtype, w + size_t(i) * float_group_rows * elt, 0),
                                   x[panel_index(i, c, k, width)], acc);
                dst[size_t(c) * dst_stride + size_t(g * float_group_rows + r)] = acc;
            }
}

void pack_panel_scalar(const float *const *columns, int64_t n, int64_t k, int64_t width, float *panel) {
    // 64 values of every column at a time, so the panel's cache lines being filled stay in L1 until
    // all its columns have written them
    constexpr int64_t values_per_step = 64;
    for (int64_t i0 = 0; i0 < k; i0 += values_per_step) {
        const int64_t i1 = std::min(k, i0 + values_per_step);
        for (int64_t j = 0; j < n; ++j)
            for (int64_t i = i0; i < i1; ++i) panel[i * width + j] = columns[j][i];
    }
}

pack_panel_fn pack_panel_at(simd_level level) {
    return level == simd_level::scalar ? pack_panel_scalar : pack_panel_avx2;
}

pack_panel_fn best_pack_panel() {
    return best_of({pack_panel_scalar, pack_panel_avx2});
}

float_group_fn float_groups_at(simd_level level) {
    const float_group_fn by_level[] = {float_groups_scalar, float_groups_avx2, float_groups_avx512};
    return by_level[std::min(size_t(level), std::size(by_level) - 1)];
}

float_group_fn best_float_groups() {
    return best_of({float_groups_scalar, float_groups_avx2, float_groups_avx512});
}

float_tile_fn float_tile_at(simd_level level) {
    const float_tile_fn by_level[] = {float_tile_scalar, float_tile_avx2, float_tile_avx512};
    return by_level[std::min(size_t(level), std::size(by_level) - 1)];
}

float_tile_fn best_float_tile() {
    return best_of({float_tile_scalar, float_tile_avx2, float_tile_avx512});
}

}  // namespace weft::cpu
