// src/backends/cpu/attention_simd.h — the loops of attention_impl.h with vectors, written once over
// a vector type V (the ISA files give V: width, load, store, fma, set1, zero, conversions to and
// from fp16, and where the ISA has 16 lanes, reduce16 and transpose16). The results equal the plain
// loops' bit for bit: the same fma per lane, the same lane tree.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/attention_impl.h"

namespace weft::cpu {
namespace {  // internal linkage: one copy per ISA build

template <class V>
struct simd_attention_loops {
    static constexpr int w = V::width;
    using vec = typename V::type;

    // fn(NH, first head) over the nh heads of a pass in groups of 4, 2 and 1 (NH an integral_constant)
    template <class Fn>
    static void in_head_groups(int nh, Fn fn) {
        int h = 0;
        for (; h + 4 <= nh; h += 4) fn(std::integral_constant<int, 4>{}, h);
        for (; h + 2 <= nh; h += 2) fn(std::integral_constant<int, 2>{}, h);
        for (; h < nh; ++h) fn(std::integral_constant<int, 1>{}, h);
    }

    static void convert(const char *src, dtype t, int64_t n, float *out) {
        if (t != dtype::f16) return attention_loops_plain::convert(src, t, n, out);
        int64_t i = 0;
        for (; i + w <= n; i += w) V::store(out + i, V::widen_fp16(src + 2 * i));
        for (; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, sizeof h);
            out[i] = V::fp16_to_float(h);
        }
    }

    // 16 chunks at a time: their trees at once (reduce16); missing chunks are zeros
    static void chunk_sums(const float *x, int64_t n, float *out) {
        if constexpr (w != attention_lanes) {
            return attention_loops_plain::chunk_sums(x, n, out);
        } else {
            const int64_t chunks = n / attention_lanes;
            for (int64_t c0 = 0; c0 < chunks; c0 += attention_lanes) {
                vec v[attention_lanes];
                for (int i = 0; i < attention_lanes; ++i)
                    v[i] = c0 + i < chunks ? V::load(x + (c0 + i) * attention_lanes) : V::zero();
                V::store(out + c0, V::reduce16(v));
            }
        }
    }

    static void round_f16(float *x, int64_t n) {
        int64_t i = 0;
        for (; i + w <= n; i += w) V::store(x + i, V::round_f16(V::load(x + i)));
        for (; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
    }

    // NH heads, 16 slots at a time from K transposed: lane l of the canonical order is a vector over
    // the 16 slots, and the lane tree adds whole vectors (no shuffles). The tree is walked depth
    // first, lane pair by lane pair, so few vectors are live and each K row read serves NH heads.
    template <int NH>
    [[gnu::noinline]] static void dots_nh(const float *const *q, const float *kcols, int64_t stride,
                                          int64_t head_k, int64_t slots, float *const *out) {
        for (int64_t s0 = 0; s0 < slots; s0 += attention_lanes) {
            const float *k = kcols + s0;
            auto lane = [&](int l, vec *acc) {
                for (int h = 0; h < NH; ++h) acc[h] = V::zero();
                for (int64_t d = l; d < head_k; d += attention_lanes) {
                    const vec kv = V::load(k + d * stride);
                    for (int h = 0; h < NH; ++h) acc[h] = V::fma(V::set1(q[h][d]), kv, acc[h]);
                }
            };
            // s8[l] = a[l] + a[l + 8], s4[l] = s8[l] + s8[l + 4], s2[l] = s4[l] + s4[l + 2]
            auto s8 = [&](int l, vec *r) {
                vec a[NH], b[NH];
                lane(l, a);
                lane(l + 8, b);
                for (int h = 0; h < NH; ++h) r[h] = V::add(a[h], b[h]);
            };
            auto s4 = [&](int l, vec *r) {
                vec a[NH], b[NH];
                s8(l, a);
                s8(l + 4, b);
                for (int h = 0; h < NH; ++h) r[h] = V::add(a[h], b[h]);
            };
            auto s2 = [&](int l, vec *r) {
                vec a[NH], b[NH];
                s4(l, a);
                s4(l + 2, b);
                for (int h = 0; h < NH; ++h) r[h] = V::add(a[h], b[h]);
            };
            vec a[NH], b[NH];
            s2(0, a);
            s2(1, b);
            for (int h = 0; h < NH; ++h) V::store(out[h] + s0, V::add(a[h], b[h]));
        }
    }

    // The vector loops over head groups where a vector holds the 16 lanes, else the plain loops.
    template <class Plain, class PerGroup>
    static void by_head_groups_or_plain(int nh, Plain plain, PerGroup per_group) {
        if constexpr (w != attention_lanes)
            plain();
        else
            in_head_groups(nh, per_group);
    }

    static void dots(const float *const *q, int nh, const float *kcols, int64_t stride, int64_t head_k,
                     int64_t slots, float *const *out) {
        by_head_groups_or_plain(
            nh, [&] { attention_loops_plain::dots(q, nh, kcols, stride, head_k, slots, out); },
            [&](auto n, int h) {
                dots_nh<decltype(n)::value>(q + h, kcols, stride, head_k, slots, out + h);
            });
    }

    // NH heads x 16 / NH values of the head at a time: accumulator i = (head i / per, value i % per)
    // over the chunks (its lanes the canonical lanes), then one lane tree for all 16 (reduce16):
    // each V value read serves NH heads.
    template <int NH>
    [[gnu::noinline]] static void weighted_nh(const float *const *p, const float *vcols, int64_t stride,
                                              int64_t slots, int64_t head_v, float *const *out) {
        constexpr int per = attention_lanes / NH;
        for (int64_t d0 = 0; d0 < head_v; d0 += per) {
            const int nd = int(std::min<int64_t>(per, head_v - d0));
            vec acc[attention_lanes];
            for (auto &x : acc) x = V::zero();
            const float *v = vcols + d0 * stride;
            for (int64_t c = 0; c < slots; c += attention_lanes) {
                vec pv[NH];
                for (int h = 0; h < NH; ++h) pv[h] = V::load(p[h] + c);
                for (int dd = 0; dd < per; ++dd) {
                    if (dd >= nd) break;
                    const vec vv = V::load(v + dd * stride + c);
                    for (int h = 0; h < NH; ++h) acc[h * per + dd] = V::fma(pv[h], vv, acc[h * per + dd]);
                }
            }
            float sums[attention_lanes];
            V::store(sums, V::reduce16(acc));
            for (int h = 0; h < NH; ++h) std::memcpy(out[h] + d0, sums + h * per, size_t(nd) * sizeof(float));
        }
    }

    static void weighted(const float *const *p, int nh, const float *vcols, int64_t stride, int64_t slots,
                         int64_t head_v, float *const *out) {
        by_head_groups_or_plain(
            nh, [&] { attention_loops_plain::weighted(p, nh, vcols, stride, slots, head_v, out); },
            [&](auto n, int h) {
                weighted_nh<decltype(n)::value>(p + h, vcols, stride, slots, head_v, out + h);
            });
    }

    // NH heads x 16 / NH slots at a time from the f16 K rows: accumulator i = (head i / per, slot
    // i % per) over the head's 16-value chunks (its lanes the canonical lanes), then one lane tree
    // for all 16 (reduce16); each K row read serves NH heads.
    template <int NH>
    [[gnu::noinline]] static void dots_f16_rows_nh(const float *const *q, const char *k, int64_t row_bytes,
                                                   const int32_t *cells, int64_t head_k, int64_t slots,
                                                   float *const *out) {
        constexpr int per = attention_lanes / NH;
        for (int64_t s0 = 0; s0 < slots; s0 += per) {
            vec acc[attention_lanes];
            for (auto &x : acc) x = V::zero();
            for (int64_t d0 = 0; d0 < head_k; d0 += attention_lanes) {
                vec qv[NH];
                for (int h = 0; h < NH; ++h) qv[h] = V::load(q[h] + d0);
                for (int j = 0; j < per; ++j) {
                    const int32_t cell = cells[s0 + j];
                    const vec kv = cell < 0 ? V::zero() : V::widen_fp16(k + cell * row_bytes + d0 * 2);
                    for (int h = 0; h < NH; ++h) acc[h * per + j] = V::fma(qv[h], kv, acc[h * per + j]);
                }
            }
            float sums[attention_lanes];
            V::store(sums, V::reduce16(acc));
            for (int h = 0; h < NH; ++h)
                std::memcpy(out[h] + s0, sums + h * per, size_t(per) * sizeof(float));
        }
    }

    static constexpr bool can_read_f16_rows = w == attention_lanes;
    static void dots_f16_rows(const float *const *q, int nh, const char *k, int64_t row_bytes,
                              const int32_t *cells, int64_t head_k, int64_t slots, float *const *out) {
        if constexpr (w == attention_lanes)
            in_head_groups(nh, [&](auto n, int h) {
                dots_f16_rows_nh<decltype(n)::value>(q + h, k, row_bytes, cells, head_k, slots, out + h);
            });
    }

    static constexpr bool can_transpose16 = V::can_transpose16;
    static void transpose16(const char *rows, int64_t row_bytes, dtype, float *out, int64_t stride) {
        V::transpose16(rows, row_bytes, out, stride);
    }
};

}  // namespace
}  // namespace weft::cpu
