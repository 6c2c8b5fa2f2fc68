// src/backends/cpu/attention_impl.h — the fused attention of a block of tokens against one KV head,
// written once in plain C++ and compiled per ISA (ops_attention*.cpp): every build performs the same
// float operations in the same order, so the results are the same bits on every CPU.
//
// The order is the reference engine's (its matrix products and softmax over an f16 cache), so a
// model matches it bit for bit; it is fixed by the positions of the cells a token sees, never by
// where they lie in the cache, so a token's result does not depend on the batch around it.
//
// Slots: the cells a token sees (mask value != -INF), in order of position, go to slots by position:
// chunk c = floor(pos / 16) and lane pos mod 16, the chunks that hold none of them left out (slot =
// 16 * rank of the chunk + lane). When that leaves more than 64 empty slots (cells far apart) or two
// cells share a position, a cell's slot is its rank in that order instead. Empty slots hold zeros.
// For a token t and query head h, with tree16(a) = the lane tree of canonical_math.h:
//   q' = q, rounded to f16 when K is f16 (the reference converts the f32 operand to the f16 one's type)
//   dot_s = tree16(lane l: fma over d = l, l + 16, ... of q'_d * k_sd, from 0)   (head_k padded to 16)
//   x_s = (softcap > 0 ? softcap * tanh(dot_s * scale) : dot_s * scale) + mask_s;  M = max x_s
//   e_s = exp_reference(x_s - M), 0 in empty slots;  S = sum over chunks, in order, in double, of
//   tree16(the chunk's 16 e);  p_s = e_s * float(1 / S), rounded to f16 when V is f16
// With a sink logit z_h (gpt-oss): M = max(z_h, max x_s) and S gains double(e^(z_h - M)) last (the
// library's expf, as the reference engine's softmax adds its sink).
//   out_d = tree16(lane l: fma over the chunks, in order, of p_s * v_sd for the slot s of lane l)
// A q8_0 or q4_0 K (head_k a multiple of 32) is dotted in integers, as the reference engine's products do:
// q is quantized to q8_0 as a product's activations are (row_traits_of(q8_0).from_float: d = amax /
// 127, the values times 127 / amax to nearest, ties to even; q8_query), and for each 32-value block b
//   dot_s = fma(float(sum_i qk_i * qq_i), dk_b * dq_b, dot_s)   (blocks in order, from 0)
// with the block's integer sum exact (qk a q4_0 nibble less 8), dk_b and dq_b the scales widened from f16.
// Otherwise a bf16 or block-quantized (q8_0, q4_0 ...) K or V is widened to floats by its type's own
// to_float and q and p stay f32: the same values in every ISA build, as one shared function widens them.
//
// How it runs (never what it computes): a task is a block of tokens of one KV head. The cells its
// tokens see are slotted once for all of them where they can be (their union), K and V widened and
// transposed once into kcols / vcols. A prompt after a filled cache (more than
// attention_untiled_slots slots) then goes through them flash-attention style but in the order above:
// the query rows of up to attention_tile_rows (tokens x the KV head's query heads, 8 tokens of 8 heads
// for a 1.1B) take their scores a tile of attention_tile_slots slots at a time, every row over a tile
// while its 16 KB of K sit in L1, scaled and masked there (their maxima carried per row); each row's exp
// and sum over its whole scores (the max first, as the order wants: no online rescaling); then the
// weighted sums tile by tile, each tile's weights scaled by 1 / sum just before (wider tiles,
// attention_weight_tile_slots), each (row, value)'s 16 lanes carried from one tile to the next in memory
// (a.lanes) and put through the lane tree after the row's last tile. The fma are those of one pass over all
// the slots, chunk after chunk, so the bits do not depend on the tiles, the rows that share them, the block
// or the thread count. Shorter prompts (and at depth 0) go token by token, the scores of a pass of 4 query
// heads in L1; one token reads K and V from the cache rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/cpu/canonical_math.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/row_kernels.h"
#include "weft/core/fp16.h"
#include "weft/core/tensor.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

namespace weft::cpu {

constexpr int64_t attention_lanes = 16;
// Tokens per task: a block shares the conversion of its KV head's rows.
constexpr int64_t attention_block_tokens = 64;
// Over a deep cache (attention_deep_slots and more) blocks grow to this many tokens where the threads
// keep enough tasks: the widening of K and V into kcols / vcols, a sixth of the op at depth 16384 with
// blocks of 64, then serves more tokens.
constexpr int64_t attention_max_block_tokens = 256;
constexpr int64_t attention_deep_slots = 4096;
// Empty slots a token's cells may leave before their slots become their ranks (see above).
constexpr int64_t attention_slack = 64;
// A block's tokens that see the same slots go through them together, this many query rows (tokens x
// the query heads of the KV head) at a time, and the slots in tiles of attention_tile_slots: each K
// and V tile, converted once per block, serves every row while it sits in L1/L2 (see
// run_attention_task).
constexpr int64_t attention_tile_rows = 64;
// (a K tile of 64 slots, 16 KB at head 64, sits in L1 beside the rows' scores: the op at depth 4096 ran
// ~1.1x faster than with tiles of 256 read from L2)
constexpr int64_t attention_tile_slots = 64;
// The weighted sums' tiles are wider: their lanes go to memory and back once per tile and row, and a
// V tile of 1024 slots (256 KB at head 64) still sits in L2 for all the rows.
constexpr int64_t attention_weight_tile_slots = 1024;
// Slots up to which a block's tokens go through them one by one, each token's scores in L1 (at these
// lengths K and V stay in L2 anyway).
constexpr int64_t attention_untiled_slots = 1024;

// The tokens of a block that go through the slots together (group: query heads per KV head).
inline int64_t attention_tile_tokens(int64_t group) {
    return std::max<int64_t>(1, attention_tile_rows / group);
}

inline int64_t round_up_16(int64_t n) {
    return (n + attention_lanes - 1) / attention_lanes * attention_lanes;
}

// The most slots of a task: every cell by rank, or the cells by position with the slack.
inline int64_t attention_max_slots(int64_t n_kv) {
    return round_up_16(n_kv + attention_slack) + attention_lanes;
}

struct attention_task {
    const tensor *q, *k, *v, *mask;
    const tensor *positions;  // i32 [n_kv]: each cell's position; null: the cell index
    const float *sinks;       // [n_head]: each query head's sink logit; null: none
    tensor *dst;
    float scale;
    float softcap;   // 0: none; else s = softcap * tanh(dot * scale)
    int64_t t0, t1;  // tokens [t0, t1)
    int64_t g;       // the KV head
    // scratch (max_slots = attention_max_slots(n_kv)):
    float *kcols;        // K transposed chunk by chunk: value d of slot s at kcols[(s / 16) * head_k * 16 +
                         // d * 16 + s % 16] (a chunk's 16 slots x head_k values in one piece)
    float *vcols;        // V transposed, the same way (head_v rows)
    float *dots;         // max_slots per query row (attention_scratch_rows): its scores, then its weights
    float *lanes;        // head_v * 16 per query row: the weighted sums' lanes, carried across tiles
    float *row_max;      // 16 per query row: its scores' maxima lane by lane, carried across tiles
    float *row_factor;   // 1 per query row: 1 / the sum of its exp
    float *shown;        // max_slots: the token's mask value of each slot (-INF: hidden or empty)
    float *chunk_sum;    // max_slots / 16 + 16: the lane tree of each chunk of 16 weights
    float *qround;       // head_k per query row: q, rounded to f16 for an f16 K, or its q8_query
                         // (q8_query_bytes(head_k) <= 4 * head_k bytes) for a K in integers
    float *row;          // head_k + head_v floats: one widened row
    int32_t *order;      // n_kv: cells in slot order
    int64_t *cell_pos;   // n_kv: their positions
    int32_t *slot_cell;  // max_slots: the cell of each slot, -1 when empty
    int64_t max_slots = 0;
};

// One token's attention shared by all the threads of the node (run_attention_token_split).
struct attention_split {
    int ith = 0, nth = 1;
    float *scores = nullptr;  // n_head * max_slots floats shared by the threads: scores, then weights
    const compute_params *p = nullptr;  // for its barriers
};

// A query head quantized to q8_0 as a q8_0 product's activations are: its blocks, and per block b
// the scale widened (d[b]) and the sum of its quants (sum[b]: kernels that take K's quants as
// unsigned bytes qk + offset start their sums at -offset * sum[b], so that they end at qk's).
struct q8_query {
    const block_q8_0 *blocks;
    const float *d;
    const int32_t *sum;
};

// Whether K is dotted in integers against a q8_0 query (see the top of the file).
inline bool k_in_integers(const tensor &k) {
    return (k.type == dtype::q8_0 || k.type == dtype::q4_0) && k.ne[0] % qk8_0 == 0;
}

// Quant i (0..31) of a K block of type t (q8_0, or q4_0: the nibble less 8).
inline int32_t k_quant(const char *block, dtype t, int i) {
    if (t == dtype::q8_0) return reinterpret_cast<const block_q8_0 *>(block)->qs[i];
    const uint8_t byte = reinterpret_cast<const block_q4_0 *>(block)->qs[i % 16];
    return int32_t(i < 16 ? byte & 0x0F : byte >> 4) - 8;
}

// The bytes of a block of a K in integers, and what its kernels add to a quant to take it unsigned
// (q8_0: q + 128, q4_0: the nibble, q + 8).
template <dtype T>
constexpr int64_t int_k_block_bytes = T == dtype::q8_0 ? int64_t(sizeof(block_q8_0))
                                                       : int64_t(sizeof(block_q4_0));
template <dtype T>
constexpr int32_t int_k_offset = T == dtype::q8_0 ? 128 : 8;

// The fp16 scales of the blocks at byte `at` of n rows (both block types start with theirs).
inline void gather_scales(const char *const *rows, int64_t at, int n, uint16_t *out) {
    for (int i = 0; i < n; ++i) std::memcpy(&out[i], rows[i] + at, sizeof(uint16_t));
}

// Bytes of scratch a query head's q8_query takes (its blocks, then d and sum).
inline size_t q8_query_bytes(int64_t head_k) {
    const size_t nb = size_t(head_k / qk8_0);
    return (nb * sizeof(block_q8_0) + 3) / 4 * 4 + nb * (sizeof(float) + sizeof(int32_t));
}

// The q8_query laid out in `memory` (q8_query_bytes(head_k) bytes, 4-aligned).
inline q8_query q8_query_at(void *memory, int64_t head_k) {
    const int64_t nb = head_k / qk8_0;
    auto *d = reinterpret_cast<float *>(static_cast<char *>(memory) +
                                        (size_t(nb) * sizeof(block_q8_0) + 3) / 4 * 4);
    return {static_cast<const block_q8_0 *>(memory), d, reinterpret_cast<const int32_t *>(d + nb)};
}

// Quantizes q (head_k floats) into `memory` (q8_query_bytes(head_k) bytes, 4-aligned).
inline q8_query quantize_query(const float *q, int64_t head_k, void *memory) {
    const int64_t nb = head_k / qk8_0;
    auto *blocks = static_cast<block_q8_0 *>(memory);
    row_traits_of(dtype::q8_0).from_float(q, blocks, head_k);
    auto *d = reinterpret_cast<float *>(static_cast<char *>(memory) +
                                        (size_t(nb) * sizeof(block_q8_0) + 3) / 4 * 4);
    auto *sum = reinterpret_cast<int32_t *>(d + nb);
    for (int64_t b = 0; b < nb; ++b) {
        d[b] = fp16_to_fp32(blocks[b].d);
        sum[b] = 0;
        for (int i = 0; i < qk8_0; ++i) sum[b] += blocks[b].qs[i];
    }
    return {blocks, d, sum};
}

// Internal linkage: every ISA build gets its own copy (see canonical_math.h).
namespace {

// Query heads computed together, so each K and V value read serves all of them.
constexpr int attention_heads_per_pass = 4;

// The query rows a task's scratch holds (scores, queries, the weighted sums' accumulators): those of
// the tokens that go through the slots together, and at least a pass's.
inline int64_t attention_scratch_rows(int64_t n_tokens, int64_t group) {
    return std::max<int64_t>(attention_heads_per_pass,
                             std::min(n_tokens, attention_tile_tokens(group)) * group);
}

// The loops the ISA builds write with intrinsics (the same operations, element by element), for
// nh <= attention_heads_per_pass heads:
//   convert(src, type, n, out)       widens a K or V row to floats
//   dots(q, nh, kcols, head_k, slots, out)
//                                    out[h][s] = tree16 over lanes l of the serial fma over d = l,
//                                    l + 16, ... < head_k of q[h][d] * kcols[(s / 16) * head_k * 16 +
//                                    d * 16 + s % 16] (K transposed chunk by chunk, as attention_task's)
//   weighted(p, nh, vcols, stride, slots, head_v, out)
//                                    out[h][d] = tree16 over lanes l of the serial fma over the
//                                    chunks c of p[h][16c + l] * vcols[d * stride + 16c + l]
//   weighted_tile(p, nh, vcols, stride, slots, head_v, lanes, from_zero, out)
//                                    weighted over a tile of the slots, its lanes carried from tile
//                                    to tile: lane l of (h, d), at lanes[(h * head_v + d) * 16 + l],
//                                    starts from zero (from_zero) or from there, takes the fma of the
//                                    tile's chunks, then goes back there or, where out is given (the
//                                    last tile), through the tree to out[h][d]
//   chunk_sums(x, n, out)            out[c] = tree16(x[16c .. 16c + 15])
//   lane_max(x, n, lanes)            lanes[l] = the std::max of lanes[l] (carried in: -INF at the start of
//                                    a row) and x[16c + l], over the chunks in order
//   exp_shifted(x, n, max)           x[s] = exp_reference(x[s] - max)
//   round_f16(x, n)                  x[i] = x[i] rounded to f16 (round to nearest even)
//   scaled_lane_max(x, n, scale, shown, lanes)
//                                    x[s] = x[s] * scale + shown[s] (two roundings), then lane_max
//   exp_chunk_sums(x, n, max, out)   exp_shifted, then chunk_sums (one pass where the ISA can)
//   times(x, n, factor, to_f16)      x[s] *= factor, then rounded to f16 where to_f16
//   dots_rows(q, nh, k, row_bytes, type, cells, head_k, slots, out)
//                                    dots from the K rows themselves (cell c's at k + c * row_bytes;
//                                    cells[s] < 0: an empty slot, any value), where can_read_rows
//   weighted_rows(p, nh, v, row_bytes, type, cells, slots, head_v, v0, v1, acc, out)
//                                    weighted from the V rows themselves (as dots_rows; acc: scratch of
//                                    attention_heads_per_pass * head_v * 16 floats), the values
//                                    [v0, v1) of out only (multiples of 32, or 0 and head_v), where
//                                    can_weight_rows
//   dots_int(q, nh, k, row_bytes, type, cells, head_k, slots, out)
//                                    out[h][s] = the integer dot of the q8_0 / q4_0 K row of cell cells[s]
//                                    (at k + cell * row_bytes; < 0: empty, any value) with q[h]
//   transpose16(rows, row_bytes, type, d0, out, stride)
//                                    values [d0, d0 + 16) of 16 K or V rows (row i at rows + i *
//                                    row_bytes), widened, transposed: value d0 + d of row i to
//                                    out[d * stride + i], where can_transpose16
// (slots a multiple of 16). Skipping the fma of a zero-padded lane would leave a lane as it is: a
// lane never holds -0 (it starts at +0, and +0 + -0 = +0), so the padding changes nothing.
inline void widen_row(const char *src, dtype t, int64_t n, float *out) {
    quant_traits_of(t).to_float(src, out, n);
}

struct attention_loops_plain {
    static void convert(const char *src, dtype t, int64_t n, float *out) {
        if (t == dtype::f32) {
            std::memcpy(out, src, size_t(n) * sizeof(float));
        } else if (t == dtype::f16) {
            const auto *h = reinterpret_cast<const fp16_t *>(src);
            for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(h[i]);
        } else {
            widen_row(src, t, n, out);
        }
    }
    static void dots(const float *const *q, int nh, const float *kcols, int64_t head_k, int64_t slots,
                     float *const *out) {
        for (int h = 0; h < nh; ++h)
            for (int64_t s0 = 0; s0 < slots; s0 += attention_lanes) {
                const float *chunk = kcols + s0 * head_k;
                float acc[attention_lanes][attention_lanes] = {};  // [lane][slot]
                for (int64_t d = 0; d < head_k; ++d)
                    for (int j = 0; j < attention_lanes; ++j)
                        acc[d % attention_lanes][j] =
                            std::fma(q[h][d], chunk[d * attention_lanes + j], acc[d % attention_lanes][j]);
                for (int j = 0; j < attention_lanes; ++j) {
                    float lanes[attention_lanes];
                    for (int l = 0; l < attention_lanes; ++l) lanes[l] = acc[l][j];
                    out[h][s0 + j] = sum_lanes_16(lanes);
                }
            }
    }
    static void weighted_tile(const float *const *p, int nh, const float *vcols, int64_t stride,
                              int64_t slots, int64_t head_v, float *lanes, bool from_zero,
                              float *const *out) {
        for (int h = 0; h < nh; ++h)
            for (int64_t d = 0; d < head_v; ++d) {
                float own[attention_lanes] = {};
                float *acc = out ? own : lanes + (h * head_v + d) * attention_lanes;
                if (out && !from_zero)
                    std::memcpy(own, lanes + (h * head_v + d) * attention_lanes, sizeof own);
                if (!out && from_zero) std::fill(acc, acc + attention_lanes, 0.0f);
                const float *v = vcols + d * stride;
                for (int64_t c = 0; c < slots; c += attention_lanes)
                    for (int l = 0; l < attention_lanes; ++l)
                        acc[l] = std::fma(p[h][c + l], v[c + l], acc[l]);
                if (out) out[h][d] = sum_lanes_16(acc);
            }
    }
    static void weighted(const float *const *p, int nh, const float *vcols, int64_t stride, int64_t slots,
                         int64_t head_v, float *const *out) {
        weighted_tile(p, nh, vcols, stride, slots, head_v, nullptr, true, out);
    }
    static void chunk_sums(const float *x, int64_t n, float *out) {
        for (int64_t c = 0; c < n / attention_lanes; ++c) out[c] = sum_lanes_16(x + c * attention_lanes);
    }
    static void exp_shifted(float *x, int64_t n, float max) {
        for (int64_t s = 0; s < n; ++s) x[s] = exp_reference(x[s] - max);
    }
    static void lane_max(const float *x, int64_t n, float *lanes) {
        for (int64_t s = 0; s < n; s += attention_lanes)
            for (int l = 0; l < attention_lanes; ++l) lanes[l] = std::max(lanes[l], x[s + l]);
    }
    static void round_f16(float *x, int64_t n) {
        for (int64_t i = 0; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
    }
    static void scaled_lane_max(float *x, int64_t n, float scale, const float *shown, float *lanes) {
        for (int64_t s = 0; s < n; ++s) x[s] = x[s] * scale + shown[s];
        lane_max(x, n, lanes);
    }
    static void exp_chunk_sums(float *x, int64_t n, float max, float *out) {
        exp_shifted(x, n, max);
        chunk_sums(x, n, out);
    }
    static void times(float *x, int64_t n, float factor, bool to_f16) {
        for (int64_t s = 0; s < n; ++s) x[s] *= factor;
        if (to_f16) round_f16(x, n);
    }
    static void dots_int(const q8_query *q, int nh, const char *k, int64_t row_bytes, dtype t,
                         const int32_t *cells, int64_t head_k, int64_t slots, float *const *out) {
        const int64_t nb = head_k / qk8_0, block_bytes = int64_t(type_traits(t).type_size);
        for (int h = 0; h < nh; ++h)
            for (int64_t s = 0; s < slots; ++s) {
                float acc = 0.0f;
                if (cells[s] >= 0) {
                    for (int64_t b = 0; b < nb; ++b) {
                        const char *block = k + cells[s] * row_bytes + b * block_bytes;
                        int32_t sum = 0;
                        for (int i = 0; i < qk8_0; ++i) sum += k_quant(block, t, i) * q[h].blocks[b].qs[i];
                        fp16_t dk;
                        std::memcpy(&dk, block, sizeof dk);  // both blocks start with their scale
                        acc = std::fma(float(sum), fp16_to_fp32(dk) * q[h].d[b], acc);
                    }
                }
                out[h][s] = acc;
            }
    }
    static constexpr bool can_transpose16(dtype, int64_t) { return false; }
    static void transpose16(const char *, int64_t, dtype, int64_t, float *, int64_t) {}
    static constexpr bool can_read_rows(dtype, int64_t) { return false; }
    static constexpr bool can_weight_rows(dtype, int64_t) { return false; }
    static void weighted_rows(const float *const *, int, const char *, int64_t, dtype, const int32_t *,
                              int64_t, int64_t, int64_t, int64_t, float *, float *const *) {}
    static void dots_rows(const float *const *, int, const char *, int64_t, dtype, const int32_t *, int64_t,
                          int64_t, float *const *) {}
};

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
// below it are not looked at); 16-cell runs of hidden cells skipped with one test each.
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

inline int64_t floor_div_16(int64_t p) {
    return p >= 0 ? p / attention_lanes : -((-p + attention_lanes - 1) / attention_lanes);
}

// Sorts the n cells of `order` (positions in `pos`, the same order) by (position, cell), unless they
// already are; returns whether two share a position.
inline bool sort_by_position(int32_t *order, int64_t *pos, int64_t n) {
    bool sorted = true, shared = false;
    for (int64_t i = 1; i < n; ++i) {
        sorted = sorted && (pos[i - 1] < pos[i] || (pos[i - 1] == pos[i] && order[i - 1] < order[i]));
        shared = shared || pos[i - 1] == pos[i];
    }
    if (!sorted) {
        // insertion sort of (pos, cell) pairs: the cells a token sees are in order almost always
        for (int64_t i = 1; i < n; ++i) {
            const int64_t p = pos[i];
            const int32_t c = order[i];
            int64_t j = i;
            for (; j > 0 && (pos[j - 1] > p || (pos[j - 1] == p && order[j - 1] > c)); --j) {
                pos[j] = pos[j - 1];
                order[j] = order[j - 1];
            }
            pos[j] = p;
            order[j] = c;
        }
        shared = false;
        for (int64_t i = 1; i < n; ++i) shared = shared || pos[i - 1] == pos[i];
    }
    return shared;
}

// Whether n cells (positions in order) take their slots by position: their chunks leave at most
// attention_slack slots empty.
inline bool slots_by_position(const int64_t *pos, int64_t n) {
    int64_t chunks = 0, last = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t c = floor_div_16(pos[i]);
        chunks += i == 0 || c != last;
        last = c;
    }
    return chunks * attention_lanes <= n + attention_slack;
}

// Slots of n cells in position order (see the top of the file), by position or by rank: writes
// slot_cell (-1 where empty) and returns the number of slots, a multiple of 16.
inline int64_t assign_slots(const int32_t *order, const int64_t *pos, int64_t n, bool by_position,
                            int32_t *slot_cell) {
    if (!by_position) {
        const int64_t slots = round_up_16(n);
        for (int64_t s = 0; s < slots; ++s) slot_cell[s] = s < n ? order[s] : -1;
        return slots;
    }
    int64_t slots = 0, last = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t c = floor_div_16(pos[i]);
        if (i == 0 || c != last) {
            for (int l = 0; l < attention_lanes; ++l) slot_cell[slots + l] = -1;
            slots += attention_lanes;
        }
        last = c;
        slot_cell[slots - attention_lanes + (pos[i] - c * attention_lanes)] = order[i];
    }
    return slots;
}

// Query heads [h0, h0 + nh) of token t as the scores take them (into a.qround): rounded to f16 for an
// f16 K (qs), or quantized to q8_0 for a K in integers (q8s).
// (`into`: where, head_k floats a head; a.qround unless given)
template <class Loops>
void prepare_queries(const attention_task &a, int64_t t, int64_t h0, int nh, const float **qs, q8_query *q8s,
                     float *into = nullptr) {
    const tensor &q = *a.q, &k = *a.k;
    const int64_t head_k = k.ne[0];
    for (int i = 0; i < nh; ++i) {
        const auto *qh = reinterpret_cast<const float *>(static_cast<const char *>(q.data) +
                                                         t * int64_t(q.nb[1]) + (h0 + i) * int64_t(q.nb[2]));
        float *rounded = (into ? into : a.qround) + i * head_k;
        if (k_in_integers(k)) {
            q8s[i] = quantize_query(qh, head_k, rounded);
            continue;
        }
        std::memcpy(rounded, qh, size_t(head_k) * sizeof(float));
        if (k.type == dtype::f16) Loops::round_f16(rounded, head_k);
        qs[i] = rounded;
    }
}

// Whether the 16 slots of a chunk hold 16 consecutive cells (then their rows, or mask values, are one
// run to copy or transpose whole).
inline bool consecutive_cells(const int32_t *cells) {
    bool run = cells[0] >= 0;
    for (int l = 1; l < attention_lanes && run; ++l) run = cells[l] == cells[0] + l;
    return run;
}

// The mask values of a token (mask row m) at the slots [lo, hi) (multiples of 16) into shown (-INF:
// an empty slot); a chunk of 16 consecutive cells is copied whole. Whether any of them is visible.
inline bool show_slots(const attention_task &a, const float *m, int64_t lo, int64_t hi, float *shown) {
    constexpr float hidden = -std::numeric_limits<float>::infinity();
    bool any = false;
    for (int64_t s0 = lo; s0 < hi; s0 += attention_lanes) {
        const int32_t *cells = a.slot_cell + s0;
        float *out = shown + (s0 - lo);
        if (consecutive_cells(cells))
            std::memcpy(out, m + cells[0], attention_lanes * sizeof(float));
        else
            for (int l = 0; l < attention_lanes; ++l) out[l] = cells[l] >= 0 ? m[cells[l]] : hidden;
        for (int l = 0; l < attention_lanes; ++l) any = any || out[l] != hidden;
    }
    return any;
}

// A query head's n scores x (its dots, in place, a row or a tile of it) scaled (or soft-capped) and
// the mask values `shown` added; lanes: their maxima lane by lane, carried from tile to tile (max is
// exact in any order, so 16 lanes, vectorized; -INF at the start of a row).
template <class Loops>
void mask_scores(const attention_task &a, float *x, int64_t n, const float *shown, float *lanes) {
    if (a.softcap > 0.0f) {
        for (int64_t s = 0; s < n; ++s) x[s] = a.softcap * std::tanh(x[s] * a.scale) + shown[s];
        Loops::lane_max(x, n, lanes);
    } else {
        Loops::scaled_lane_max(x, n, a.scale, shown, lanes);
    }
}

// Query head h's n masked scores x (their lane maxima `lanes`) to exp_reference against the max (the
// sink's too), in place; returns the factor of the weights: float(1 / the double sum of the chunks'
// lane trees, the sink's term last).
template <class Loops>
float exp_of_scores(const attention_task &a, int64_t h, float *x, int64_t n, const float *lanes) {
    float max = -std::numeric_limits<float>::infinity();
    for (int l = 0; l < attention_lanes; ++l) max = std::max(max, lanes[l]);
    if (a.sinks) max = std::max(max, a.sinks[h]);
    Loops::exp_chunk_sums(x, n, max, a.chunk_sum);
    double sum = 0.0;
    for (int64_t c = 0; c < n / attention_lanes; ++c) sum += double(a.chunk_sum[c]);
    if (a.sinks) sum += double(std::exp(a.sinks[h] - max));
    return float(1.0 / sum);
}

// Whether the weights are rounded to f16 (for an f16 V, as the top of the file says).
inline bool weights_to_f16(const attention_task &a) {
    return a.v->type == dtype::f16;
}

// Query head h's n scores x (its dots, in place) to its weights, as the top of the file says (the mask
// values in a.shown): mask_scores, exp_of_scores, times the factor (rounded to f16 for an f16 V).
template <class Loops>
void softmax_of_scores(const attention_task &a, int64_t h, float *x, int64_t n) {
    float lanes[attention_lanes];
    std::fill(lanes, lanes + attention_lanes, -std::numeric_limits<float>::infinity());
    mask_scores<Loops>(a, x, n, a.shown, lanes);
    Loops::times(x, n, exp_of_scores<Loops>(a, h, x, n, lanes), weights_to_f16(a));
}

// Whether the ISA build reads K and V from the cache rows themselves for one token (no transposed
// copies): what run_attention_token_split needs.
template <class Loops>
bool reads_rows(const tensor &k, const tensor &v, int64_t max_slots) {
    const int64_t head_k = k.ne[0], head_v = v.ne[0];
    return (k_in_integers(k) || (Loops::can_read_rows(k.type, head_k) && head_k % attention_lanes == 0)) &&
           Loops::can_weight_rows(v.type, head_v) && head_v % attention_lanes == 0 &&
           max_slots >= attention_heads_per_pass * attention_lanes;
}

// The token's slots (see the top of the file) in a.order, a.cell_pos, a.slot_cell: its own cells,
// sorted and slotted for it alone; returns the number of slots.
inline int64_t slot_token(const attention_task &a, const float *m, int64_t needed) {
    const auto *cell_positions = a.positions ? static_cast<const int32_t *>(a.positions->data) : nullptr;
    int64_t n = 0;
    for (int64_t j = 0; j < needed; ++j)
        if (m[j] != -std::numeric_limits<float>::infinity()) {
            a.order[n] = int32_t(j);
            a.cell_pos[n++] = cell_positions ? int64_t(cell_positions[j]) : j;
        }
    const bool shared_positions = sort_by_position(a.order, a.cell_pos, n);
    const bool by_position = !shared_positions && slots_by_position(a.cell_pos, n);
    return assign_slots(a.order, a.cell_pos, n, by_position, a.slot_cell);
}

template <class Loops>
void run_attention_task(const attention_task &a) {
    const tensor &q = *a.q, &k = *a.k, &v = *a.v, &mask = *a.mask;
    const int64_t head_k = k.ne[0], head_v = v.ne[0], n_kv = k.ne[1];
    const int64_t n_head = q.ne[2], group = n_head / k.ne[2];
    constexpr float hidden = -std::numeric_limits<float>::infinity();
    const char *k_head = static_cast<const char *>(k.data) + a.g * int64_t(k.nb[2]);
    const char *v_head = static_cast<const char *>(v.data) + a.g * int64_t(v.nb[2]);
    const auto *cell_positions = a.positions ? static_cast<const int32_t *>(a.positions->data) : nullptr;
    auto position = [&](int64_t cell) { return cell_positions ? int64_t(cell_positions[cell]) : cell; };
    auto mask_row = [&](int64_t t) { return static_cast<const float *>(mask.data) + t * mask.ne[0]; };

    // One token's scores read K from the cache rows themselves (direct_k) where the ISA build can
    // (f16, q8_0, q4_0 widened in registers): no transposed copy to make for a single use; the same
    // operations, so the same bits.
    const bool k_ints = k_in_integers(k);
    const bool can_direct_k =
        k_ints || (Loops::can_read_rows(k.type, head_k) && head_k % attention_lanes == 0);
    // and its weighted sum reads V from the rows (direct_v) the same way; the accumulators of
    // weighted_rows go where the transposed V would be
    const bool can_direct_v = Loops::can_weight_rows(v.type, head_v) && head_v % attention_lanes == 0 &&
                              a.max_slots >= attention_heads_per_pass * attention_lanes;
    // the n values of K or V (rows at `rows`) of the slots [s0, s0 + 16), transposed into cols: value d
    // of lane l at cols[d * d_stride + l] (empty slots: zeros)
    auto fill_chunk = [&](const tensor &t, const char *rows, int64_t n, int64_t s0, float *cols,
                          int64_t d_stride) {
        const int32_t *cells = a.slot_cell + s0;
        if (consecutive_cells(cells) && Loops::can_transpose16(t.type, n) && n % attention_lanes == 0) {
            for (int64_t d0 = 0; d0 < n; d0 += attention_lanes)
                Loops::transpose16(rows + cells[0] * int64_t(t.nb[1]), int64_t(t.nb[1]), t.type, d0,
                                   cols + d0 * d_stride, d_stride);
            return;
        }
        for (int l = 0; l < attention_lanes; ++l) {
            if (cells[l] < 0) {
                for (int64_t d = 0; d < n; ++d) cols[d * d_stride + l] = 0.0f;
                continue;
            }
            Loops::convert(rows + cells[l] * int64_t(t.nb[1]), t.type, n, a.row);
            for (int64_t d = 0; d < n; ++d) cols[d * d_stride + l] = a.row[d];
        }
    };
    auto fill_slots = [&](int64_t slots, bool direct_k, bool direct_v) {
        for (int64_t s0 = 0; s0 < slots; s0 += attention_lanes) {
            if (!direct_k) fill_chunk(k, k_head, head_k, s0, a.kcols + s0 * head_k, attention_lanes);
            if (!direct_v) fill_chunk(v, v_head, head_v, s0, a.vcols + s0, a.max_slots);
        }
    };

    // the query heads of token t over the slots [lo, hi) of the filled ones
    auto attend = [&](int64_t t, int64_t lo, int64_t hi, bool direct_k, bool direct_v) {
        const int64_t n = hi - lo;
        const bool any = show_slots(a, mask_row(t), lo, hi, a.shown);
        for (int64_t h0 = a.g * group; h0 < (a.g + 1) * group; h0 += attention_heads_per_pass) {
            const int nh = int(std::min<int64_t>(attention_heads_per_pass, (a.g + 1) * group - h0));
            const float *qs[attention_heads_per_pass];
            q8_query q8s[attention_heads_per_pass];
            float *xs[attention_heads_per_pass], *outs[attention_heads_per_pass];
            for (int i = 0; i < nh; ++i) {
                outs[i] = static_cast<float *>(a.dst->data) + (t * n_head + h0 + i) * head_v;
                xs[i] = a.dots + i * a.max_slots;
            }
            if (!any) {  // nothing visible
                for (int i = 0; i < nh; ++i) std::fill(outs[i], outs[i] + head_v, 0.0f);
                continue;
            }
            prepare_queries<Loops>(a, t, h0, nh, qs, q8s);
            if (k_ints)
                Loops::dots_int(q8s, nh, k_head, int64_t(k.nb[1]), k.type, a.slot_cell + lo, head_k, n, xs);
            else if (direct_k)
                Loops::dots_rows(qs, nh, k_head, int64_t(k.nb[1]), k.type, a.slot_cell + lo, head_k, n, xs);
            else
                Loops::dots(qs, nh, a.kcols + lo * head_k, head_k, n, xs);
            for (int i = 0; i < nh; ++i) softmax_of_scores<Loops>(a, h0 + i, xs[i], n);
            if (direct_v)
                Loops::weighted_rows(xs, nh, v_head, int64_t(v.nb[1]), v.type, a.slot_cell + lo, n, head_v, 0,
                                     head_v, a.vcols, outs);
            else
                Loops::weighted(xs, nh, a.vcols + lo, a.max_slots, n, head_v, outs);
        }
    };

    // Tokens toks[0, nt) (of the block: lo_of, hi_of by t - a.t0) over the union's filled slots,
    // together: their query rows (row i * group + j: token i, query head j of the KV head) go through
    // the slots a tile at a time: the scores of every row, masked while the tile's sit in L1 (their
    // maxima carried in a.row_max); then each row's exp and sum; then the weighted sums of every row
    // tile by tile, each tile's weights scaled just before (a.row_factor), the sums' lanes carried
    // across the tiles in a.lanes. The same operations in the same order as attend's, so the same
    // bits; each K and V tile is read from the cache for all the rows while it sits there, instead of
    // once per token and pass, and a row's scores go through memory twice, not four times.
    auto attend_tiled = [&](const int64_t *toks, int64_t nt, const int64_t *lo_of, const int64_t *hi_of) {
        const int64_t lanes_per_row = head_v * attention_lanes;
        // over the passes of token i's heads: fn(first row, heads)
        auto passes = [&](int64_t i, auto fn) {
            for (int64_t j = 0; j < group; j += attention_heads_per_pass)
                fn(i * group + j, int(std::min<int64_t>(attention_heads_per_pass, group - j)));
        };
        int64_t end = 0;
        for (int64_t i = 0; i < nt; ++i) end = std::max(end, hi_of[toks[i] - a.t0]);
        // over the tiles of `width` slots and the tokens that see slots in them: fn(i, r0, r1, lo, hi)
        auto by_tiles = [&](int64_t width, auto fn) {
            for (int64_t s_a = 0; s_a < end; s_a += width)
                for (int64_t i = 0; i < nt; ++i) {
                    const int64_t lo = lo_of[toks[i] - a.t0], hi = hi_of[toks[i] - a.t0];
                    const int64_t r0 = std::max(lo, s_a), r1 = std::min(hi, s_a + width);
                    if (r0 < r1) fn(i, r0, r1, lo, hi);
                }
        };
        for (int64_t i = 0; i < nt; ++i) {
            const int64_t t = toks[i];
            float *out = static_cast<float *>(a.dst->data) + (t * n_head + a.g * group) * head_v;
            if (hi_of[t - a.t0] <= lo_of[t - a.t0]) {  // nothing visible
                std::fill(out, out + group * head_v, 0.0f);
                continue;
            }
            passes(i, [&](int64_t r, int nh) {
                const float *qs[attention_heads_per_pass];
                q8_query q8s[attention_heads_per_pass];
                prepare_queries<Loops>(a, t, a.g * group + r - i * group, nh, qs, q8s, a.qround + r * head_k);
            });
            std::fill(a.row_max + i * group * attention_lanes, a.row_max + (i + 1) * group * attention_lanes,
                      -std::numeric_limits<float>::infinity());
        }
        // 1. the scores, masked
        by_tiles(attention_tile_slots, [&](int64_t i, int64_t r0, int64_t r1, int64_t lo, int64_t) {
            passes(i, [&](int64_t r, int nh) {
                const float *qs[attention_heads_per_pass];
                q8_query q8s[attention_heads_per_pass];
                float *xs[attention_heads_per_pass];
                for (int j = 0; j < nh; ++j) {
                    xs[j] = a.dots + (r + j) * a.max_slots + (r0 - lo);
                    qs[j] = a.qround + (r + j) * head_k;
                    if (k_ints) q8s[j] = q8_query_at(a.qround + (r + j) * head_k, head_k);
                }
                if (k_ints)
                    Loops::dots_int(q8s, nh, k_head, int64_t(k.nb[1]), k.type, a.slot_cell + r0, head_k,
                                    r1 - r0, xs);
                else
                    Loops::dots(qs, nh, a.kcols + r0 * head_k, head_k, r1 - r0, xs);
            });
            show_slots(a, mask_row(toks[i]), r0, r1, a.shown);
            for (int64_t r = i * group; r < (i + 1) * group; ++r)
                mask_scores<Loops>(a, a.dots + r * a.max_slots + (r0 - lo), r1 - r0, a.shown,
                                   a.row_max + r * attention_lanes);
        });
        // 2. each row's exp and sum
        for (int64_t i = 0; i < nt; ++i) {
            const int64_t lo = lo_of[toks[i] - a.t0], hi = hi_of[toks[i] - a.t0];
            for (int64_t j = 0, r = i * group; j < group && lo < hi; ++j, ++r)
                a.row_factor[r] = exp_of_scores<Loops>(a, a.g * group + j, a.dots + r * a.max_slots, hi - lo,
                                                       a.row_max + r * attention_lanes);
        }
        // 3. the weighted sums: the lanes from zero in a token's first tile, through the tree in its last
        by_tiles(attention_weight_tile_slots, [&](int64_t i, int64_t r0, int64_t r1, int64_t lo, int64_t hi) {
            passes(i, [&](int64_t r, int nh) {
                const float *ps[attention_heads_per_pass];
                float *outs[attention_heads_per_pass];
                for (int j = 0; j < nh; ++j) {
                    float *x = a.dots + (r + j) * a.max_slots + (r0 - lo);
                    Loops::times(x, r1 - r0, a.row_factor[r + j], weights_to_f16(a));
                    ps[j] = x;
                    outs[j] = static_cast<float *>(a.dst->data) +
                              (toks[i] * n_head + a.g * group + r - i * group + j) * head_v;
                }
                Loops::weighted_tile(ps, nh, a.vcols + r0, a.max_slots, r1 - r0, head_v,
                                     a.lanes + r * lanes_per_row, r0 == lo, r1 == hi ? outs : nullptr);
            });
        });
    };

    // a token's own cells (the cells it sees, sorted and slotted for it alone)
    auto attend_alone = [&](int64_t t, int64_t needed) {
        const int64_t slots = slot_token(a, mask_row(t), needed);
        fill_slots(slots, can_direct_k, can_direct_v);
        attend(t, 0, slots, can_direct_k, can_direct_v);
    };

    // the cells any token of the block sees
    int64_t needed = 0;
    for (int64_t t = a.t0; t < a.t1; ++t) needed = visible_end(mask_row(t), n_kv, needed);
    // Tokens of which two see neither's last cell belong to different sequences (a decode batch of
    // several slots): each is slotted alone, without building their union first (alone is each
    // token's own order, so this choice never changes a value).
    if (a.t1 - a.t0 > 1) {
        const int64_t first_last = visible_end(mask_row(a.t0), needed, 0) - 1;
        bool disjoint = false;
        for (int64_t t = a.t0 + 1; t < a.t1 && !disjoint && first_last >= 0; ++t) {
            const int64_t last = visible_end(mask_row(t), needed, 0) - 1;
            disjoint = last >= 0 && mask_row(t)[first_last] == hidden && mask_row(a.t0)[last] == hidden;
        }
        if (disjoint) {
            for (int64_t t = a.t0; t < a.t1; ++t) attend_alone(t, needed);
            return;
        }
    }
    // Tokens of one sequence (the usual block) see mostly the same cells: their union is slotted and
    // converted once for all of them, as long as every token's own slots are the union's with whole
    // empty chunks between (then the sums are the same, adding exact zeros). Tokens of different
    // sequences (a decode batch) each see a small part: slotted alone.
    int64_t n_union = 0, seen = 0;
    for (int64_t j = 0; j < needed; ++j) {
        bool any = false;
        for (int64_t t = a.t0; t < a.t1 && !any; ++t) any = mask_row(t)[j] != hidden;
        if (any) {
            a.order[n_union] = int32_t(j);
            a.cell_pos[n_union++] = position(j);
        }
    }
    for (int64_t t = a.t0; t < a.t1; ++t) seen += count_visible(mask_row(t), needed);
    const bool together = n_union > 0 && 2 * seen >= n_union * (a.t1 - a.t0) / 2 &&
                          !sort_by_position(a.order, a.cell_pos, n_union) &&
                          slots_by_position(a.cell_pos, n_union);
    if (!together) {
        for (int64_t t = a.t0; t < a.t1; ++t) attend_alone(t, needed);
        return;
    }
    const int64_t slots = assign_slots(a.order, a.cell_pos, n_union, true, a.slot_cell);
    // each token: its first and last visible chunk of the union's slots, and whether its own cells
    // would be slotted by position (else alone, by rank)
    int64_t lo_of[attention_max_block_tokens], hi_of[attention_max_block_tokens];
    bool own[attention_max_block_tokens];
    for (int64_t t = a.t0; t < a.t1; ++t) {
        const float *m = mask_row(t);
        int64_t lo = -1, hi = 0, chunks = 0, n = 0;
        for (int64_t s0 = 0; s0 < slots; s0 += attention_lanes) {
            int64_t in_chunk = 0;
            for (int l = 0; l < attention_lanes; ++l) {
                const int32_t c = a.slot_cell[s0 + l];
                in_chunk += c >= 0 && m[c] != hidden;
            }
            if (in_chunk == 0) continue;
            if (lo < 0) lo = s0;
            hi = s0 + attention_lanes;
            ++chunks;
            n += in_chunk;
        }
        lo_of[t - a.t0] = lo < 0 ? 0 : lo;
        hi_of[t - a.t0] = hi;
        own[t - a.t0] = chunks * attention_lanes <= n + attention_slack;
    }
    if (a.t1 - a.t0 == 1) {  // one token: K and V read from the rows where the build can
        fill_slots(slots, can_direct_k, can_direct_v);
        if (own[0]) attend(a.t0, lo_of[0], hi_of[0], can_direct_k, can_direct_v);
    } else if (slots <= attention_untiled_slots) {
        fill_slots(slots, k_ints, false);
        for (int64_t t = a.t0; t < a.t1; ++t)
            if (own[t - a.t0]) attend(t, lo_of[t - a.t0], hi_of[t - a.t0], k_ints, false);
    } else {
        fill_slots(slots, k_ints, false);
        int64_t tile[attention_max_block_tokens], n_tile = 0;
        const int64_t tile_tokens = attention_tile_tokens(group);
        for (int64_t t = a.t0; t < a.t1; ++t) {
            if (own[t - a.t0]) tile[n_tile++] = t;
            if (n_tile == tile_tokens || (n_tile > 0 && t + 1 == a.t1)) {
                attend_tiled(tile, n_tile, lo_of, hi_of);
                n_tile = 0;
            }
        }
    }
    // the rare token whose cells lie far apart within the union: by itself (refills the slots)
    for (int64_t t = a.t0; t < a.t1; ++t)
        if (!own[t - a.t0]) attend_alone(t, needed);
}

// [begin, end) of n items for thread ith of nth: contiguous shares differing by at most one item.
inline void share_of(int64_t n, int ith, int nth, int64_t &begin, int64_t &end) {
    begin = n * ith / nth;
    end = n * (ith + 1) / nth;
}

// One token's attention (a.t0; a.g unused) shared by all the threads of the node: a decode step over a
// long cache, where the KV heads are fewer than the threads (or do not divide among them evenly). The
// same operations as run_attention_task's on its own slots (attend_alone), so the same bits, in three
// phases between barriers: the scores of every query head (pieces of each KV head's slots spread over
// the threads), each query head's softmax, then the weighted sums (by KV head, pass of query heads and
// 32 values of the output). Every thread slots the token's cells itself (the same slots).
template <class Loops>
void run_attention_token_split(const attention_task &a, const attention_split &sp) {
    const tensor &q = *a.q, &k = *a.k, &v = *a.v, &mask = *a.mask;
    const int64_t head_k = k.ne[0], head_v = v.ne[0], n_kv = k.ne[1];
    const int64_t n_head = q.ne[2], n_head_kv = k.ne[2], group = n_head / n_head_kv;
    const int64_t passes = (group + attention_heads_per_pass - 1) / attention_heads_per_pass;
    const int64_t t = a.t0;
    const float *m = static_cast<const float *>(mask.data) + t * mask.ne[0];
    const int64_t slots = slot_token(a, m, visible_end(m, n_kv, 0));
    int64_t begin = 0, end = 0;
    float *out = static_cast<float *>(a.dst->data) + t * n_head * head_v;
    if (!show_slots(a, m, 0, slots,
                    a.shown)) {  // nothing visible: zeros (every thread decides alike, none waits)
        share_of(n_head, sp.ith, sp.nth, begin, end);
        std::fill(out + begin * head_v, out + end * head_v, 0.0f);
        return;
    }
    auto head_pass = [&](int64_t g, int64_t pass, int64_t &h0) {
        h0 = g * group + pass * attention_heads_per_pass;
        return int(std::min<int64_t>(attention_heads_per_pass, (g + 1) * group - h0));
    };
    // 1. scores: pieces of a KV head's slots, a few per thread
    const int64_t piece =
        std::clamp<int64_t>(round_up_16((slots * n_head_kv + 4 * sp.nth - 1) / (4 * sp.nth)), 64, 1024);
    const int64_t pieces_per_head = (slots + piece - 1) / piece;
    share_of(n_head_kv * pieces_per_head, sp.ith, sp.nth, begin, end);
    for (int64_t i = begin; i < end; ++i) {
        const int64_t g = i / pieces_per_head, lo = (i % pieces_per_head) * piece;
        const int64_t n = std::min(slots, lo + piece) - lo;
        const char *k_head = static_cast<const char *>(k.data) + g * int64_t(k.nb[2]);
        for (int64_t pass = 0; pass < passes; ++pass) {
            int64_t h0 = 0;
            const int nh = head_pass(g, pass, h0);
            const float *qs[attention_heads_per_pass];
            q8_query q8s[attention_heads_per_pass];
            float *xs[attention_heads_per_pass];
            for (int j = 0; j < nh; ++j) xs[j] = sp.scores + (h0 + j) * a.max_slots + lo;
            prepare_queries<Loops>(a, t, h0, nh, qs, q8s);
            if (k_in_integers(k))
                Loops::dots_int(q8s, nh, k_head, int64_t(k.nb[1]), k.type, a.slot_cell + lo, head_k, n, xs);
            else
                Loops::dots_rows(qs, nh, k_head, int64_t(k.nb[1]), k.type, a.slot_cell + lo, head_k, n, xs);
        }
    }
    sp.p->barrier();
    // 2. each query head's softmax
    share_of(n_head, sp.ith, sp.nth, begin, end);
    for (int64_t h = begin; h < end; ++h) softmax_of_scores<Loops>(a, h, sp.scores + h * a.max_slots, slots);
    sp.p->barrier();
    // 3. the weighted sums: (KV head, pass, 32 values of the output)
    const int64_t step = head_v % 32 == 0 ? 32 : head_v, value_parts = head_v / step;
    share_of(n_head_kv * passes * value_parts, sp.ith, sp.nth, begin, end);
    for (int64_t i = begin; i < end; ++i) {
        const int64_t g = i / (passes * value_parts), pass = i / value_parts % passes;
        const int64_t v0 = i % value_parts * step;
        int64_t h0 = 0;
        const int nh = head_pass(g, pass, h0);
        const float *ps[attention_heads_per_pass];
        float *outs[attention_heads_per_pass];
        for (int j = 0; j < nh; ++j) {
            ps[j] = sp.scores + (h0 + j) * a.max_slots;
            outs[j] = out + (h0 + j) * head_v;
        }
        Loops::weighted_rows(ps, nh, static_cast<const char *>(v.data) + g * int64_t(v.nb[2]),
                             int64_t(v.nb[1]), v.type, a.slot_cell, slots, head_v, v0, v0 + step, a.vcols,
                             outs);
    }
}

}  // namespace

// The per-ISA entry points (ops_attention*.cpp).
void attention_task_scalar(const attention_task &a);
void attention_task_avx2(const attention_task &a);
void attention_task_avx512(const attention_task &a);
// run_attention_token_split where the build reads K and V from the rows (reads_rows); false, having
// done nothing, where it does not (the same answer on every thread).
bool attention_token_split_scalar(const attention_task &a, const attention_split &sp);
bool attention_token_split_avx2(const attention_task &a, const attention_split &sp);
bool attention_token_split_avx512(const attention_task &a, const attention_split &sp);

}  // namespace weft::cpu
