// weft/backends/cpu.h — the CPU backend: host buffers, a persistent thread pool, per-op kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weft/core/backend.h"

namespace weft {

class op_profile;

// The host buffer type (64-byte aligned heap memory).
buffer_type &cpu_buffer_type();
// A host buffer over memory the caller owns (a file mapping): tensors placed in it point straight
// into that memory; nothing is copied or freed.
std::unique_ptr<backend_buffer> cpu_buffer_from_host_ptr(void *ptr, size_t size);

// Repacks, into one new host buffer, the weights that the CPU kernels read faster in an
// interleaved layout (matrices of the legacy, K-quant and IQ4 types and of f16/bf16/f32 whose rows
// come in multiples of 16; q8_0's kernels keep its row kernel's, the reference engine's, summation
// order): their data then points into that buffer and their layout is marked for the kernels. The
// others are left alone; returns null when none qualifies. Only for tensors that nothing reads but
// mul_mat (2-D) or mul_mat_id (stacks of experts), as their first operand (any other op refuses a
// repacked source). About the same bytes as the plain layout. released(old_data, bytes), when
// given, is called (from any thread) once a weight's old bytes are no longer needed, so a caller can
// give the memory back while the rest is repacked.
std::unique_ptr<backend_buffer> cpu_repack_weights(
    std::span<tensor *const> weights, const std::function<void(const void *, size_t)> &released = {});

// The machine's memory read bandwidth in bytes/s: n_threads threads each stream their share of a
// buffer of `bytes` (much larger than the caches) with the widest loads the CPU has; the best of
// `passes` passes. The ceiling that generating a token (which reads every weight once) can reach.
double cpu_read_bandwidth(int n_threads, size_t bytes = size_t(1) << 30, int passes = 5);

// GELU through the reference engine's f16 table (on, the default: its results, bit for bit) or its
// tanh form computed in f32 for every input (off: for comparisons with float references, where an
// input within an ulp of an f16 rounding boundary would otherwise step by a whole f16 ulp). Process-wide;
// set it before computing.
void cpu_set_gelu_table(bool on);

// Machines of several NUMA nodes (the reference's --numa): distribute spreads the threads over
// every node in contiguous blocks, isolate keeps them on the node the process runs on, numactl
// spreads them over the nodes of the CPUs the process was started with (numactl --cpunodebind ...).
// Threads are pinned to their node's CPUs, and the weights repacked afterwards (cpu_repack_weights)
// are first touched, page by page, by a thread of the node whose threads compute those rows (at
// n_threads threads). With one node (or no NUMA information) nothing changes.
enum class numa_strategy { disabled, distribute, isolate, numactl };
// Process-wide; call it before loading the model. Returns what it did, in one line (the nodes
// found, the threads of each).
std::string cpu_set_numa(numa_strategy strategy, int n_threads);

// Registers the "CPU" device (weft/core/device.h) once; later calls do nothing. The runtime calls it
// before it looks a device up.
void register_cpu_device();

// How the CPU kernels share out one node of a graph (cpu_backend::partition_report).
struct cpu_node_partition {
    const tensor *node = nullptr;  // the node (products computed together: the first of them)
    int n_products = 1;            // products computed as this one node (a layer's q, k and v)
    bool alone = false;            // few elements: thread 0 computes it alone, the others go on
    bool modelled = true;          // false: the kernel's split is not in the report (work is empty)
    // Each thread's share, in the op's own unit (weight rows x columns for products, values
    // written for row-wise ops): the same partition functions the kernels call, all threads equally
    // fast (the dispensers' helping and the scheduler are not in it).
    std::vector<double> work;
};

class cpu_backend : public backend {
  public:
    // How n_threads threads would share out every node of g that computes (views and leafs are
    // left out), in graph order, as graph_compute plans and splits them: which nodes run alone,
    // which products run together, and each thread's share of the rest. Needs no memory: g may be
    // a graph that was only built (the products' results are taken as the planner lays them out).
    static std::vector<cpu_node_partition> partition_report(const graph &g, int n_threads);

    explicit cpu_backend(int n_threads = 1);
    ~cpu_backend() override;

    const char *name() const override { return "CPU"; }
    buffer_type &default_buffer_type() override { return cpu_buffer_type(); }
    bool supports_op(const tensor &node) const override;
    bool supports_buffer_type(const buffer_type &bt) const override { return bt.is_host(); }
    // Every thread walks the nodes together (one barrier after each node that computes; views are
    // free). Throws weft::error for a node without memory, an op/type the kernels do not support
    // (see supports_op), or bad data found while computing (a get_rows/set_rows id out of range).
    // Not reentrant: one graph at a time per backend.
    compute_status graph_compute(graph &g, const eval_callback &cb) override;

    // The pool grows when more threads are asked for than ever before and is never shrunk: fewer
    // threads leave workers idle rather than joining them. Workers sleep (no busy-spinning)
    // between graphs.
    void set_n_threads(int n) override;
    int n_threads() const;
    // Worker threads started over this backend's life: the largest n_threads - 1, never per graph.
    int64_t threads_started() const;
    // Times every computed node into `profile` (null: stop profiling); the caller keeps it alive.
    void set_profile(op_profile *profile) override;
    // Polled between nodes; returning true aborts the graph (compute_status::aborted).
    void set_abort_callback(std::function<bool()> cb) override;

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace weft
