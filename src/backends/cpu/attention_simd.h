// src/backends/cpu/attention_simd.h — the loops of attention_impl.h with vectors, written once over
// a vector type V (the ISA files give V: width, load, store, fma, set1, zero, and a widening of
// fp16). Each vector lane is one output element's own serial chain, so the results equal the
// plain loops' bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/attention_impl.h"

namespace weft::cpu {
namespace {  // internal linkage: one copy per ISA build

template <class V>
struct simd_attention_loops {
    static constexpr int w = V::width;

    static void convert(const char *src, dtype t, int64_t n, float *out) {
        if (t == dtype::f32) {
            std::memcpy(out, src, size_t(n) * sizeof(float));
            return;
        }
        if (t != dtype::f16) {
            widen_row(src, t, n, out);
            return;
        }
        int64_t i = 0;
        for (; i + w <= n; i += w) V::store(out + i, V::widen_fp16(src + 2 * i));
        for (; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, sizeof h);
            out[i] = V::fp16_to_float(h);
        }
    }

    // Blocks of 16 cells x 16 values transposed in registers where V can (V::transpose16), the rest
    // one row at a time.
    static void transpose_k(const char *k, int64_t row_bytes, dtype type, int64_t head_k, int64_t cells,
                            float *kt, int64_t stride, float *scratch) {
        int64_t j0 = 0;
        if constexpr (V::can_transpose16) {
            if (type == dtype::f16 && head_k % 16 == 0)
                for (; j0 + 16 <= cells; j0 += 16)
                    for (int64_t d0 = 0; d0 < head_k; d0 += 16)
                        V::transpose16(k + j0 * row_bytes + d0 * 2, row_bytes, kt + d0 * stride + j0, stride);
        }
        transpose_k_rows(convert, k, row_bytes, type, head_k, j0, cells, kt, stride, scratch);
    }

    // 64 cells at a time: independent chains
    static void scores(const float *q, const float *kt, int64_t stride, int64_t n, int64_t cells,
                       float *out) {
        constexpr int vectors = 64 / w;
        int64_t j = 0;
        for (; j + 64 <= cells; j += 64) {
            typename V::type acc[vectors];
            for (int c = 0; c < vectors; ++c) acc[c] = V::zero();
            for (int64_t d = 0; d < n; ++d) {
                const auto qd = V::set1(q[d]);
                for (int c = 0; c < vectors; ++c)
                    acc[c] = V::fma(qd, V::load(kt + d * stride + j + w * c), acc[c]);
            }
            for (int c = 0; c < vectors; ++c) V::store(out + j + w * c, acc[c]);
        }
        for (; j < cells; j += w) {
            auto acc = V::zero();
            for (int64_t d = 0; d < n; ++d) acc = V::fma(V::set1(q[d]), V::load(kt + d * stride + j), acc);
            V::store(out + j, acc);
        }
    }

    // Several query heads against the same K and V rows: each row read serves all of them. Not
    // inlined (nor weighted_sum_nh): inside the large task function GCC kept the accumulators in
    // memory, and attention over a 512-token prompt took 1.6x as long.
    template <int NH>
    [[gnu::noinline]] static void scores_nh(const float *const *q, const float *kt, int64_t stride, int64_t n,
                                            int64_t cells, float *const *out) {
        constexpr int vectors = 16 / w;  // 16 cells
        for (int64_t j = 0; j < cells; j += 16) {
            typename V::type acc[NH][vectors];
            for (int h = 0; h < NH; ++h)
                for (int c = 0; c < vectors; ++c) acc[h][c] = V::zero();
            for (int64_t d = 0; d < n; ++d) {
                typename V::type kv[vectors];
                for (int c = 0; c < vectors; ++c) kv[c] = V::load(kt + d * stride + j + w * c);
                for (int h = 0; h < NH; ++h) {
                    const auto qd = V::set1(q[h][d]);
                    for (int c = 0; c < vectors; ++c) acc[h][c] = V::fma(qd, kv[c], acc[h][c]);
                }
            }
            for (int h = 0; h < NH; ++h)
                for (int c = 0; c < vectors; ++c) V::store(out[h] + j + w * c, acc[h][c]);
        }
    }
    static void scores_heads(const float *const *q, int nh, const float *kt, int64_t stride, int64_t n,
                             int64_t cells, float *const *out) {
        switch (nh) {
            case 4:
                return scores_nh<4>(q, kt, stride, n, cells, out);
            case 3:
                return scores_nh<3>(q, kt, stride, n, cells, out);
            case 2:
                return scores_nh<2>(q, kt, stride, n, cells, out);
            default:
                return scores(q[0], kt, stride, n, cells, out[0]);
        }
    }

    template <int NH>
    [[gnu::noinline]] static void weighted_sum_nh(const float *const *p, const int32_t *visible, int64_t n,
                                                  const float *vbuf, int64_t head_v, float *const *acc_out) {
        constexpr int vectors = 4;
        int64_t d0 = 0;
        for (; d0 + vectors * w <= head_v; d0 += vectors * w) {
            typename V::type acc[NH][vectors];
            for (int h = 0; h < NH; ++h)
                for (int c = 0; c < vectors; ++c) acc[h][c] = V::zero();
            for (int64_t i = 0; i < n; ++i) {
                const float *v = vbuf + int64_t(visible[i]) * head_v + d0;
                typename V::type vv[vectors];
                for (int c = 0; c < vectors; ++c) vv[c] = V::load(v + w * c);
                for (int h = 0; h < NH; ++h) {
                    const auto pi = V::set1(p[h][i]);
                    for (int c = 0; c < vectors; ++c) acc[h][c] = V::fma(pi, vv[c], acc[h][c]);
                }
            }
            for (int h = 0; h < NH; ++h)
                for (int c = 0; c < vectors; ++c) V::store(acc_out[h] + d0 + w * c, acc[h][c]);
        }
        for (int h = 0; h < NH; ++h)
            for (int64_t d = d0; d < head_v; ++d) {
                float acc = 0.0f;
                for (int64_t i = 0; i < n; ++i)
                    acc = std::fma(p[h][i], vbuf[int64_t(visible[i]) * head_v + d], acc);
                acc_out[h][d] = acc;
            }
    }
    static void weighted_sum_heads(const float *const *p, int nh, const int32_t *visible, int64_t n,
                                   const float *vbuf, int64_t head_v, float *const *acc) {
        // AVX2 has 16 registers: two heads at a time there
        constexpr int most = w == 16 ? 4 : 2;
        for (int h = 0; h < nh; h += most) {
            const int k = std::min(most, nh - h);
            if (k >= 4)
                weighted_sum_nh<4>(p + h, visible, n, vbuf, head_v, acc + h);
            else if (k == 3)
                weighted_sum_nh<3>(p + h, visible, n, vbuf, head_v, acc + h);
            else if (k == 2)
                weighted_sum_nh<2>(p + h, visible, n, vbuf, head_v, acc + h);
            else
                weighted_sum(p[h], visible, n, vbuf, head_v, acc[h]);
        }
    }

    // the accumulator of 64 values of the head stays in registers while the cells pass
    static void weighted_sum(const float *p, const int32_t *visible, int64_t n, const float *vbuf,
                             int64_t head_v, float *acc_out) {
        constexpr int vectors = 64 / w;
        int64_t d0 = 0;
        for (; d0 + 64 <= head_v; d0 += 64) {
            typename V::type acc[vectors];
            for (int c = 0; c < vectors; ++c) acc[c] = V::zero();
            for (int64_t i = 0; i < n; ++i) {
                const float *v = vbuf + int64_t(visible[i]) * head_v + d0;
                const auto pi = V::set1(p[i]);
                for (int c = 0; c < vectors; ++c) acc[c] = V::fma(pi, V::load(v + w * c), acc[c]);
            }
            for (int c = 0; c < vectors; ++c) V::store(acc_out + d0 + w * c, acc[c]);
        }
        for (int64_t d = d0; d < head_v; ++d) {
            float acc = 0.0f;
            for (int64_t i = 0; i < n; ++i) acc = std::fma(p[i], vbuf[int64_t(visible[i]) * head_v + d], acc);
            acc_out[d] = acc;
        }
    }
};

}  // namespace
}  // namespace weft::cpu
