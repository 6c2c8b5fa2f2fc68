// src/backends/cpu/ops_moe.cpp — the ops of mixture-of-experts layers: mul_mat_id (each token's
// columns against the expert matrices its ids pick), add_id (their per-expert biases) and top_k (the
// picking).
//
// mul_mat_id groups the (pick, token) pairs by expert, gathers each expert's columns into one
// matrix and runs the ordinary mul_mat kernel (compute_mul_mat) on the expert's [k, m] slice and
// those columns. mul_mat computes every element in one fixed order whatever the columns beside it
// and the thread count, so a pick's result is bit for bit the mul_mat of its expert and its column,
// in any batch: the same guarantee, from the same code. Experts repacked at load (interleaved.h,
// float_mm.h) are read through the same layouts as repacked 2-D weights. A product of few pairs (a
// decode step) with repacked experts skips the grouping barrier and the per-expert products: every
// thread quantizes all the columns itself and the used experts' rows are dealt from one dispenser
// (compute_mul_mat_id_few_pairs), each element still one kernel call in the same order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "backends/cpu/interleaved.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/rows.h"

namespace weft::cpu {

namespace {

// A plain f32 matrix [ne0, ne1] over memory the caller owns.
void make_f32_matrix(tensor &t, int64_t ne0, int64_t ne1, float *data) {
    t.type = dtype::f32;
    t.ne[0] = ne0;
    t.ne[1] = ne1;
    t.nb[0] = sizeof(float);
    t.nb[1] = sizeof(float) * size_t(ne0);
    t.nb[2] = t.nb[3] = t.nb[1] * size_t(ne1);
    t.data = data;
}

// Bytes of one expert's matrix: repacked stacks keep the matrices one after the other too.
size_t expert_bytes(const tensor &experts) {
    if (interleaved_layout_of(experts)) return interleaved_size(experts) / size_t(experts.ne[2]);
    return experts.nb[2];
}

// The mul_mat node of one expert: its [k, m] slice of the experts (in their layout, plain or
// repacked), n_cols gathered f32 columns x, the result [m, n_cols] at out. Holds pointers to its
// own members: neither copied nor moved.
struct expert_product {
    tensor a, b, dst;

    expert_product(const tensor &experts, int64_t expert, float *x, int64_t n_cols, float *out) : a(experts) {
        a.ne[2] = 1;
        a.nb[2] = a.nb[3] = a.nb[1] * size_t(a.ne[1]);
        a.data = static_cast<char *>(experts.data) + size_t(expert) * expert_bytes(experts);
        a.op = op_kind::none;
        a.view_src = nullptr;
        std::fill(std::begin(a.src), std::end(a.src), nullptr);
        make_f32_matrix(b, experts.ne[0], n_cols, x);
        make_f32_matrix(dst, experts.ne[1], n_cols, out);
        dst.op = op_kind::mul_mat;
        dst.src[0] = &a;
        dst.src[1] = &b;
    }
    expert_product(const expert_product &) = delete;
    expert_product &operator=(const expert_product &) = delete;
};

// Byte offsets of mul_mat_id's work memory: a failure slot, the pairs ordered by expert, each
// expert's first pair in that order (and a fill cursor), the gathered columns, their results, the
// inner products' chunk counters (alternating_counters), and the work memory of the inner mul_mat.
struct mul_mat_id_work {
    size_t order = 0, start = 0, cursor = 0, columns = 0, results = 0, counters = 0, inner = 0;

    mul_mat_id_work(const tensor &dst, int n_threads) {
        const tensor &experts = *dst.src[0];
        const size_t n_pairs = size_t(dst.ne[1] * dst.ne[2]), n_expert = size_t(experts.ne[2]);
        order = cache_line;
        start = order + pad_to_cache_line(n_pairs * sizeof(int32_t));
        cursor = start + pad_to_cache_line((n_expert + 1) * sizeof(int64_t));
        columns = cursor + pad_to_cache_line(n_expert * sizeof(int64_t));
        results = columns + pad_to_cache_line(n_pairs * size_t(experts.ne[0]) * sizeof(float));
        counters = results + pad_to_cache_line(n_pairs * size_t(experts.ne[1]) * sizeof(float));
        inner = counters + alternating_counters::bytes(n_threads);
    }
};

template <class T>
T *work_at(const compute_params &p, size_t offset) {
    return reinterpret_cast<T *>(p.wdata + offset);
}

int32_t pick_of(const tensor &ids, int64_t i, int64_t t) {
    int32_t id;
    std::memcpy(&id, element_at(ids, i, t, 0, 0), sizeof id);
    return id;
}

// By thread 0: the pairs (pair = t * n_used + i) grouped by expert, in pair order within an expert.
// Returns the first pair whose id is out of range, or -1.
int64_t group_pairs_by_expert(const tensor &ids, int64_t n_expert, int32_t *order, int64_t *start,
                              int64_t *cursor) {
    const int64_t n_used = ids.ne[0], n_pairs = n_used * ids.ne[1];
    std::fill(start, start + n_expert + 1, 0);
    for (int64_t pair = 0; pair < n_pairs; ++pair) {
        const int32_t id = pick_of(ids, pair % n_used, pair / n_used);
        if (id < 0 || id >= n_expert) return pair;
        ++start[id + 1];
    }
    std::partial_sum(start, start + n_expert + 1, start);
    std::copy(start, start + n_expert, cursor);
    for (int64_t pair = 0; pair < n_pairs; ++pair)
        order[cursor[pick_of(ids, pair % n_used, pair / n_used)]++] = int32_t(pair);
    return -1;
}

void report_bad_pair(const compute_params &p, const tensor &ids, int64_t pair, int64_t n_expert) {
    const int64_t n_used = ids.ne[0], i = pair % n_used, t = pair / n_used;
    p.fail("[mul_mat_id] ids[" + std::to_string(i) + ", " + std::to_string(t) + "] is " +
           std::to_string(pick_of(ids, i, t)) + ": must be in [0, " + std::to_string(n_expert) + ")");
}

// Products of at most this many (pick, token) pairs (a decode step: n_used pairs) go through
// compute_mul_mat_id_few_pairs: no barrier inside the node, where the grouped path has two, and one
// per used expert (a decode step of a 16-layer MoE model: ~300 barriers fewer).
constexpr int64_t few_pairs = 16;

// The memory of one thread in the few-pairs path: the pairs grouped by expert (its own copy), the
// scratch of one column, and every pair's column as q8 rows (in grouped order).
struct few_pairs_work {
    size_t order = 0, start = 0, cursor = 0, scratch = 0, blocks = 0, qs = 0, d = 0, sum = 0, bytes = 0;

    few_pairs_work(const tensor &dst, q8_format format) {
        const tensor &experts = *dst.src[0];
        const int64_t k = experts.ne[0];
        const size_t n_pairs = size_t(dst.ne[1] * dst.ne[2]), n_expert = size_t(experts.ne[2]);
        const size_t n_d = size_t(k / values_per_scale(format)), n_sums = size_t(k / values_per_sum(format));
        const size_t block_bytes =
            type_traits(format == q8_format::q8_k ? dtype::q8_k : dtype::q8_0).type_size;
        start = order + pad_to_cache_line(n_pairs * sizeof(int32_t));
        cursor = start + pad_to_cache_line((n_expert + 1) * sizeof(int64_t));
        scratch = cursor + pad_to_cache_line(n_expert * sizeof(int64_t));
        blocks = scratch + pad_to_cache_line(size_t(k) * sizeof(float));
        qs = blocks + pad_to_cache_line(n_d * block_bytes);
        d = qs + pad_to_cache_line(n_pairs * size_t(k));
        sum = d + pad_to_cache_line(n_pairs * n_d * sizeof(float));
        bytes = sum + pad_to_cache_line(n_pairs * n_sums * sizeof(int32_t));
    }
};

bool takes_few_pairs_path(const tensor &dst) {
    return interleaved_layout_of(*dst.src[0]) != nullptr && dst.ne[1] * dst.ne[2] <= few_pairs;
}

// NaN ranks as -infinity; equal ranks keep index order.
float rank_of(float v) {
    return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
}

}  // namespace

namespace {

// mul_mat_id of few pairs with repacked experts. Every thread groups the pairs by expert and
// quantizes all their columns into memory of its own (the same values as the grouped path's
// columns), then takes chunks of groups of 16 rows from one dispenser over the rows of every used
// expert, so the threads split all the used experts' rows evenly with no barrier between experts;
// each group's rows go straight to the pairs' rows of dst. Every element is one kernel call over
// the same activations in the same order as the grouped path's: the same bits.
void compute_mul_mat_id_few_pairs(const compute_params &p, tensor &dst) {
    const tensor &experts = *dst.src[0];  // [k, m, n_expert] repacked
    const tensor &b = *dst.src[1];        // f32 [k, 1 or n_used, n_tokens]
    const tensor &ids = *dst.src[2];      // i32 [n_used, n_tokens]
    const interleaved_layout &layout = *interleaved_layout_of(experts);
    const groups_kernel_fn kernel = best_groups_kernel();
    const q8_format format = activation_format(layout);
    const int64_t k = experts.ne[0], m = experts.ne[1], n_expert = experts.ne[2];
    const int64_t n_used = ids.ne[0], n_pairs = n_used * ids.ne[1];
    const few_pairs_work w(dst, format);
    WEFT_ASSERT(w.bytes * size_t(p.nth) <= p.wsize);
    std::byte *mine = p.wdata + size_t(p.ith) * w.bytes;
    auto *order = reinterpret_cast<int32_t *>(mine + w.order);
    auto *start = reinterpret_cast<int64_t *>(mine + w.start);
    auto *qs = reinterpret_cast<int8_t *>(mine + w.qs);
    auto *d = reinterpret_cast<float *>(mine + w.d);
    auto *sum = reinterpret_cast<int32_t *>(mine + w.sum);

    const int64_t bad_pair =
        group_pairs_by_expert(ids, n_expert, order, start, reinterpret_cast<int64_t *>(mine + w.cursor));
    if (bad_pair >= 0) {  // every thread finds it and leaves
        if (p.ith == 0) report_bad_pair(p, ids, bad_pair, n_expert);
        return;
    }

    // 1. every pair's column, in grouped order, as q8 rows of this thread's own
    const int64_t n_d = k / values_per_scale(format), n_sums = k / values_per_sum(format);
    auto *scratch = reinterpret_cast<float *>(mine + w.scratch);
    for (int64_t j = 0; j < n_pairs; ++j) {
        const int64_t pair = order[j], i = pair % n_used, t = pair / n_used;
        const float *x = row_as_f32(b.type, row_at(b, b.ne[1] == 1 ? 0 : i, t, 0), b.nb[0], k, scratch);
        quantize_q8_row(x, k, format, qs + j * k, d + j * n_d, sum + j * n_sums, mine + w.blocks);
    }

    // 2. chunks of the used experts' groups, expert after expert, from one dispenser
    int64_t used[few_pairs];
    int64_t n_used_experts = 0;
    for (int64_t e = 0; e < n_expert; ++e)
        if (start[e + 1] > start[e]) used[n_used_experts++] = e;
    const int64_t n_groups = m / interleave_rows;
    const chunk_plan plan = plan_equal_chunks(n_groups, n_used_experts, p.nth);
    const int64_t groups_per_chunk = plan.groups_per_chunk;
    const int64_t chunks_per_expert = (n_groups + groups_per_chunk - 1) / groups_per_chunk;
    const chunk_dispenser chunks(p, plan.n_chunks);
    const q8_rows act = make_q8_rows(qs, d, sum, k, format);
    const size_t group_bytes = size_t(k / layout.block) * layout.block_bytes;
    for (int64_t chunk = chunks.next(p.ith); chunk >= 0; chunk = chunks.next(p.ith)) {
        const int64_t e = used[chunk / chunks_per_expert];
        const auto *weights = static_cast<const uint8_t *>(experts.data) + size_t(e) * expert_bytes(experts);
        const int64_t g_begin = (chunk % chunks_per_expert) * groups_per_chunk;
        const int64_t g_end = std::min(n_groups, g_begin + groups_per_chunk);
        // a pair's column against the chunk's groups in one call (q8_0 reads them side by side; the
        // chunk's weights, a few groups, stay in cache for the expert's next pair)
        for (int64_t j = start[e]; j < start[e + 1]; ++j) {
            const int64_t pair = order[j];
            auto *out = reinterpret_cast<float *>(row_at(dst, pair % n_used, pair / n_used, 0));
            kernel(layout, weights + size_t(g_begin) * group_bytes, group_bytes, g_end - g_begin, act, j, 1,
                   out + g_begin * interleave_rows, m);
        }
    }
}

}  // namespace

void compute_mul_mat_id(const compute_params &p, tensor &dst) {
    const tensor &experts = *dst.src[0];  // [k, m, n_expert]
    const tensor &b = *dst.src[1];        // f32 [k, 1 or n_used, n_tokens]
    const tensor &ids = *dst.src[2];      // i32 [n_used, n_tokens]
    if (takes_few_pairs_path(dst)) return compute_mul_mat_id_few_pairs(p, dst);
    const int64_t k = experts.ne[0], m = experts.ne[1], n_expert = experts.ne[2];
    const int64_t n_used = ids.ne[0], n_pairs = n_used * ids.ne[1];
    const mul_mat_id_work w(dst, p.nth);
    auto *bad_pair = work_at<int64_t>(p, 0);
    auto *order = work_at<int32_t>(p, w.order);
    auto *start = work_at<int64_t>(p, w.start);
    auto *columns = work_at<float>(p, w.columns);
    auto *results = work_at<float>(p, w.results);

    if (p.ith == 0)
        *bad_pair = group_pairs_by_expert(ids, n_expert, order, start, work_at<int64_t>(p, w.cursor));
    p.barrier();
    if (*bad_pair >= 0) {  // every thread sees it and leaves together
        if (p.ith == 0) report_bad_pair(p, ids, *bad_pair, n_expert);
        return;
    }

    // 1. the columns, grouped by expert
    const index_range mine = split_range(n_pairs, p.ith, p.nth);
    for (int64_t j = mine.begin; j < mine.end; ++j) {
        const int64_t pair = order[j], i = pair % n_used, t = pair / n_used;
        load_row(b.type, row_at(b, b.ne[1] == 1 ? 0 : i, t, 0), b.nb[0], k, columns + j * k);
    }
    const alternating_counters expert_counters(p.wdata + w.counters, p.nth);
    if (p.ith == 0) expert_counters.zero_first();
    p.barrier();

    // 2. one ordinary product per expert that has columns (every thread takes part in each)
    compute_params inner = p;
    inner.wdata = p.wdata + w.inner;
    inner.wsize = p.wsize - w.inner;
    uint64_t step = 0;
    for (int64_t e = 0; e < n_expert; ++e) {
        const int64_t n_cols = start[e + 1] - start[e];
        if (n_cols == 0) continue;
        inner.counters = expert_counters.for_step(step++, p.ith);
        expert_product product(experts, e, columns + start[e] * k, n_cols, results + start[e] * m);
        compute_mul_mat(inner, product.dst);
        p.barrier();  // the inner work memory is reused by the next expert
    }

    // 3. the results to their (pick, token) rows
    for (int64_t j = mine.begin; j < mine.end; ++j) {
        const int64_t pair = order[j];
        std::memcpy(row_at(dst, pair % n_used, pair / n_used, 0), results + j * m, size_t(m) * sizeof(float));
    }
}

bool supports_mul_mat_id(const tensor &dst) {
    const tensor *experts = dst.src[0];
    const tensor *b = dst.src[1];
    const tensor *ids = dst.src[2];
    if (!experts || !b || !ids || ids->type != dtype::i32 || b->type != dtype::f32 ||
        dst.type != dtype::f32 || !dst.is_contiguous())
        return false;
    const int64_t n_used = ids->ne[0], n_tokens = ids->ne[1];
    if (dst.ne[0] != experts->ne[1] || dst.ne[1] != n_used || dst.ne[2] != n_tokens || dst.ne[3] != 1 ||
        (b->ne[1] != 1 && b->ne[1] != n_used) || b->ne[2] != n_tokens || experts->ne[3] != 1)
        return false;
    expert_product one(*experts, 0, nullptr, 1, nullptr);
    return supports_mul_mat(one.dst);
}

size_t work_size_mul_mat_id(const tensor &dst, int n_threads) {
    if (takes_few_pairs_path(dst))
        return few_pairs_work(dst, activation_format(*interleaved_layout_of(*dst.src[0]))).bytes *
               size_t(n_threads);
    const mul_mat_id_work w(dst, n_threads);
    // the most columns one expert can get: every pair
    expert_product all(*dst.src[0], 0, nullptr, dst.ne[1] * dst.ne[2], nullptr);
    return w.inner + work_size_mul_mat(all.dst, n_threads);
}

// Per row: the indices sorted by (rank, index) far enough for the first k. The order is total
// (no two indices compare equal), so the result does not depend on the sort's algorithm.
// Each (pick, token) row is one thread's: a + the bias row its id names, element by element.
void compute_add_id(const compute_params &p, tensor &dst) {
    const tensor &a = *dst.src[0], &bias = *dst.src[1], &ids = *dst.src[2];
    const int64_t m = a.ne[0], n_used = a.ne[1], n_expert = bias.ne[1];
    const index_range rows = split_range(n_used * a.ne[2], p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        const int64_t i = r % n_used, t = r / n_used;
        const int32_t id = *reinterpret_cast<const int32_t *>(element_at(ids, i, t, 0, 0));
        if (id < 0 || id >= n_expert) {
            p.fail("[add_id] ids[" + std::to_string(i) + ", " + std::to_string(t) + "] is " +
                   std::to_string(id) + ", outside [0, " + std::to_string(n_expert) + ")");
            return;
        }
        const auto *x = reinterpret_cast<const float *>(element_at(a, 0, i, t, 0));
        const auto *b = reinterpret_cast<const float *>(element_at(bias, 0, id, 0, 0));
        auto *out = reinterpret_cast<float *>(element_at(dst, 0, i, t, 0));
        for (int64_t k = 0; k < m; ++k) out[k] = x[k] + b[k];
    }
}

bool supports_add_id(const tensor &dst) {
    const tensor *a = dst.src[0], *bias = dst.src[1], *ids = dst.src[2];
    return a && bias && ids && dst.type == dtype::f32 && a->type == dtype::f32 && bias->type == dtype::f32 &&
           ids->type == dtype::i32 && a->nb[0] == sizeof(float) && dst.nb[0] == sizeof(float);
}

void compute_top_k(const compute_params &p, tensor &dst) {
    const tensor &a = *dst.src[0];
    const int64_t n = a.ne[0], k = dst.ne[0];
    float *scratch = thread_scratch(p, 2 * n);
    auto *idx = reinterpret_cast<int32_t *>(scratch + n);
    for (const auto [i1, i2, i3] : thread_rows(p, a)) {
        const float *x = row_as_f32(a.type, row_at(a, i1, i2, i3), a.nb[0], n, scratch);
        std::iota(idx, idx + n, 0);
        std::partial_sort(idx, idx + k, idx + n, [x](int32_t l, int32_t r) {
            const float vl = rank_of(x[l]), vr = rank_of(x[r]);
            return vl > vr || (vl == vr && l < r);
        });
        std::memcpy(row_at(dst, i1, i2, i3), idx, size_t(k) * sizeof(int32_t));
    }
}

bool supports_top_k(const tensor &dst) {
    const tensor *a = dst.src[0];
    return a && is_float_type(a->type) && dst.type == dtype::i32 && dst.is_contiguous() &&
           dst.ne[0] == dst.param_i32(0) && dst.ne[0] >= 1 && dst.ne[0] <= a->ne[0] &&
           dst.ne[1] == a->ne[1] && dst.ne[2] == a->ne[2] && dst.ne[3] == a->ne[3] &&
           a->ne[0] <= std::numeric_limits<int32_t>::max();
}

size_t work_size_top_k(const tensor &dst, int n_threads) {
    return scratch_size(2 * dst.src[0]->ne[0], n_threads);  // the row as floats and its indices
}

}  // namespace weft::cpu
