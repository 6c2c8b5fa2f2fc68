// src/backends/cpu/ops_attention.cpp — the fused attention op: tasks of (token block, KV head) handed
// out to the threads, each computed by the ISA build of attention_impl.h the CPU supports; one token
// over a long cache shared by all the threads (run_attention_token_split).
#include <algorithm>
#include <atomic>
#include <cstring>

#include "backends/cpu/attention_impl.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_level.h"
#include "weft/core/error.h"
#include "weft/core/fp16.h"
#include "weft/core/ops.h"

namespace weft::cpu {

namespace {

struct attention_scratch {
    size_t kcols = 0, vcols = 0, dots = 0, lanes = 0, row_max = 0, row_factor = 0, shown = 0, chunk_sum = 0,
           qround = 0, row = 0, order = 0, cell_pos = 0, slot_cell = 0, per_thread = 0;
    size_t split_scores = 0;  // the bytes of attention_split::scores, after every thread's scratch
    int64_t max_slots = 0;
    explicit attention_scratch(const tensor &dst) {
        const tensor &k = *dst.src[1], &v = *dst.src[2];
        const size_t n_kv = size_t(k.ne[1]), head_k = size_t(k.ne[0]), head_v = size_t(v.ne[0]);
        const size_t rows = size_t(attention_scratch_rows(dst.src[0]->ne[1], dst.src[0]->ne[2] / k.ne[2]));
        max_slots = attention_max_slots(int64_t(n_kv));
        const size_t slots = size_t(max_slots);
        kcols = 0;
        vcols = kcols + pad_to_cache_line(head_k * slots * sizeof(float));
        dots = vcols + pad_to_cache_line(head_v * slots * sizeof(float));
        lanes = dots + pad_to_cache_line(rows * slots * sizeof(float));
        row_max = lanes + pad_to_cache_line(rows * head_v * attention_lanes * sizeof(float));
        row_factor = row_max + pad_to_cache_line(rows * attention_lanes * sizeof(float));
        shown = row_factor + pad_to_cache_line(rows * sizeof(float));
        chunk_sum = shown + pad_to_cache_line(slots * sizeof(float));
        qround = chunk_sum + pad_to_cache_line((slots / 16 + 16) * sizeof(float));
        row = qround + pad_to_cache_line(rows * head_k * sizeof(float));
        order = row + pad_to_cache_line((head_k + head_v) * sizeof(float));
        cell_pos = order + pad_to_cache_line(n_kv * sizeof(int32_t));
        slot_cell = cell_pos + pad_to_cache_line(n_kv * sizeof(int64_t));
        per_thread = slot_cell + pad_to_cache_line(slots * sizeof(int32_t));
        split_scores =
            dst.src[0]->ne[1] == 1 ? pad_to_cache_line(size_t(dst.src[0]->ne[2]) * slots * sizeof(float)) : 0;
    }
};

using task_fn = void (*)(const attention_task &);
using split_fn = bool (*)(const attention_task &, const attention_split &);

task_fn best_task_fn() {
    return best_of({attention_task_scalar, attention_task_avx2, attention_task_avx512});
}

split_fn best_split_fn() {
    return best_of({attention_token_split_scalar, attention_token_split_avx2, attention_token_split_avx512});
}

// How the tokens of a batch go out to the threads: tasks of (block of tokens, KV head), taken in turn
// from a shared counter. Blocks of 64 tokens (one conversion of the KV head's rows serves them all),
// smaller (to 16) while that leaves fewer than 4 tasks a thread, larger (to 256) over a deep cache
// while 4 tasks a thread remain; the last blocks first, as a causal
// mask gives them the most cells, so that the short ones fill in at the end. A token's result does not
// depend on its block (attention_impl.h), so neither does it on the thread count.
class attention_tasks {
  public:
    attention_tasks(int64_t n_tokens, int64_t n_head_kv, int64_t n_kv, int nth)
        : n_tokens_(n_tokens), n_head_kv_(n_head_kv) {
        const int64_t enough = 4 * int64_t(nth);  // tasks
        while (block_ > 16 && blocks(block_) * n_head_kv < enough) block_ /= 2;
        // a deep cache: larger blocks while enough tasks remain
        while (n_kv >= attention_deep_slots && block_ < attention_max_block_tokens &&
               blocks(2 * block_) * n_head_kv >= enough)
            block_ *= 2;
    }
    int64_t count() const { return blocks(block_) * n_head_kv_; }
    // task i: tokens [t0, t1) of KV head g
    void get(int64_t i, int64_t &t0, int64_t &t1, int64_t &g) const {
        g = i % n_head_kv_;
        t0 = (blocks(block_) - 1 - i / n_head_kv_) * block_;
        t1 = std::min(n_tokens_, t0 + block_);
    }

  private:
    int64_t blocks(int64_t size) const { return (n_tokens_ + size - 1) / size; }
    int64_t n_tokens_, n_head_kv_, block_ = attention_block_tokens;
};

// Cells from which one token's attention is shared by all the threads (run_attention_token_split)
// rather than handed out by KV head: below it, its two extra barriers cost more than they save.
constexpr int64_t split_token_cells = 256;

}  // namespace

void attention_task_scalar(const attention_task &a) {
    run_attention_task<attention_loops_plain>(a);
}

bool attention_token_split_scalar(const attention_task &a, const attention_split &sp) {
    if (!reads_rows<attention_loops_plain>(*a.k, *a.v, a.max_slots)) return false;
    run_attention_token_split<attention_loops_plain>(a, sp);
    return true;
}

void compute_attention(const compute_params &p, tensor &dst) {
    const tensor &q = *dst.src[0], &k = *dst.src[1];
    const int64_t n_tokens = q.ne[1], n_head_kv = k.ne[2];
    // the node's first chunk counter, zero at its start (compute_params::counters): no barrier
    WEFT_ASSERT(p.counters != nullptr);
    auto *next_task = reinterpret_cast<std::atomic<int64_t> *>(p.counters);
    const attention_scratch layout(dst);
    std::byte *mine = p.wdata + size_t(p.ith) * layout.per_thread;
    attention_task task{};
    task.q = &q;
    task.k = &k;
    task.v = dst.src[2];
    task.mask = dst.src[3];
    task.positions = dst.src[4];
    task.sinks = dst.src[5] ? static_cast<const float *>(dst.src[5]->data) : nullptr;
    task.dst = &dst;
    task.scale = dst.param_f32(0);
    task.softcap = dst.param_f32(1);
    task.kcols = reinterpret_cast<float *>(mine + layout.kcols);
    task.vcols = reinterpret_cast<float *>(mine + layout.vcols);
    task.dots = reinterpret_cast<float *>(mine + layout.dots);
    task.lanes = reinterpret_cast<float *>(mine + layout.lanes);
    task.row_max = reinterpret_cast<float *>(mine + layout.row_max);
    task.row_factor = reinterpret_cast<float *>(mine + layout.row_factor);
    task.shown = reinterpret_cast<float *>(mine + layout.shown);
    task.chunk_sum = reinterpret_cast<float *>(mine + layout.chunk_sum);
    task.qround = reinterpret_cast<float *>(mine + layout.qround);
    task.row = reinterpret_cast<float *>(mine + layout.row);
    task.order = reinterpret_cast<int32_t *>(mine + layout.order);
    task.cell_pos = reinterpret_cast<int64_t *>(mine + layout.cell_pos);
    task.slot_cell = reinterpret_cast<int32_t *>(mine + layout.slot_cell);
    task.max_slots = layout.max_slots;
    // one token over a long cache: every thread on every KV head
    if (n_tokens == 1 && p.nth > 1 && k.ne[1] >= split_token_cells) {
        task.t0 = 0;
        task.t1 = 1;
        attention_split split;
        split.ith = p.ith;
        split.nth = p.nth;
        split.scores = reinterpret_cast<float *>(p.wdata + size_t(p.nth) * layout.per_thread);
        split.p = &p;
        if (best_split_fn()(task, split)) return;
    }
    const task_fn run = best_task_fn();
    const attention_tasks tasks(n_tokens, n_head_kv, k.ne[1], p.nth);
    for (int64_t t = next_task->fetch_add(1); t < tasks.count(); t = next_task->fetch_add(1)) {
        tasks.get(t, task.t0, task.t1, task.g);
        run(task);
    }
}

bool supports_attention(const tensor &dst) {
    const tensor *q = dst.src[0], *k = dst.src[1], *v = dst.src[2], *mask = dst.src[3];
    return q && k && v && mask && dst.type == dtype::f32 && dst.is_contiguous() && q->type == dtype::f32 &&
           mask->type == dtype::f32 && is_attention_kv_type(k->type) && is_attention_kv_type(v->type) &&
           (!dst.src[4] || (dst.src[4]->type == dtype::i32 && dst.src[4]->is_contiguous() &&
                            dst.src[4]->ne[0] >= k->ne[1])) &&
           (!dst.src[5] || (dst.src[5]->type == dtype::f32 && dst.src[5]->is_contiguous() &&
                            dst.src[5]->nelements() == q->ne[2]));
}

size_t work_size_attention(const tensor &dst, int n_threads) {
    const attention_scratch layout(dst);
    return layout.per_thread * size_t(n_threads) + layout.split_scores;
}

}  // namespace weft::cpu
