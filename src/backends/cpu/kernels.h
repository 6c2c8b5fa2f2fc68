// src/backends/cpu/kernels.h — what a CPU kernel sees (its share of a node, work memory, a barrier)
// and the per-op kernel table.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <span>
#include <string>

#include "backends/cpu/partition.h"
#include "weft/core/error.h"
#include "weft/core/tensor.h"

namespace weft::cpu {

class thread_pool;

// When the threads stop early. Every thread checks after the barrier that ends node i whether a
// stop was requested at a node <= i; a request is always made before its node's barrier, so all
// threads leave the node list at the same node (a plain flag could be seen one node early by a
// thread still leaving the previous barrier, and the others would wait for it forever).
struct run_control {
    static constexpr size_t never = ~size_t(0);
    std::atomic<size_t> stop_after{never};  // the first node after which to stop
    std::mutex mutex;
    std::string failure;  // bad input found while computing (the first one); thrown as weft::error
    bool failed = false;

    void reset() {
        stop_after.store(never);
        failure.clear();
        failed = false;
    }
    void request_stop(size_t node_index) {
        size_t current = stop_after.load();
        while (node_index < current && !stop_after.compare_exchange_weak(current, node_index)) {
        }
    }
    void report_failure(size_t node_index, const std::string &what) {
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (!failed) failure = what;
            failed = true;
        }
        request_stop(node_index);
    }
    bool should_stop(size_t node_index) const {
        return stop_after.load(std::memory_order_relaxed) <= node_index;
    }
};

struct compute_params {
    int ith = 0;                  // this thread, 0 .. nth-1
    int nth = 1;                  // threads sharing the node
    std::byte *wdata = nullptr;   // work memory of the node, shared by its threads (64-byte aligned)
    size_t wsize = 0;             // bytes of wdata
    thread_pool *pool = nullptr;  // for barrier()
    run_control *control = nullptr;
    size_t node_index = 0;  // of the node being computed
    // nth chunk counters (for chunk_dispenser, attention's task counter), each on its
    // own cache line, zero when the node starts without a barrier of its own (alternating_counters)
    std::byte *counters = nullptr;

    void barrier() const;
    // Bad input found while computing: the graph stops after this node and graph_compute throws.
    void fail(const std::string &what) const { control->report_failure(node_index, what); }
};

// Computes this thread's share of dst (dst.src[] are the inputs).
using kernel_fn = void (*)(const compute_params &p, tensor &dst);
// Bytes of shared work memory the kernel needs with n_threads threads.
using work_size_fn = size_t (*)(const tensor &dst, int n_threads);
// Whether the kernel handles this node's types and layouts.
using supports_fn = bool (*)(const tensor &dst);

struct op_kernel {
    kernel_fn compute = nullptr;       // null: nothing to compute (leafs, views)
    supports_fn supports = nullptr;    // null: always supported
    work_size_fn work_size = nullptr;  // null: no work memory
    // The kernel shares out its work by rows of the result, without barriers, chunk counters or
    // work memory shared between threads: a node of little work (few_elements) may be computed by
    // one thread alone, and two such nodes in a row need no barrier between them.
    bool may_run_alone = false;
};

// Elements a node writes (set_rows: the rows it stores) up to which a node whose kernel may run
// alone is computed by thread 0 alone: less work than a barrier costs the threads (a decode step's
// norms, residual adds, ropes and cache stores).
constexpr int64_t few_elements = 4096;
inline int64_t elements_written(const tensor &node) {
    return node.op == op_kind::set_rows ? node.src[1]->nelements() : node.nelements();
}

// The kernel entry of an op (a table sized by op_kind::count).
const op_kernel &kernel_of(op_kind op);

// Work memory per thread is padded to a cache line so threads never share one.
constexpr size_t cache_line = 64;
inline size_t pad_to_cache_line(size_t bytes) {
    return (bytes + cache_line - 1) / cache_line * cache_line;
}

// Chunk counters that need no barrier of their own before use: two sets taken in turns by the
// steps of a walk (the nodes of a graph, the experts of a mul_mat_id). While step s runs with one
// set, thread 0 zeroes the other for step s + 1, and the barrier that ends step s publishes it; the
// first step's set is zeroed before the walk (zero_first, followed by a barrier or a thread start).
class alternating_counters {
  public:
    static size_t bytes(int n_threads) { return 2 * set_bytes(n_threads); }
    alternating_counters(std::byte *memory, int n_threads) : memory_(memory), n_threads_(n_threads) {}
    void zero_first() const { zero(0); }
    // The set of step `step`, by every thread at the step's start.
    std::byte *for_step(uint64_t step, int ith) const {
        if (ith == 0) zero((step + 1) % 2);
        return memory_ + size_t(step % 2) * set_bytes(n_threads_);
    }

  private:
    static size_t set_bytes(int n_threads) { return cache_line * size_t(n_threads); }
    void zero(uint64_t set) const {
        for (int t = 0; t < n_threads_; ++t)
            new (memory_ + size_t(set) * set_bytes(n_threads_) + cache_line * size_t(t))
                std::atomic<int64_t>(0);
    }
    std::byte *memory_;
    int n_threads_;
};

// Chunks [0, n) split into one contiguous region per thread. A thread takes its own region's chunks
// front to back, then helps the others from their fronts: each thread's weights stream from one
// contiguous range (the prefetchers run ahead instead of restarting at every chunk), and no thread
// idles while another still has work (nor waits at the node's end for one the machine preempted).
// The counters, one per thread counting the chunks taken from its region, are the node's
// (compute_params::counters): zero when it starts, without a barrier of its own. Who computes a
// chunk does not change its values.
class chunk_dispenser {
  public:
    chunk_dispenser(const compute_params &p, int64_t n_chunks)
        : memory_(p.counters), n_threads_(p.nth), n_chunks_(n_chunks) {
        WEFT_ASSERT(memory_ != nullptr);
    }
    // The next chunk for thread ith; -1 when every chunk has been taken.
    int64_t next(int ith) const {
        for (int i = 0; i < n_threads_; ++i) {
            const int t = (ith + i) % n_threads_;
            const index_range region = split_range(n_chunks_, t, n_threads_);
            const int64_t c = region.begin + counter(t)->fetch_add(1, std::memory_order_relaxed);
            if (c < region.end) return c;
        }
        return -1;
    }

  private:
    std::atomic<int64_t> *counter(int t) const {
        return reinterpret_cast<std::atomic<int64_t> *>(memory_ + cache_line * size_t(t));
    }
    std::byte *memory_;
    int n_threads_;
    int64_t n_chunks_;
};

// The float scratch of thread ith when each thread gets floats_per_thread floats of wdata.
inline float *thread_scratch(const compute_params &p, int64_t floats_per_thread) {
    const size_t stride = pad_to_cache_line(size_t(floats_per_thread) * sizeof(float));
    return reinterpret_cast<float *>(p.wdata + size_t(p.ith) * stride);
}
inline size_t scratch_size(int64_t floats_per_thread, int n_threads) {
    return pad_to_cache_line(size_t(floats_per_thread) * sizeof(float)) * size_t(n_threads);
}

// The row-wise float kernels (elementwise, norms, soft_max) work in three rows of ne[0] floats per
// thread: up to two sources converted to f32 and the result.
constexpr int row_scratch_rows = 3;
inline size_t work_size_row_scratch(const tensor &dst, int n_threads) {
    return scratch_size(row_scratch_rows * dst.ne[0], n_threads);
}

// Address of element (i0, i1, i2, i3) of t.
inline char *element_at(const tensor &t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return static_cast<char *>(t.data) + i0 * int64_t(t.nb[0]) + i1 * int64_t(t.nb[1]) +
           i2 * int64_t(t.nb[2]) + i3 * int64_t(t.nb[3]);
}
inline char *row_at(const tensor &t, int64_t i1, int64_t i2, int64_t i3) {
    return element_at(t, 0, i1, i2, i3);
}

// Splits a flat row index of a tensor with ne1, ne2 rows per dim into (i1, i2, i3).
inline void unravel_row(int64_t row, const int64_t *ne, int64_t &i1, int64_t &i2, int64_t &i3) {
    i3 = row / (ne[1] * ne[2]);
    const int64_t rest = row - i3 * ne[1] * ne[2];
    i2 = rest / ne[1];
    i1 = rest - i2 * ne[1];
}

// A row of a tensor, by its indices in dims 1..3.
struct row_index {
    int64_t i1, i2, i3;
};

// This thread's share of the rows of t (see split_range), in order:
//     for (const auto [i1, i2, i3] : thread_rows(p, dst)) ...
class thread_rows {
  public:
    thread_rows(const compute_params &p, const tensor &t)
        : ne_(t.ne), range_(split_range(t.nrows(), p.ith, p.nth)) {}

    class iterator {
      public:
        iterator(const int64_t *ne, int64_t row) : ne_(ne), row_(row) {}
        row_index operator*() const {
            row_index r;
            unravel_row(row_, ne_, r.i1, r.i2, r.i3);
            return r;
        }
        iterator &operator++() {
            ++row_;
            return *this;
        }
        bool operator!=(const iterator &other) const { return row_ != other.row_; }

      private:
        const int64_t *ne_;
        int64_t row_;
    };
    iterator begin() const { return {ne_, range_.begin}; }
    iterator end() const { return {ne_, range_.end}; }

  private:
    const int64_t *ne_;
    index_range range_;
};

// --- kernels, grouped by file -----------------------------------------------------------------
// ops_elementwise.cpp
void compute_add(const compute_params &p, tensor &dst);
void compute_sub(const compute_params &p, tensor &dst);
void compute_mul(const compute_params &p, tensor &dst);
void compute_div(const compute_params &p, tensor &dst);
void compute_scale(const compute_params &p, tensor &dst);
void compute_silu(const compute_params &p, tensor &dst);
void compute_gelu(const compute_params &p, tensor &dst);
void compute_tanh(const compute_params &p, tensor &dst);
void compute_sigmoid(const compute_params &p, tensor &dst);
void compute_softplus(const compute_params &p, tensor &dst);
void compute_glu(const compute_params &p, tensor &dst);
bool supports_binary(const tensor &dst);
bool supports_unary(const tensor &dst);  // a float source of dst's shape (also rms_norm, norm)
bool supports_glu(const tensor &dst);

// ops_norm.cpp
void compute_rms_norm(const compute_params &p, tensor &dst);
void compute_norm(const compute_params &p, tensor &dst);
void compute_soft_max(const compute_params &p, tensor &dst);
bool supports_soft_max(const tensor &dst);

// ops_rope.cpp
void compute_rope(const compute_params &p, tensor &dst);
bool supports_rope(const tensor &dst);
size_t work_size_rope(const tensor &dst, int n_threads);

// ops_mul_mat.cpp
void compute_mul_mat(const compute_params &p, tensor &dst);
bool supports_mul_mat(const tensor &dst);
size_t work_size_mul_mat(const tensor &dst, int n_threads);
// Products that may be computed together: the same activations (one quantization), interleaved
// weights of one activation format (or grouped bf16 weights, or f16 weights in int16 blocks, of one
// k), results apart. A layer's Q, K and V; its gate and up.
constexpr int max_shared_products = 4;
bool shares_activations(const tensor &first, const tensor &next);
// The chunks of shared products of groups[j] groups each: product j's chunks are
// [first_chunk[j], first_chunk[j + 1]), of groups_per_chunk groups (plan_chunks for the thread count).
struct shared_chunks {
    int64_t groups_per_chunk = 0, n_chunks = 0;
    int64_t first_chunk[max_shared_products + 1] = {0};
};
shared_chunks plan_shared_chunks(const int64_t *groups, int n_products, int n_threads);
// The products dsts[0 .. n) (each pair sharing activations) as one node: one quantization of the
// activations, one dispenser of chunks over all their rows (compute_mul_mat's own path for one
// product with interleaved weights, n = 1).
void compute_mul_mat_shared(const compute_params &p, tensor *const *dsts, int n_dsts);
// The work (weight rows x columns) each of nth threads gets in the products dsts[0 .. n) computed as
// one node, from the partition the kernels use, all threads equally fast: work[0, nth).
void mul_mat_thread_work(tensor *const *dsts, int n_dsts, int nth, std::span<double> work);

// partition_report.cpp: the work each of nth threads gets in one node computed by all of them
// (mul_mat_thread_work for products), into work[0, nth); false where the kernel's split is not
// modelled (attention, mul_mat_id, add_id: work left as it was).
bool node_thread_work(const tensor &node, int nth, std::span<double> work);

// ops_copy.cpp
void compute_get_rows(const compute_params &p, tensor &dst);
void compute_set_rows(const compute_params &p, tensor &dst);
void compute_cpy(const compute_params &p, tensor &dst);
void compute_cont(const compute_params &p, tensor &dst);
void compute_concat(const compute_params &p, tensor &dst);
bool supports_get_rows(const tensor &dst);
bool supports_set_rows(const tensor &dst);
bool supports_cpy(const tensor &dst);
bool supports_cont(const tensor &dst);
bool supports_concat(const tensor &dst);
size_t work_size_get_rows(const tensor &dst, int n_threads);
size_t work_size_set_rows(const tensor &dst, int n_threads);
size_t work_size_cpy(const tensor &dst, int n_threads);

// ops_attention.cpp
void compute_attention(const compute_params &p, tensor &dst);
bool supports_attention(const tensor &dst);
size_t work_size_attention(const tensor &dst, int n_threads);

// ops_moe.cpp
void compute_mul_mat_id(const compute_params &p, tensor &dst);
bool supports_mul_mat_id(const tensor &dst);
size_t work_size_mul_mat_id(const tensor &dst, int n_threads);
void compute_top_k(const compute_params &p, tensor &dst);
bool supports_top_k(const tensor &dst);
size_t work_size_top_k(const tensor &dst, int n_threads);

// ops_ssm.cpp
void compute_ssm_conv(const compute_params &p, tensor &dst);
void compute_ssm_scan(const compute_params &p, tensor &dst);
bool supports_ssm_conv(const tensor &dst);
size_t work_size_ssm_conv(const tensor &dst, int n_threads);
bool supports_ssm_scan(const tensor &dst);
size_t work_size_ssm_scan(const tensor &dst, int n_threads);
void compute_ssm_scan_mamba2(const compute_params &p, tensor &dst);
bool supports_ssm_scan_mamba2(const tensor &dst);
size_t work_size_ssm_scan_mamba2(const tensor &dst, int n_threads);
void compute_add_id(const compute_params &p, tensor &dst);
void compute_l2_norm(const compute_params &p, tensor &dst);
void compute_gated_delta_net(const compute_params &p, tensor &dst);
bool supports_gated_delta_net(const tensor &dst);
size_t work_size_gated_delta_net(const tensor &dst, int n_threads);
bool supports_add_id(const tensor &dst);

// ops_reduce.cpp
void compute_argmax(const compute_params &p, tensor &dst);
void compute_sum_rows(const compute_params &p, tensor &dst);
void compute_mean(const compute_params &p, tensor &dst);
bool supports_argmax(const tensor &dst);
bool supports_sum_rows(const tensor &dst);

}  // namespace weft::cpu
