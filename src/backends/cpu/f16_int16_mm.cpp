// src/backends/cpu/f16_int16_mm.cpp — the int16 quantizer, the layout of f16 weights as int16
// blocks, the scalar kernel (the oracle) and the run-time ISA choice (f16_int16_mm.h).
#include "backends/cpu/f16_int16_mm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "backends/cpu/f16_int16_mm_impl.h"
#include "backends/cpu/float_mm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/rows.h"
#include "weft/core/fp16.h"

namespace weft::cpu {

float quantize_int16_block(const float *v, uint32_t *pairs) {
    float m = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < int16_block; ++i) {
        finite = finite && std::isfinite(v[i]);
        m = std::max(m, std::fabs(v[i]));
    }
    if (!finite || m == 0.0f) {
        std::fill(pairs, pairs + int16_pairs, 0u);
        return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    }
    const float limit = float(int16_limit);
    const float inverse = limit / m;
    auto q = [&](float x) {
        if (x == 0.0f) return 0u;  // x * inverse is NaN when the inverse is infinite
        const float r = std::nearbyint(std::clamp(x * inverse, -limit, limit));
        return uint32_t(uint16_t(int16_t(r)));
    };
    for (int64_t j = 0; j < int16_pairs; ++j) pairs[j] = q(v[2 * j]) | q(v[2 * j + 1]) << 16;
    return m / limit;
}

float quantize_int16_weight_row(const float *v, int64_t k, int32_t *exponents, uint32_t *pairs) {
    return int16_kernels::quantize_weight_row(v, k, exponents, pairs);
}

quantize_weight_row_fn best_quantize_int16_weight_row() {
    return best_of(
        {quantize_int16_weight_row, quantize_int16_weight_row_avx2, quantize_int16_weight_row_avx512});
}

bool can_group_f16_int16(const tensor &t) {
    return t.type == dtype::f16 && t.ne[2] == 1 && t.ne[3] == 1 && t.ne[1] % int16_rows == 0 &&
           t.ne[0] % int16_block == 0 && t.is_contiguous() && !t.is_view();
}

namespace {
// What tensor::extra points at for f16 weights in this layout.
const int f16_int16_marker = 0;
}  // namespace

void mark_f16_int16(tensor &t) {
    t.extra = const_cast<int *>(&f16_int16_marker);
}

bool is_grouped_f16_int16(const tensor &t) {
    return t.extra == &f16_int16_marker;
}

size_t f16_int16_size(const tensor &t) {
    return size_t(t.ne[1] / int16_rows) * f16_int16_group_bytes(t.ne[0]);
}

void group_f16_int16(const tensor &t, const void *src, void *dst) {
    // a group's 16 rows converted to floats and quantized, then written block after block: the rows'
    // scales, each block's exponents and pairs in their places among the 16 rows
    const int64_t k = t.ne[0], n_blocks = k / int16_block;
    const auto *in = static_cast<const char *>(src);
    auto *out = static_cast<char *>(dst);
    std::vector<float> values(static_cast<size_t>(k));
    std::vector<int32_t> exponents(static_cast<size_t>(int16_rows * n_blocks));
    std::vector<uint32_t> pairs(static_cast<size_t>(int16_rows * n_blocks * int16_pairs));
    float scales[int16_rows];
    const quantize_weight_row_fn quantize = best_quantize_int16_weight_row();
    for (int64_t g = 0; g < t.ne[1] / int16_rows; ++g) {
        for (int64_t r = 0; r < int16_rows; ++r) {
            load_row(dtype::f16, in + size_t((g * int16_rows + r) * k) * sizeof(fp16_t), sizeof(fp16_t), k,
                     values.data());
            scales[r] = quantize(values.data(), k, exponents.data() + r * n_blocks,
                                 pairs.data() + r * n_blocks * int16_pairs);
        }
        std::memset(out, 0, f16_int16_pairs_at(n_blocks));  // the exponents' padding
        std::memcpy(out, scales, sizeof scales);
        auto *e = reinterpret_cast<uint8_t *>(out + f16_int16_exponents_at(0));
        for (int64_t b = 0; b < n_blocks; ++b)
            for (int64_t r = 0; r < int16_rows; ++r) *e++ = uint8_t(exponents[size_t(r * n_blocks + b)]);
        auto *words = reinterpret_cast<uint32_t *>(out + f16_int16_pairs_at(n_blocks));
        for (int64_t b = 0; b < n_blocks; ++b)
            for (int64_t j = 0; j < int16_pairs; ++j)
                for (int64_t r = 0; r < int16_rows; ++r)
                    *words++ = pairs[size_t((r * n_blocks + b) * int16_pairs + j)];
        out += f16_int16_group_bytes(k);
    }
}

void quantize_int16_column(const float *x, int64_t k, int64_t j, int64_t width, uint32_t *panel) {
    uint32_t pairs[int16_pairs];
    for (int64_t b = 0; b < k / int16_block; ++b) {
        uint32_t *block = panel + b * int16_panel_words * width;
        const float scale = quantize_int16_block(x + b * int16_block, pairs);
        std::memcpy(&block[j], &scale, sizeof scale);
        for (int64_t p = 0; p < int16_pairs; ++p) block[width * (1 + p) + j] = pairs[p];
    }
}

void quantize_int16_scalar(const float *x, int64_t k, uint32_t *column) {
    quantize_int16_column(x, k, 0, 1, column);
}

quantize_int16_fn quantize_int16_at(simd_level level) {
    const quantize_int16_fn by_level[] = {quantize_int16_scalar, quantize_int16_avx2, quantize_int16_avx512};
    return by_level[std::min(size_t(level), std::size(by_level) - 1)];
}

quantize_int16_fn best_quantize_int16() {
    return best_of({quantize_int16_scalar, quantize_int16_avx2, quantize_int16_avx512});
}

void pack_int16_panel(const uint32_t *const *columns, int64_t n, int64_t k, int64_t width, uint32_t *panel) {
    // a panel's block b is 17 rows of `width` words: the columns' words of a panel of width 1,
    // transposed (a copy of 32-bit words, as the f32 panels')
    best_pack_panel()(reinterpret_cast<const float *const *>(columns), n, k / int16_block * int16_panel_words,
                      width, reinterpret_cast<float *>(panel));
}

void int16_groups_scalar(const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                         const uint32_t *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    auto low = [](uint32_t w) { return int32_t(int16_t(uint16_t(w & 0xFFFFu))); };
    auto high = [](uint32_t w) { return int32_t(int16_t(uint16_t(w >> 16))); };
    const int64_t n_blocks = k / int16_block;
    for (int64_t g = 0; g < n_groups; ++g)
        for (int64_t c = 0; c < n_cols; ++c)
            for (int64_t r = 0; r < int16_rows; ++r) {
                const char *group = groups + size_t(g) * group_stride;
                const char *pairs = group + f16_int16_pairs_at(n_blocks);
                const uint32_t *column = x + (c / width) * n_blocks * int16_panel_words * width + c % width;
                float acc = 0.0f;
                for (int64_t b = 0; b < n_blocks; ++b) {
                    const char *block = pairs + size_t(b) * f16_int16_pair_bytes;
                    const int e = static_cast<uint8_t>(group[f16_int16_exponents_at(b) + size_t(r)]);
                    float sx;
                    const uint32_t *xb = column + b * int16_panel_words * width;
                    std::memcpy(&sx, xb, sizeof sx);
                    int32_t isum = 0;
                    for (int64_t j = 0; j < int16_pairs; ++j) {
                        uint32_t w;
                        std::memcpy(&w, block + size_t(j * int16_rows + r) * 4, sizeof w);
                        const uint32_t xv = xb[width * (1 + j)];
                        isum += low(w) * low(xv) + high(w) * high(xv);
                    }
                    acc = std::fma(std::ldexp(float(isum), e), sx, acc);
                }
                float scale;
                std::memcpy(&scale, group + size_t(r) * sizeof(float), sizeof scale);
                dst[size_t(c) * dst_stride + size_t(g * int16_rows + r)] = acc * scale;
            }
}

int16_group_fn int16_groups_at(simd_level level) {
    // AVX-512 without VNNI takes the AVX2 kernel (vpmaddwd + vpaddd): the same bits
    const int16_group_fn by_level[] = {int16_groups_scalar, int16_groups_avx2, int16_groups_avx2,
                                       int16_groups_avx512};
    return by_level[std::min(size_t(level), std::size(by_level) - 1)];
}

int16_group_fn best_int16_groups() {
    return best_of({int16_groups_scalar, int16_groups_avx2, int16_groups_avx2, int16_groups_avx512});
}

namespace {

size_t panels_bytes(const tensor &b) {
    const int64_t n_cols = b.nrows();
    if (n_cols == 1) return 0;
    const int64_t panels = (n_cols + int16_panel_width - 1) / int16_panel_width;
    return pad_to_cache_line(size_t(panels) * int16_panel_bytes(b.ne[0], int16_panel_width));
}
// Per thread: its columns quantized as panels of width 1 (one column alone: the column's panel; else
// a panel's columns before they are transposed into it), and one column as floats.
size_t thread_bytes(const tensor &b) {
    const int64_t columns = b.nrows() == 1 ? 1 : int16_panel_width;
    return pad_to_cache_line(size_t(columns) * int16_panel_bytes(b.ne[0], 1)) +
           pad_to_cache_line(size_t(b.ne[0]) * sizeof(float));
}

}  // namespace

size_t work_size_mul_mat_f16_int16(const tensor &dst, int n_threads) {
    const tensor &b = *dst.src[1];
    return panels_bytes(b) + size_t(n_threads) * thread_bytes(b);
}

void compute_mul_mat_f16_int16(const compute_params &p, tensor *const *dsts, int n_dsts) {
    WEFT_ASSERT(n_dsts >= 1 && n_dsts <= max_shared_products);
    const tensor &b = *dsts[0]->src[1];  // [k, n, B2, B3]
    const int64_t k = dsts[0]->src[0]->ne[0], n_cols = b.nrows();
    int64_t groups[max_shared_products] = {};
    for (int j = 0; j < n_dsts; ++j) {
        const tensor &a = *dsts[j]->src[0];  // [k, m] in this layout
        WEFT_ASSERT(dsts[j]->src[1] == &b && is_grouped_f16_int16(a) && a.ne[0] == k);
        groups[j] = a.ne[1] / int16_rows;
    }
    const int64_t width = n_cols == 1 ? 1 : int16_panel_width;
    std::byte *mine = p.wdata + panels_bytes(b) + size_t(p.ith) * thread_bytes(b);
    auto *own_columns = reinterpret_cast<uint32_t *>(mine);
    const size_t column_words = int16_panel_bytes(k, 1) / sizeof(uint32_t);
    auto *column_f32 =
        reinterpret_cast<float *>(mine + pad_to_cache_line(size_t(width) * int16_panel_bytes(k, 1)));
    const quantize_int16_fn quantize = best_quantize_int16();
    auto quantize_column = [&](int64_t c, uint32_t *to) {
        int64_t i1, i2, i3;
        unravel_row(c, b.ne, i1, i2, i3);
        quantize(row_as_f32(b.type, row_at(b, i1, i2, i3), b.nb[0], k, column_f32), k, to);
    };
    const size_t panel_words = int16_panel_bytes(k, width) / sizeof(uint32_t);
    const uint32_t *x = own_columns;
    if (n_cols == 1) {
        // one column (decode): every thread quantizes it into its own memory, so no barrier
        quantize_column(0, own_columns);
    } else {
        // a panel's columns each quantized into this thread's memory, then transposed into the panel
        auto *panels = reinterpret_cast<uint32_t *>(p.wdata);
        const index_range ps = split_range((n_cols + width - 1) / width, p.ith, p.nth);
        const uint32_t *columns[int16_panel_width];
        for (int64_t panel = ps.begin; panel < ps.end; ++panel) {
            const int64_t c0 = panel * width, n = std::min(width, n_cols - c0);
            for (int64_t j = 0; j < n; ++j) {
                quantize_column(c0 + j, own_columns + size_t(j) * column_words);
                columns[j] = own_columns + size_t(j) * column_words;
            }
            pack_int16_panel(columns, n, k, width, panels + size_t(panel) * panel_words);
        }
        x = panels;
        p.barrier();
    }

    const shared_chunks plan = plan_shared_chunks(groups, n_dsts, p.nth);
    const int64_t *first_chunk = plan.first_chunk;
    const chunk_dispenser chunks(p, plan.n_chunks);
    const int16_group_fn kernel = best_int16_groups();
    const size_t group_bytes = f16_int16_group_bytes(k);
    constexpr int64_t pass = 2 * int16_panel_width;  // columns whose panels stay in cache over a chunk
    int j = 0;                                       // the product of the chunk
    for (int64_t chunk = chunks.next(p.ith); chunk >= 0; chunk = chunks.next(p.ith)) {
        while (chunk >= first_chunk[j + 1]) ++j;
        while (chunk < first_chunk[j]) --j;
        const int64_t m = groups[j] * int16_rows;
        const auto *weights = static_cast<const char *>(dsts[j]->src[0]->data);
        auto *out = static_cast<float *>(dsts[j]->data);  // contiguous: column c at out + c * m
        const int64_t g_begin = (chunk - first_chunk[j]) * plan.groups_per_chunk;
        const int64_t g_count = std::min(groups[j], g_begin + plan.groups_per_chunk) - g_begin;
        for (int64_t c0 = 0; c0 < n_cols; c0 += pass)
            kernel(weights + size_t(g_begin) * group_bytes, group_bytes, g_count, k,
                   x + size_t(c0 / width) * panel_words, width, std::min(pass, n_cols - c0),
                   out + c0 * m + g_begin * int16_rows, size_t(m));
    }
}

}  // namespace weft::cpu
