// src/backends/cpu/ops_attention.cpp — the fused attention op: tasks of (token block, KV head) handed
// out to the threads, each computed by the ISA build of attention_impl.h the CPU supports.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "backends/cpu/attention_impl.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_level.h"
#include "weft/core/fp16.h"
#include "weft/core/ops.h"

namespace weft::cpu {

namespace {

// Tokens per task: a block shares the conversion of its KV head's rows.
constexpr int64_t tokens_per_task = 64;

struct attention_scratch {
    size_t kbuf = 0, vbuf = 0, scores = 0, visible_scores = 0, visible = 0, acc = 0, kgather = 0,
           identity = 0, qround = 0, per_thread = 0;
    size_t scores_stride = 0, acc_stride = 0;  // floats
    explicit attention_scratch(const tensor &dst) {
        const tensor &k = *dst.src[1], &v = *dst.src[2];
        const size_t n_kv = size_t(k.ne[1]), n_kv16 = (n_kv + 15) / 16 * 16;
        kbuf = 0;
        vbuf = kbuf + pad_to_cache_line(n_kv16 * size_t(k.ne[0]) * sizeof(float));
        // per head of a pass: the scores of every cell (n_kv rounded up to 16, at least head_k: the
        // first also holds one K row), then of the visible cells; the accumulators of head_v values
        scores_stride = pad_to_cache_line(std::max(n_kv16, size_t(k.ne[0])) * sizeof(float)) / sizeof(float);
        acc_stride = pad_to_cache_line(size_t(v.ne[0]) * sizeof(float)) / sizeof(float);
        const size_t heads = attention_heads_per_pass;
        scores = vbuf + pad_to_cache_line(n_kv * size_t(v.ne[0]) * sizeof(float));
        visible_scores = scores + heads * scores_stride * sizeof(float);
        visible = visible_scores + heads * scores_stride * sizeof(float);
        acc = visible + pad_to_cache_line(n_kv * sizeof(int32_t));
        kgather = acc + heads * acc_stride * sizeof(float);
        identity = kgather + pad_to_cache_line(n_kv * row_size(k.type, k.ne[0]));
        qround = identity + pad_to_cache_line(n_kv * sizeof(int32_t));
        per_thread = qround + pad_to_cache_line(heads * size_t(k.ne[0]) * sizeof(float));
    }
};

using task_fn = void (*)(const attention_task &);

task_fn best_task_fn() {
    return best_of({attention_task_scalar, attention_task_avx2, attention_task_avx512});
}

}  // namespace

namespace {
struct scalar_loops : attention_loops_plain, attention_heads<attention_loops_plain> {
    static void scores_heads(const float *const *q, int nh, const float *kt, int64_t stride, int64_t n,
                             int64_t cells, float *const *out) {
        attention_heads<attention_loops_plain>::scores(q, nh, kt, stride, n, cells, out);
    }
    static void weighted_sum_heads(const float *const *p, int nh, const int32_t *visible, int64_t n,
                                   const float *vbuf, int64_t head_v, float *const *acc) {
        attention_heads<attention_loops_plain>::weighted_sum(p, nh, visible, n, vbuf, head_v, acc);
    }
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
    static void transpose_k(const char *k, int64_t row_bytes, dtype type, int64_t head_k, int64_t cells,
                            float *kt, int64_t stride, float *scratch) {
        transpose_k_rows(convert, k, row_bytes, type, head_k, 0, cells, kt, stride, scratch);
    }
};
}  // namespace

void attention_task_scalar(const attention_task &a) {
    run_attention_task<scalar_loops>(a);
}

void compute_attention(const compute_params &p, tensor &dst) {
    const tensor &q = *dst.src[0], &k = *dst.src[1];
    const int64_t n_tokens = q.ne[1], n_head_kv = k.ne[2];
    auto *next_task = reinterpret_cast<std::atomic<int64_t> *>(p.wdata);
    if (p.ith == 0) new (next_task) std::atomic<int64_t>(0);
    p.barrier();

    const attention_scratch layout(dst);
    std::byte *mine = p.wdata + cache_line + size_t(p.ith) * layout.per_thread;
    attention_task task{&q,
                        &k,
                        dst.src[2],
                        dst.src[3],
                        &dst,
                        dst.param_f32(0),
                        dst.param_f32(1),
                        0,
                        0,
                        0,
                        reinterpret_cast<float *>(mine + layout.kbuf),
                        reinterpret_cast<float *>(mine + layout.vbuf),
                        reinterpret_cast<float *>(mine + layout.scores),
                        reinterpret_cast<float *>(mine + layout.visible_scores),
                        reinterpret_cast<int32_t *>(mine + layout.visible),
                        reinterpret_cast<float *>(mine + layout.acc),
                        reinterpret_cast<float *>(mine + layout.qround),
                        reinterpret_cast<char *>(mine + layout.kgather),
                        reinterpret_cast<int32_t *>(mine + layout.identity)};
    task.scores_stride = int64_t(layout.scores_stride);
    task.acc_stride = int64_t(layout.acc_stride);
    const task_fn run = best_task_fn();
    const int64_t blocks = (n_tokens + tokens_per_task - 1) / tokens_per_task;
    for (int64_t t = next_task->fetch_add(1); t < blocks * n_head_kv; t = next_task->fetch_add(1)) {
        task.g = t % n_head_kv;
        task.t0 = (t / n_head_kv) * tokens_per_task;
        task.t1 = std::min(n_tokens, task.t0 + tokens_per_task);
        run(task);
    }
}

bool supports_attention(const tensor &dst) {
    const tensor *q = dst.src[0], *k = dst.src[1], *v = dst.src[2], *mask = dst.src[3];
    return q && k && v && mask && dst.type == dtype::f32 && dst.is_contiguous() && q->type == dtype::f32 &&
           mask->type == dtype::f32 && is_attention_kv_type(k->type) && is_attention_kv_type(v->type);
}

size_t work_size_attention(const tensor &dst, int n_threads) {
    return cache_line + attention_scratch(dst).per_thread * size_t(n_threads);
}

}  // namespace weft::cpu
