// src/backends/cpu/attention_impl.h — the fused attention of a block of tokens against one KV head,
// written once in plain C++ and compiled per ISA (ops_attention*.cpp): every build performs the same
// float operations in the same order, so the results are the same bits on every CPU.
//
// For a token t and query head h, over the cells j that its mask row shows (value != -INF), in cell
// order (hidden cells are skipped, so the cache size and the batch around the token do not matter):
//   s_j = (fma over d = 0, 1, ... of q_d * k_jd, from 0) * scale + mask_j;  M = max s_j;
//   e_j = exp_canonical(s_j - M);  l = sum_canonical(e over the visible cells, in order);
//   p_j = e_j * (1 / l);  out = fma(p_j, v_j, acc) over the visible cells in order, from 0
// As in the reference engine's products with an f16 cache, q is rounded to f16 when K is f16 and
// p_j when V is f16 (its matrix products convert the f32 operand to the f16 one's type). A bf16 or
// block-quantized (q8_0, q4_0 ...) cache is widened to floats by its type's own to_float and q and
// p_j stay f32: the same values in every ISA build, as one shared function widens them.
// The scores are computed 16 cells at a time from K transposed (no horizontal sums); each is its
// own serial chain, so which cells share a vector does not matter.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/cpu/canonical_math.h"
#include "weft/core/fp16.h"
#include "weft/core/tensor.h"
#include "weft/quant/quant.h"

namespace weft::cpu {

// Query heads of one KV head computed together, so each K and V row read serves all of them.
constexpr int attention_heads_per_pass = 4;

struct attention_task {
    const tensor *q, *k, *v, *mask;
    tensor *dst;
    float scale;
    float softcap;   // 0: none; else s = softcap * tanh(dot * scale)
    int64_t t0, t1;  // tokens [t0, t1)
    int64_t g;       // the KV head
    // scratch: K of the head transposed as floats (head_k x n_kv rounded up to 16), V rows as floats
    // (n_kv x head_v), scores of every cell and of the visible ones, visible cells (n_kv each)
    float *kbuf, *vbuf, *scores, *visible_scores;
    int32_t *visible;
    float *acc;     // head_v floats per head of a batch (attention_heads_per_pass)
    float *qround;  // head_k floats per head of a batch: q rounded to f16
    // gathering one token's cells: their K rows side by side (n_kv rows), and 0, 1, 2 ... (n_kv)
    char *kgather;
    int32_t *identity;
    int64_t scores_stride = 0, acc_stride = 0;  // floats between the heads' scores / accumulators
};

// Internal linkage: every ISA build gets its own copy (see canonical_math.h).
namespace {

// The loops the ISA builds write with intrinsics (the same operations, element by element):
//   convert(src, type, n, out)       widens a K or V row to floats
//   scores(q, kt, stride, n, cells, out)
//                                    out[j] = serial fma over d < n of q[d] * kt[d * stride + j], j < cells
//                                    (cells a multiple of 16)
//   transpose_k(k, row_bytes, type, head_k, cells, kt, stride, scratch)
//                                    kt[d * stride + j] = K row j (at k + j * row_bytes) value d, as
//                                    floats (pure data movement; scratch: head_k floats)
//   weighted_sum(p, visible, n, vbuf, head_v, acc)
//                                    acc[d] = serial fma over i < n of p[i] * vbuf[visible[i] * head_v + d]
// A K or V row of a type other than f32 and f16 (bf16, the block types) as floats: the quant
// layer's reference widening, one function for every ISA build.
inline void widen_row(const char *src, dtype t, int64_t n, float *out) {
    quant_traits_of(t).to_float(src, out, n);
}

template <class Convert>
void transpose_k_rows(Convert convert, const char *k, int64_t row_bytes, dtype type, int64_t head_k,
                      int64_t j0, int64_t cells, float *kt, int64_t stride, float *row) {
    for (int64_t j = j0; j < cells; ++j) {
        convert(k + j * row_bytes, type, head_k, row);
        for (int64_t d = 0; d < head_k; ++d) kt[d * stride + j] = row[d];
    }
}

// The multi-head forms run the single-head loops head by head (same operations per element).
template <class Loops>
struct attention_heads {
    static void scores(const float *const *q, int nh, const float *kt, int64_t stride, int64_t n,
                       int64_t cells, float *const *out) {
        for (int h = 0; h < nh; ++h) Loops::scores(q[h], kt, stride, n, cells, out[h]);
    }
    static void weighted_sum(const float *const *p, int nh, const int32_t *visible, int64_t n,
                             const float *vbuf, int64_t head_v, float *const *acc) {
        for (int h = 0; h < nh; ++h) Loops::weighted_sum(p[h], visible, n, vbuf, head_v, acc[h]);
    }
};

struct attention_loops_plain {
    static void scores(const float *q, const float *kt, int64_t stride, int64_t n, int64_t cells,
                       float *out) {
        for (int64_t j = 0; j < cells; ++j) {
            float acc = 0.0f;
            for (int64_t d = 0; d < n; ++d) acc = std::fma(q[d], kt[d * stride + j], acc);
            out[j] = acc;
        }
    }
    static void weighted_sum(const float *p, const int32_t *visible, int64_t n, const float *vbuf,
                             int64_t head_v, float *acc) {
        for (int64_t d = 0; d < head_v; ++d) acc[d] = 0.0f;
        for (int64_t i = 0; i < n; ++i) {
            const float *v = vbuf + int64_t(visible[i]) * head_v;
            for (int64_t d = 0; d < head_v; ++d) acc[d] = std::fma(p[i], v[d], acc[d]);
        }
    }
};

// The cells of a mask row that are not hidden (-INF), in order, written to `out`; returns how
// many. Whole 16-cell runs of hidden cells (other sequences' cells, which a token beside many
// sequences mostly sees) are skipped with one vectorizable test each.
inline int64_t visible_cells(const float *m, int64_t n, int32_t *out) {
    constexpr uint32_t hidden_bits = 0xFF800000u;  // -INF
    int64_t count = 0, j = 0;
    for (; j + 16 <= n; j += 16) {
        int visible = 0;
        for (int i = 0; i < 16; ++i) {
            uint32_t bits;
            std::memcpy(&bits, m + j + i, sizeof bits);
            visible += bits != hidden_bits;
        }
        if (visible == 0) continue;
        if (visible == 16) {  // a run of visible cells (the causal part of a prompt)
            for (int i = 0; i < 16; ++i) out[count + i] = int32_t(j + i);
            count += 16;
            continue;
        }
        for (int64_t i = j; i < j + 16; ++i)
            if (m[i] != -std::numeric_limits<float>::infinity()) out[count++] = int32_t(i);
    }
    for (; j < n; ++j)
        if (m[j] != -std::numeric_limits<float>::infinity()) out[count++] = int32_t(j);
    return count;
}

// How many cells of a mask row are not hidden, without listing them (vectorizable).
inline int64_t count_visible(const float *m, int64_t n) {
    int64_t count = 0;
    for (int64_t j = 0; j < n; ++j) {
        uint32_t bits;
        std::memcpy(&bits, m + j, sizeof bits);
        count += bits != 0xFF800000u;
    }
    return count;
}

// One past the last cell of a mask row before `n` that is not hidden, at least `floor` (cells
// below it are not looked at); 16-cell runs of hidden cells skipped as in visible_cells.
inline int64_t visible_end(const float *m, int64_t n, int64_t floor) {
    constexpr uint32_t hidden_bits = 0xFF800000u;
    int64_t j = n;
    for (; j - 16 >= floor; j -= 16) {
        uint32_t any = 0;
        for (int i = 0; i < 16; ++i) {
            uint32_t bits;
            std::memcpy(&bits, m + j - 16 + i, sizeof bits);
            any |= bits ^ hidden_bits;
        }
        if (any != 0) break;
    }
    for (; j > floor; --j)
        if (m[j - 1] != -std::numeric_limits<float>::infinity()) return j;
    return floor;
}

template <class Loops>
void run_attention_task(const attention_task &a) {
    const tensor &q = *a.q, &k = *a.k, &v = *a.v, &mask = *a.mask;
    const int64_t head_k = k.ne[0], head_v = v.ne[0], n_kv = k.ne[1];
    const int64_t n_head = q.ne[2], group = n_head / k.ne[2];
    constexpr float hidden = -std::numeric_limits<float>::infinity();
    const char *k_head = static_cast<const char *>(k.data) + a.g * int64_t(k.nb[2]);
    const char *v_head = static_cast<const char *>(v.data) + a.g * int64_t(v.nb[2]);
    auto mask_row = [&](int64_t t) { return static_cast<const float *>(mask.data) + t * mask.ne[0]; };

    // the cells any token of the block sees
    int64_t needed = 0;
    for (int64_t t = a.t0; t < a.t1; ++t) needed = visible_end(mask_row(t), n_kv, needed);
    // Two ways, the same operations per cell: convert every cell up to `needed` once for the block
    // (tokens of one sequence, which see mostly the same cells), or gather each token's visible
    // cells for it alone (tokens of different sequences beside each other, each seeing a small
    // part of the cells): gathering when it converts and scores less than half as many values.
    int64_t shared_cost = needed * (head_k + head_v), gather_cost = 0;
    for (int64_t t = a.t0; t < a.t1; ++t) {
        const float *m = mask_row(t);
        const int64_t n_visible = count_visible(m, needed);
        if (n_visible == 0) continue;
        int64_t first = 0;
        while (m[first] == hidden) ++first;
        const int64_t last = visible_end(m, needed, first);
        shared_cost += ((last + 15) / 16 * 16 - first / 16 * 16) * head_k;
        gather_cost += n_visible * (2 * head_k + head_v);
    }
    const bool gather = 2 * gather_cost < shared_cost;

    int64_t kt_stride = (needed + 15) / 16 * 16;
    if (!gather) {
        Loops::transpose_k(k_head, int64_t(k.nb[1]), k.type, head_k, needed, a.kbuf, kt_stride, a.scores);
        for (int64_t j = 0; j < needed; ++j)
            Loops::convert(v_head + j * int64_t(v.nb[1]), v.type, head_v, a.vbuf + j * head_v);
        for (int64_t d = 0; d < head_k; ++d)
            for (int64_t j = needed; j < kt_stride; ++j) a.kbuf[d * kt_stride + j] = 0.0f;
    }
    const size_t k_row_size = row_size(k.type, head_k);

    for (int64_t t = a.t0; t < a.t1; ++t) {
        const float *m = mask_row(t);
        const int64_t n_visible = visible_cells(m, needed, a.visible);
        const int64_t last = n_visible > 0 ? a.visible[n_visible - 1] + 1 : 0;
        // the columns of kbuf and rows of vbuf holding this token's visible cells, and the index of
        // visible cell i among them
        int64_t first = 0, columns = 0;
        const int32_t *rows = a.visible;
        if (n_visible > 0 && gather) {
            for (int64_t i = 0; i < n_visible; ++i) {
                std::memcpy(a.kgather + size_t(i) * k_row_size, k_head + a.visible[i] * int64_t(k.nb[1]),
                            k_row_size);
                Loops::convert(v_head + a.visible[i] * int64_t(v.nb[1]), v.type, head_v, a.vbuf + i * head_v);
                a.identity[i] = int32_t(i);
            }
            kt_stride = (n_visible + 15) / 16 * 16;
            Loops::transpose_k(reinterpret_cast<const char *>(a.kgather), int64_t(k_row_size), k.type, head_k,
                               n_visible, a.kbuf, kt_stride, a.scores);
            for (int64_t d = 0; d < head_k; ++d)
                for (int64_t j = n_visible; j < kt_stride; ++j) a.kbuf[d * kt_stride + j] = 0.0f;
            columns = kt_stride;
            rows = a.identity;
        } else if (n_visible > 0) {
            // the 16-cell columns from the first visible cell to the last only
            first = a.visible[0] / 16 * 16;
            columns = (last + 15) / 16 * 16 - first;
        }
        for (int64_t h0 = a.g * group; h0 < (a.g + 1) * group; h0 += attention_heads_per_pass) {
            const int nh = int(std::min<int64_t>(attention_heads_per_pass, (a.g + 1) * group - h0));
            if (n_visible == 0) {
                for (int i = 0; i < nh; ++i) {
                    float *out = static_cast<float *>(a.dst->data) + (t * n_head + h0 + i) * head_v;
                    for (int64_t d = 0; d < head_v; ++d) out[d] = 0.0f;
                }
                continue;
            }
            const float *qs[attention_heads_per_pass];
            float *scores[attention_heads_per_pass], *probs[attention_heads_per_pass],
                *accs[attention_heads_per_pass];
            float inv_l[attention_heads_per_pass];
            for (int i = 0; i < nh; ++i) {
                qs[i] = reinterpret_cast<const float *>(static_cast<const char *>(q.data) +
                                                        t * int64_t(q.nb[1]) + (h0 + i) * int64_t(q.nb[2]));
                if (k.type == dtype::f16) {
                    float *rounded = a.qround + i * head_k;
                    for (int64_t d = 0; d < head_k; ++d) rounded[d] = fp16_to_fp32(fp32_to_fp16(qs[i][d]));
                    qs[i] = rounded;
                }
                scores[i] = a.scores + i * a.scores_stride;
                probs[i] = a.visible_scores + i * a.scores_stride;
                accs[i] = a.acc + i * a.acc_stride;
            }
            Loops::scores_heads(qs, nh, a.kbuf + first, kt_stride, head_k, columns, scores);
            for (int h = 0; h < nh; ++h) {
                float max = hidden;
                for (int64_t i = 0; i < n_visible; ++i) {
                    const int64_t j = a.visible[i];
                    const float dot = scores[h][gather ? i : j - first];
                    const float s =
                        (a.softcap > 0.0f ? a.softcap * std::tanh(dot * a.scale) : dot * a.scale) + m[j];
                    probs[h][i] = s;
                    max = std::max(max, s);
                }
                for (int64_t i = 0; i < n_visible; ++i) probs[h][i] = exp_canonical(probs[h][i] - max);
                inv_l[h] = 1.0f / sum_canonical(probs[h], n_visible);
                for (int64_t i = 0; i < n_visible; ++i) probs[h][i] *= inv_l[h];
                if (v.type == dtype::f16)
                    for (int64_t i = 0; i < n_visible; ++i)
                        probs[h][i] = fp16_to_fp32(fp32_to_fp16(probs[h][i]));
            }
            Loops::weighted_sum_heads(probs, nh, rows, n_visible, a.vbuf, head_v, accs);
            for (int h = 0; h < nh; ++h) {
                float *out = static_cast<float *>(a.dst->data) + (t * n_head + h0 + h) * head_v;
                for (int64_t d = 0; d < head_v; ++d) out[d] = accs[h][d];
            }
        }
    }
}

}  // namespace

// The per-ISA entry points (ops_attention*.cpp).
void attention_task_scalar(const attention_task &a);
void attention_task_avx2(const attention_task &a);
void attention_task_avx512(const attention_task &a);

}  // namespace weft::cpu
