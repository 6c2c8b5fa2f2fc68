// src/backends/cpu/attention_simd.h — the loops of attention_impl.h with vectors, written once over
// a vector type V (the ISA files give V: width, load, store, fma, mul, set1, zero, conversions to
// and from fp16, and where the ISA has 16 lanes, reduce16, transpose16 and the widening of int8 and
// nibbles). The results equal the plain loops' bit for bit: the same fma per lane, the same lane
// tree, and K and V values widened to the floats their type's to_float gives.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/attention_impl.h"
#include "backends/cpu/prefetch.h"
#include "weft/quant/blocks.h"

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

    // The cache rows are read one after another, a few hundred bytes from each, and the hardware
    // prefetcher does not run ahead of that (decode at 8k cells waited on memory at ~12 GB/s):
    // the rows of the cells `ahead` slots on are asked for while the current ones are computed.
    static constexpr int64_t rows_ahead = 32;
    // prefetches the first `bytes` of the rows of cells[0, n) (empty slots skipped) into L2
    static void prefetch_rows(const char *rows, int64_t row_bytes, const int32_t *cells, int64_t n,
                              int64_t bytes) {
        for (int64_t i = 0; i < n; ++i) {
            if (cells[i] < 0) continue;
            const char *row = rows + cells[i] * row_bytes;
            for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(row + b, _MM_HINT_T1);
            _mm_prefetch(row + bytes - 1, _MM_HINT_T1);
        }
    }

    // Whether the vector loops widen a row of n values of type t 16 at a time in registers: f16, and
    // q8_0 and q4_0 (whole blocks), to the values of their to_float (float(q) * d, one rounding).
    static constexpr bool widens(dtype t, int64_t n) {
        if constexpr (w != attention_lanes) return false;
        if (t == dtype::f16) return n % attention_lanes == 0;
        if (t == dtype::q8_0) return n % qk8_0 == 0;
        if (t == dtype::q4_0) return n % qk4_0 == 0;
        return false;
    }
    template <dtype T>
    using type_c = std::integral_constant<dtype, T>;
    // fn(type_c<t>) for a type that widens
    template <class Fn>
    static void with_type(dtype t, Fn fn) {
        if (t == dtype::f16)
            fn(type_c<dtype::f16>{});
        else if (t == dtype::q8_0)
            fn(type_c<dtype::q8_0>{});
        else
            fn(type_c<dtype::q4_0>{});
    }
    static float fp16_at(const char *p) {
        uint16_t h;
        std::memcpy(&h, p, sizeof h);
        return V::fp16_to_float(h);
    }
    // values [d0, d0 + 16) of a row of type T (d0 a multiple of 16)
    template <dtype T>
    static vec widen16(const char *row, int64_t d0) {
        if constexpr (T == dtype::f16) {
            return V::widen_fp16(row + 2 * d0);
        } else if constexpr (T == dtype::q8_0) {
            const char *b = row + d0 / qk8_0 * int64_t(sizeof(block_q8_0));
            return V::mul(V::widen_i8(b + offsetof(block_q8_0, qs) + d0 % qk8_0), V::set1(fp16_at(b)));
        } else {
            static_assert(T == dtype::q4_0);
            // values 0-15 of a block are the low nibbles of its 16 bytes, 16-31 the high ones
            const char *b = row + d0 / qk4_0 * int64_t(sizeof(block_q4_0));
            return V::mul(V::widen_nibbles(b + offsetof(block_q4_0, qs), d0 % qk4_0 != 0),
                          V::set1(fp16_at(b)));
        }
    }

    // The 16-value chunks a step of the row loops widens: one for f16, a whole block (two) for q8_0
    // and q4_0, its scale widened once.
    template <dtype T>
    static constexpr int step_chunks = T == dtype::f16 ? 1 : 2;
    // the step_chunks<T> chunks from value d0 of a row of type T (d0 a multiple of 16 * step_chunks<T>)
    template <dtype T>
    static void widen_step(const char *row, int64_t d0, vec *out) {
        if constexpr (T == dtype::f16) {
            out[0] = V::widen_fp16(row + 2 * d0);
        } else if constexpr (T == dtype::q8_0) {
            const char *b = row + d0 / qk8_0 * int64_t(sizeof(block_q8_0));
            const vec d = V::set1(fp16_at(b));
            out[0] = V::mul(V::widen_i8(b + offsetof(block_q8_0, qs)), d);
            out[1] = V::mul(V::widen_i8(b + offsetof(block_q8_0, qs) + attention_lanes), d);
        } else {
            static_assert(T == dtype::q4_0);
            const char *b = row + d0 / qk4_0 * int64_t(sizeof(block_q4_0));
            const vec d = V::set1(fp16_at(b));
            out[0] = V::mul(V::widen_nibbles(b + offsetof(block_q4_0, qs), false), d);
            out[1] = V::mul(V::widen_nibbles(b + offsetof(block_q4_0, qs), true), d);
        }
    }

    static void convert(const char *src, dtype t, int64_t n, float *out) {
        if constexpr (w == attention_lanes) {
            if (t != dtype::f16 && widens(t, n)) {
                with_type(t, [&](auto type) {
                    for (int64_t d0 = 0; d0 < n; d0 += attention_lanes)
                        V::store(out + d0, widen16<decltype(type)::value>(src, d0));
                });
                return;
            }
        }
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

    // x[s] = exp_reference(x[s] - max), 16 at a time where the ISA has the vector exp_reference
    static void exp_shifted(float *x, int64_t n, float max) {
        if constexpr (requires { V::has_exp; }) {
            const vec m = V::set1(max);
            int64_t s = 0;
            for (; s + w <= n; s += w) V::store(x + s, V::exp_reference(V::sub(V::load(x + s), m)));
            for (; s < n; ++s) x[s] = exp_reference(x[s] - max);
        } else {
            attention_loops_plain::exp_shifted(x, n, max);
        }
    }

    static void lane_max(const float *x, int64_t n, float *lanes) {
        if constexpr (w != attention_lanes) {
            return attention_loops_plain::lane_max(x, n, lanes);
        } else {
            vec m = V::load(lanes);
            for (int64_t s = 0; s < n; s += attention_lanes) m = V::max(V::load(x + s), m);
            V::store(lanes, m);
        }
    }

    static void round_f16(float *x, int64_t n) {
        int64_t i = 0;
        for (; i + w <= n; i += w) V::store(x + i, V::round_f16(V::load(x + i)));
        for (; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
    }

    // The softmax's passes over a row's scores, fused where a vector holds the 16 lanes: each pass
    // reads and writes the row once (the operations of the plain loops, element by element).
    static void scaled_lane_max(float *x, int64_t n, float scale, const float *shown, float *lanes) {
        if constexpr (w != attention_lanes) {
            attention_loops_plain::scaled_lane_max(x, n, scale, shown, lanes);
        } else {
            const vec k = V::set1(scale);
            vec m = V::load(lanes);
            for (int64_t s = 0; s < n; s += attention_lanes) {
                const vec v = V::add(V::mul(V::load(x + s), k), V::load(shown + s));
                V::store(x + s, v);
                m = V::max(v, m);
            }
            V::store(lanes, m);
        }
    }
    // 16 chunks at a time: their exp, stored, then their trees at once (reduce16; missing chunks zeros)
    static void exp_chunk_sums(float *x, int64_t n, float max, float *out) {
        if constexpr (w != attention_lanes || !requires { V::has_exp; }) {
            exp_shifted(x, n, max);
            chunk_sums(x, n, out);
        } else {
            const vec m = V::set1(max);
            const int64_t chunks = n / attention_lanes;
            for (int64_t c0 = 0; c0 < chunks; c0 += attention_lanes) {
                vec v[attention_lanes];
                for (int i = 0; i < attention_lanes; ++i) {
                    if (c0 + i < chunks) {
                        float *at = x + (c0 + i) * attention_lanes;
                        v[i] = V::exp_reference(V::sub(V::load(at), m));
                        V::store(at, v[i]);
                    } else {
                        v[i] = V::zero();
                    }
                }
                V::store(out + c0, V::reduce16(v));
            }
        }
    }
    static void times(float *x, int64_t n, float factor, bool to_f16) {
        const vec f = V::set1(factor);
        int64_t i = 0;
        if (to_f16) {
            for (; i + w <= n; i += w) V::store(x + i, V::round_f16(V::mul(V::load(x + i), f)));
            for (; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i] * factor));
        } else {
            for (; i + w <= n; i += w) V::store(x + i, V::mul(V::load(x + i), f));
            for (; i < n; ++i) x[i] *= factor;
        }
    }

    // NH heads, C chunks of 16 slots at a time from K transposed: lane l of the canonical order is a
    // vector over a chunk's 16 slots, and the lane tree adds whole vectors (no shuffles). The lanes
    // l and l + 8 of a pair run side by side (2 * NH * C chains of fma in flight), and each q value
    // broadcast serves the C chunks, each K row read the NH heads: with C = 2, 0.75 loads per fma
    // instead of 1.25 (the loads, not the fma, bound these loops). The tree is walked depth first, pair
    // by pair (bit-reversed: s8 of lanes 0, 4, 2, 6, 1, 5, 3, 7); its pending levels wait in L1
    // (`pending`), not in registers, which the accumulators fill.
    template <int NH, int C>
    static void dots_chunks(const float *const *q, const float *k, int64_t head_k, float *const *out) {
        const int64_t chunk = head_k * attention_lanes;  // K transposed chunk by chunk
        constexpr int n = NH * C;  // accumulators of a lane: (head h, chunk c) at h * C + c
        alignas(64) float pending[3][n][attention_lanes];  // a waiting s8, s4 and s2 node
        auto keep = [&](int level, const vec *x) {
            for (int i = 0; i < n; ++i) V::store(pending[level][i], x[i]);
        };
        auto add_kept = [&](int level, vec *x) {
            for (int i = 0; i < n; ++i) x[i] = V::add(V::load(pending[level][i]), x[i]);
        };
        for (int pair = 0; pair < 8; ++pair) {
            const int l = (pair & 1) << 2 | (pair & 2) | (pair & 4) >> 2;
            // s8[l] = a[l] + a[l + 8]
            vec a[n], b[n];
            for (int i = 0; i < n; ++i) a[i] = b[i] = V::zero();
            int64_t d = l;
            for (; d + 8 < head_k; d += attention_lanes) {
                vec ka[C], kb[C];
                for (int c = 0; c < C; ++c) {
                    ka[c] = V::load(k + c * chunk + d * attention_lanes);
                    kb[c] = V::load(k + c * chunk + (d + 8) * attention_lanes);
                }
                for (int h = 0; h < NH; ++h) {
                    const vec qa = V::set1(q[h][d]), qb = V::set1(q[h][d + 8]);
                    for (int c = 0; c < C; ++c) {
                        a[h * C + c] = V::fma(qa, ka[c], a[h * C + c]);
                        b[h * C + c] = V::fma(qb, kb[c], b[h * C + c]);
                    }
                }
            }
            if (d < head_k) {  // lane l's last value, where head_k is not a multiple of 16
                for (int c = 0; c < C; ++c) {
                    const vec ka = V::load(k + c * chunk + d * attention_lanes);
                    for (int h = 0; h < NH; ++h) a[h * C + c] = V::fma(V::set1(q[h][d]), ka, a[h * C + c]);
                }
            }
            for (int i = 0; i < n; ++i) a[i] = V::add(a[i], b[i]);
            // up the tree (x + y == y + x: the side a node waits on does not matter)
            if ((pair & 1) == 0) {
                keep(0, a);
                continue;
            }
            add_kept(0, a);  // s4
            if ((pair & 2) == 0) {
                keep(1, a);
                continue;
            }
            add_kept(1, a);  // s2
            if ((pair & 4) == 0) {
                keep(2, a);
                continue;
            }
            add_kept(2, a);  // the sum
            for (int h = 0; h < NH; ++h)
                for (int c = 0; c < C; ++c) V::store(out[h] + c * attention_lanes, a[h * C + c]);
        }
    }

    // NH heads over the slots: two chunks at a time, then the last one alone
    template <int NH>
    [[gnu::noinline]] static void dots_nh(const float *const *q, const float *kcols, int64_t head_k,
                                          int64_t slots, float *const *out) {
        constexpr int64_t two = 2 * attention_lanes;
        int64_t s0 = 0;
        auto outs_at = [&](int64_t s, float **o) {
            for (int h = 0; h < NH; ++h) o[h] = out[h] + s;
        };
        for (; s0 + two <= slots; s0 += two) {
            float *o[NH];
            outs_at(s0, o);
            dots_chunks<NH, 2>(q, kcols + s0 * head_k, head_k, o);
        }
        if (s0 < slots) {
            float *o[NH];
            outs_at(s0, o);
            dots_chunks<NH, 1>(q, kcols + s0 * head_k, head_k, o);
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

    static void dots(const float *const *q, int nh, const float *kcols, int64_t head_k, int64_t slots,
                     float *const *out) {
        by_head_groups_or_plain(
            nh, [&] { attention_loops_plain::dots(q, nh, kcols, head_k, slots, out); },
            [&](auto n, int h) { dots_nh<decltype(n)::value>(q + h, kcols, head_k, slots, out + h); });
    }

    // NH heads x ND values of the head at a time (ND = 16 / NH, then 1 for the rest): accumulator
    // (head h, value dd), its lanes the canonical lanes, over the chunks, from zero or from `lanes`,
    // then back to `lanes` or through one lane tree for all 16 (reduce16) to out: each V value read
    // serves NH heads, and the accumulators stay in registers.
    template <int NH, bool from_zero, bool to_out>
    [[gnu::noinline]] static void weighted_tile_nh(const float *const *p, const float *vcols, int64_t stride,
                                                   int64_t slots, int64_t head_v, float *lanes,
                                                   float *const *out) {
        constexpr int per = attention_lanes / NH;
        auto values = [&](int64_t d0, auto nd) {
            constexpr int ND = decltype(nd)::value;
            auto at = [&](int h, int dd) { return lanes + (h * head_v + d0 + dd) * attention_lanes; };
            const float *v = vcols + d0 * stride;
            // each accumulator's first fma from +0 (from_zero) or from `lanes`, in the loop's first
            // chunk: set apart, the 16 zeros became a 1 KB memset (rep stos) before every call
            auto chunk = [&](int64_t c, vec *acc, auto first) {
                vec pv[NH];
                for (int h = 0; h < NH; ++h) pv[h] = V::load(p[h] + c);
                for (int dd = 0; dd < ND; ++dd) {
                    const vec vv = V::load(v + dd * stride + c);
                    for (int h = 0; h < NH; ++h) {
                        const int i = h * ND + dd;
                        if constexpr (decltype(first)::value)
                            acc[i] = V::fma(pv[h], vv, from_zero ? V::zero() : V::load(at(h, dd)));
                        else
                            acc[i] = V::fma(pv[h], vv, acc[i]);
                    }
                }
            };
            vec acc[attention_lanes];
            if (slots > 0) {
                chunk(0, acc, std::true_type{});
            } else {
                for (int i = 0; i < NH * ND; ++i)
                    acc[i] = from_zero ? V::zero() : V::load(at(i / ND, i % ND));
            }
            for (int64_t c = attention_lanes; c < slots; c += attention_lanes)
                chunk(c, acc, std::false_type{});
            for (int i = NH * ND; i < attention_lanes; ++i) acc[i] = V::zero();
            if constexpr (to_out) {
                float sums[attention_lanes];
                V::store(sums, V::reduce16(acc));
                for (int h = 0; h < NH; ++h)
                    for (int dd = 0; dd < ND; ++dd) out[h][d0 + dd] = sums[h * ND + dd];
            } else {
                for (int i = 0; i < NH * ND; ++i) V::store(at(i / ND, i % ND), acc[i]);
            }
        };
        int64_t d0 = 0;
        for (; d0 + per <= head_v; d0 += per) values(d0, std::integral_constant<int, per>{});
        for (; d0 < head_v; ++d0) values(d0, std::integral_constant<int, 1>{});
    }

    static void weighted_tile(const float *const *p, int nh, const float *vcols, int64_t stride,
                              int64_t slots, int64_t head_v, float *lanes, bool from_zero,
                              float *const *out) {
        by_head_groups_or_plain(
            nh,
            [&] {
                attention_loops_plain::weighted_tile(p, nh, vcols, stride, slots, head_v, lanes, from_zero,
                                                     out);
            },
            [&](auto n, int h) {
                constexpr int NH = decltype(n)::value;
                float *own = lanes ? lanes + h * head_v * attention_lanes : nullptr;
                if (from_zero && out)
                    weighted_tile_nh<NH, true, true>(p + h, vcols, stride, slots, head_v, own, out + h);
                else if (from_zero)
                    weighted_tile_nh<NH, true, false>(p + h, vcols, stride, slots, head_v, own, nullptr);
                else if (out)
                    weighted_tile_nh<NH, false, true>(p + h, vcols, stride, slots, head_v, own, out + h);
                else
                    weighted_tile_nh<NH, false, false>(p + h, vcols, stride, slots, head_v, own, nullptr);
            });
    }

    static void weighted(const float *const *p, int nh, const float *vcols, int64_t stride, int64_t slots,
                         int64_t head_v, float *const *out) {
        weighted_tile(p, nh, vcols, stride, slots, head_v, nullptr, true, out);
    }

    // NH heads x 16 / NH slots at a time from the K rows (of type T, widened in registers):
    // accumulator i = (head i / per, slot i % per) over the head's 16-value chunks (its lanes the
    // canonical lanes), then one lane tree for all 16 (reduce16); each K row read serves NH heads.
    template <int NH, dtype T>
    [[gnu::noinline]] static void dots_rows_nh(const float *const *q, const char *k, int64_t row_bytes,
                                               const int32_t *cells, int64_t head_k, int64_t slots,
                                               float *const *out) {
        constexpr int per = attention_lanes / NH, m = step_chunks<T>;
        const int64_t bytes = int64_t(row_size(T, head_k));
        for (int64_t s0 = 0; s0 < slots; s0 += per) {
            if (s0 + rows_ahead < slots)
                prefetch_rows(k, row_bytes, cells + s0 + rows_ahead,
                              std::min<int64_t>(per, slots - s0 - rows_ahead), bytes);
            vec acc[attention_lanes];
            for (auto &x : acc) x = V::zero();
            for (int64_t d0 = 0; d0 < head_k; d0 += m * attention_lanes) {
                vec qv[m][NH];
                for (int i = 0; i < m; ++i)
                    for (int h = 0; h < NH; ++h) qv[i][h] = V::load(q[h] + d0 + i * attention_lanes);
                for (int j = 0; j < per; ++j) {
                    const int32_t cell = cells[s0 + j];
                    vec kv[m];
                    if (cell < 0)
                        for (auto &x : kv) x = V::zero();
                    else
                        widen_step<T>(k + cell * row_bytes, d0, kv);
                    for (int i = 0; i < m; ++i)  // chunk d0 before d0 + 16: the lane's order
                        for (int h = 0; h < NH; ++h)
                            acc[h * per + j] = V::fma(qv[i][h], kv[i], acc[h * per + j]);
                }
            }
            float sums[attention_lanes];
            V::store(sums, V::reduce16(acc));
            for (int h = 0; h < NH; ++h)
                std::memcpy(out[h] + s0, sums + h * per, size_t(per) * sizeof(float));
        }
    }

    static constexpr bool can_read_rows(dtype t, int64_t head_k) { return widens(t, head_k); }
    static void dots_rows(const float *const *q, int nh, const char *k, int64_t row_bytes, dtype t,
                          const int32_t *cells, int64_t head_k, int64_t slots, float *const *out) {
        if constexpr (w == attention_lanes)
            with_type(t, [&](auto type) {
                in_head_groups(nh, [&](auto n, int h) {
                    dots_rows_nh<decltype(n)::value, decltype(type)::value>(q + h, k, row_bytes, cells,
                                                                            head_k, slots, out + h);
                });
            });
    }

    // NH heads from the V rows (of type T, widened in registers): accumulator (head h, value chunk
    // dc, lane l), a vector over the chunk's 16 values, takes the fma of p[h][s] * row s for the
    // slots s = 16c + l, c in order (the canonical lanes, transposed); then the lane tree adds whole
    // vectors. The accumulators live in `acc` (NH * head_v * 16 floats); 16 of them in registers at
    // a time (per lanes of NH heads and the m chunks of a step) over a block of slots, whose rows stay
    // in the cache for all the value chunks. Each V value widened serves NH heads.
    // (Only the value chunks [dc0, dc1) of the output; the rows' prefetch covers the bytes they need.)
    template <int NH, dtype T>
    [[gnu::noinline]] static void weighted_rows_nh(const float *const *p, const char *v, int64_t row_bytes,
                                                   const int32_t *cells, int64_t slots, int64_t head_v,
                                                   int64_t dc0, int64_t dc1, float *acc, float *const *out) {
        constexpr int m = step_chunks<T>, per = attention_lanes / (NH * m);
        constexpr int64_t block = 128;  // slots
        const int64_t bytes = int64_t(row_size(T, head_v));
        auto at = [&](int64_t dc, int h, int l) { return acc + ((dc * NH + h) * attention_lanes + l) * w; };
        std::fill(at(dc0, 0, 0), at(dc1, 0, 0), 0.0f);
        for (int64_t b0 = 0; b0 < slots; b0 += block) {
            const int64_t b1 = std::min(slots, b0 + block);
            for (int64_t dc = dc0; dc < dc1; dc += m)
                for (int l0 = 0; l0 < attention_lanes; l0 += per) {
                    vec a[m][NH][per];
                    for (int i = 0; i < m; ++i)
                        for (int h = 0; h < NH; ++h)
                            for (int j = 0; j < per; ++j) a[i][h][j] = V::load(at(dc + i, h, l0 + j));
                    for (int64_t c = b0; c < b1; c += attention_lanes) {
                        // the first pass over a block's rows asks for the next block's
                        if (dc == dc0 && l0 == 0 && c + block < slots)
                            prefetch_rows(v, row_bytes, cells + c + block,
                                          std::min<int64_t>(attention_lanes, slots - c - block), bytes);
#pragma GCC unroll 16
                        for (int j = 0; j < per; ++j) {
                            const int64_t s = c + l0 + j;
                            const int32_t cell = cells[s];
                            vec vv[m];
                            if (cell < 0)
                                for (auto &x : vv) x = V::zero();
                            else
                                widen_step<T>(v + cell * row_bytes, dc * attention_lanes, vv);
                            for (int h = 0; h < NH; ++h) {
                                const vec ph = V::set1(p[h][s]);
                                for (int i = 0; i < m; ++i) a[i][h][j] = V::fma(ph, vv[i], a[i][h][j]);
                            }
                        }
                    }
                    for (int i = 0; i < m; ++i)
                        for (int h = 0; h < NH; ++h)
                            for (int j = 0; j < per; ++j) V::store(at(dc + i, h, l0 + j), a[i][h][j]);
                }
        }
        // the lane tree of sum_lanes_16, value by value
        for (int64_t dc = dc0; dc < dc1; ++dc)
            for (int h = 0; h < NH; ++h) {
                vec s8[8], s4[4];
                for (int l = 0; l < 8; ++l) s8[l] = V::add(V::load(at(dc, h, l)), V::load(at(dc, h, l + 8)));
                for (int l = 0; l < 4; ++l) s4[l] = V::add(s8[l], s8[l + 4]);
                V::store(out[h] + dc * w, V::add(V::add(s4[0], s4[2]), V::add(s4[1], s4[3])));
            }
    }

    static constexpr bool can_weight_rows(dtype t, int64_t head_v) {
        return widens(t, head_v);
    }
    static void weighted_rows(const float *const *p, int nh, const char *v, int64_t row_bytes, dtype t,
                              const int32_t *cells, int64_t slots, int64_t head_v, int64_t v0, int64_t v1,
                              float *acc, float *const *out) {
        if constexpr (w == attention_lanes)
            with_type(t, [&](auto type) {
                in_head_groups(nh, [&](auto n, int h) {
                    weighted_rows_nh<decltype(n)::value, decltype(type)::value>(
                        p + h, v, row_bytes, cells, slots, head_v, v0 / attention_lanes, v1 / attention_lanes,
                        acc, out + h);
                });
            });
    }

    // 16 slots at a time where the ISA has an integer dot (V::dots_int_16), else the plain loop. An
    // empty slot reads a zero row (scale 0, quants 0 (q8_0) or -8 (q4_0): a dot of 0 times 0).
    static void dots_int(const q8_query *q, int nh, const char *k, int64_t row_bytes, dtype t,
                         const int32_t *cells, int64_t head_k, int64_t slots, float *const *out) {
        const int64_t nb = head_k / qk8_0, bytes = nb * int64_t(type_traits(t).type_size);
        if constexpr (V::can_dot_int) {
            alignas(64) static constexpr char zero_row[64 * sizeof(block_q8_0)] = {};
            if (V::has_dot_int() && bytes <= int64_t(sizeof zero_row)) {
                auto run = [&](auto type) {
                    for (int64_t s0 = 0; s0 < slots; s0 += attention_lanes) {
                        if (s0 + rows_ahead < slots)
                            prefetch_rows(k, row_bytes, cells + s0 + rows_ahead,
                                          std::min<int64_t>(attention_lanes, slots - s0 - rows_ahead), bytes);
                        const char *rows[attention_lanes];
                        for (int i = 0; i < attention_lanes; ++i)
                            rows[i] = cells[s0 + i] < 0 ? zero_row : k + cells[s0 + i] * row_bytes;
                        float *outs[attention_heads_per_pass];
                        for (int h = 0; h < nh; ++h) outs[h] = out[h] + s0;
                        in_head_groups(nh, [&](auto n, int h) {
                            V::template dots_int_16<decltype(n)::value, decltype(type)::value>(q + h, rows,
                                                                                               nb, outs + h);
                        });
                    }
                };
                if (t == dtype::q8_0)
                    run(type_c<dtype::q8_0>{});
                else
                    run(type_c<dtype::q4_0>{});
                return;
            }
        }
        attention_loops_plain::dots_int(q, nh, k, row_bytes, t, cells, head_k, slots, out);
    }

    static constexpr bool can_transpose16(dtype t, int64_t n) {
        return V::can_transpose16 && widens(t, n);
    }
    static void transpose16(const char *rows, int64_t row_bytes, dtype t, int64_t d0, float *out,
                            int64_t stride) {
        if constexpr (V::can_transpose16)
            with_type(t, [&](auto type) {
                vec r[attention_lanes];
                for (int i = 0; i < attention_lanes; ++i)
                    r[i] = widen16<decltype(type)::value>(rows + i * row_bytes, d0);
                V::transpose16(r, out, stride);
            });
    }
};

}  // namespace
}  // namespace weft::cpu
