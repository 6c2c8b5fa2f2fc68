// src/backends/cpu/cpu_backend.cpp — the CPU backend: op support, work memory, and graph execution
// with every thread walking the node list together (one barrier between dependent nodes).
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/float_mm.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/interleaved.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "weft/backends/cpu.h"
#include "weft/core/error.h"
#include "weft/core/ops.h"
#include "weft/core/profile.h"

namespace weft {

struct cpu_backend::impl {
    explicit impl(int n_threads) : pool(n_threads) {}

    cpu::thread_pool pool;
    std::function<bool()> abort_callback;

    // Work memory shared by the threads of a node; grown to the largest need, never shrunk.
    cpu::host_block work;
    size_t work_size = 0;
    // The nodes' chunk counters (alternating_counters), sized for the pool when a graph starts.
    cpu::host_block counters;

    cpu::run_control control;
    op_profile *profile = nullptr;  // filled after each run when set
    // While profiling, per node of the graph: thread 0's wall time (compute and barrier; < 0: not
    // computed in this run) and each thread's busy time (node i, thread ith at [i * nth + ith]).
    std::vector<double> wall_ns, busy_ns;

    // How the threads walk a graph's nodes, planned before they start (plan_nodes).
    struct node_plan {
        bool alone = false;         // little work: thread 0 computes it alone, the others skip it
        bool barrier_after = true;  // false only between two nodes computed alone
        int shared = 1;  // products computed with this one (compute_mul_mat_shared); 0: by an earlier one
        uint32_t first_shared = 0;  // where they are in shared_nodes
    };
    std::vector<node_plan> plan;  // one per node; empty: every node by all threads, then a barrier
    std::vector<tensor *> shared_nodes;

    void reserve_work(size_t bytes);
    void poll_abort(size_t node_index);
    void check_graph(const graph &g) const;
    void plan_nodes(const graph &g) { plan_graph(g, pool.size(), plan, shared_nodes); }
    static void plan_graph(const graph &g, int n_threads, std::vector<node_plan> &plan,
                           std::vector<tensor *> &shared_nodes);
    void add_profile(const graph &g, size_t begin, size_t end);
    compute_status run_nodes(graph &g, size_t begin, size_t end);
    void compute_nodes(int ith, graph &g, size_t begin, size_t end);
};

namespace {

std::string node_label(const tensor &t) {
    return std::string(op_name(t.op)) + " '" + t.name + "' " + t.shape_str() + " " + type_name(t.type);
}

void check_thread_count(int n) {
    if (n < 1) throw error("[cpu] n_threads is " + std::to_string(n) + ": must be at least 1");
}

}  // namespace

void cpu_backend::impl::reserve_work(size_t bytes) {
    if (bytes <= work_size) return;
    const size_t rounded = cpu::pad_to_cache_line(bytes);
    work = cpu::host_block(rounded, "kernel work memory");
    work_size = rounded;
}

// Bad input caught before any thread starts: nodes without memory, ops the kernels cannot run.
void cpu_backend::impl::check_graph(const graph &g) const {
    for (const tensor *node : g.nodes) {
        const cpu::op_kernel &k = cpu::kernel_of(node->op);
        if (!k.compute) continue;
        if (node->data == nullptr)
            throw error("[cpu] node " + node_label(*node) +
                        " has no memory: allocate the graph before computing");
        for (int i = 0; i < max_src; ++i) {
            const tensor *src = node->src[i];
            if (!src) continue;
            if (src->data == nullptr)
                throw error("[cpu] node " + node_label(*node) + ": source '" + src->name + "' " +
                            src->shape_str() + " has no data");
            const tensor *owner = src->view_src ? src->view_src : src;
            if ((cpu::interleaved_layout_of(*owner) || cpu::is_grouped_float(*owner)) &&
                ((node->op != op_kind::mul_mat && node->op != op_kind::mul_mat_id) || i != 0 || src != owner))
                throw error("[cpu] node " + node_label(*node) + ": source '" + src->name +
                            "' is a weight repacked for mul_mat; no other op can read it (load the model "
                            "without repacking)");
        }
        if (k.supports && !k.supports(*node)) {
            std::string srcs;
            for (const tensor *src : node->src)
                if (src)
                    srcs +=
                        std::string(srcs.empty() ? "" : ", ") + type_name(src->type) + " " + src->shape_str();
            throw error("[cpu] node " + node_label(*node) + " with sources (" + srcs +
                        ") is not supported by the CPU kernels");
        }
    }
}

// Called by thread 0 after its share of a node. An exception must not leave thread 0's loop (the
// other threads would wait at the barrier for ever): it becomes the graph's failure.
void cpu_backend::impl::poll_abort(size_t node_index) {
    try {
        if (abort_callback()) control.request_stop(node_index);
    } catch (const std::exception &e) {
        control.report_failure(node_index, std::string("[cpu] the abort callback threw: ") + e.what());
    }
}

// A decode step of a small model is hundreds of short nodes, and a barrier after each was much of
// its time. Nodes of little work whose kernels may run alone are computed by thread 0 alone, and a
// run of them has one barrier, at its end (the other threads skip to it); products of the same
// activations, consecutive in the graph, are computed as one node (one quantization, one barrier).
// Neither changes a value: each element is computed as it would be by any thread count.
void cpu_backend::impl::plan_graph(const graph &g, int n_threads, std::vector<node_plan> &plan,
                                   std::vector<tensor *> &shared_nodes) {
    plan.assign(g.nodes.size(), node_plan{});
    shared_nodes.clear();
    size_t last = g.nodes.size();  // the last node computed (not a view), if any
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const tensor &node = *g.nodes[i];
        const cpu::op_kernel &k = cpu::kernel_of(node.op);
        if (!k.compute) continue;
        node_plan &np = plan[i];
        np.alone = n_threads > 1 && k.may_run_alone && cpu::elements_written(node) <= cpu::few_elements;
        if (last < g.nodes.size() && plan[last].alone && np.alone) plan[last].barrier_after = false;
        last = i;
    }
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (g.nodes[i]->op != op_kind::mul_mat || plan[i].shared != 1) continue;
        const size_t first = shared_nodes.size();
        shared_nodes.push_back(g.nodes[i]);
        for (size_t j = i + 1; j < g.nodes.size() && shared_nodes.size() - first < cpu::max_shared_products;
             ++j) {
            const tensor &next = *g.nodes[j];
            if (!cpu::kernel_of(next.op).compute) continue;  // a view between them
            bool shares = true;
            for (size_t m = first; m < shared_nodes.size() && shares; ++m)
                shares = cpu::shares_activations(*shared_nodes[m], next);
            if (!shares) break;
            shared_nodes.push_back(g.nodes[j]);
            plan[j].shared = 0;
        }
        plan[i].shared = int(shared_nodes.size() - first);
        plan[i].first_shared = uint32_t(first);
        if (plan[i].shared == 1) shared_nodes.pop_back();
    }
}

void cpu_backend::impl::compute_nodes(int ith, graph &g, size_t begin, size_t end) {
    cpu::compute_params p;
    p.ith = ith;
    p.nth = pool.size();
    p.wdata = work.data();
    p.wsize = work_size;
    p.pool = &pool;
    p.control = &control;
    cpu::compute_params alone = p;  // a node of thread 0 alone: no other thread, no barrier, no counters
    alone.nth = 1;
    alone.pool = nullptr;
    const cpu::alternating_counters node_counters(counters.data(), p.nth);
    const node_plan everyone;
    uint64_t step = 0;
    for (size_t i = begin; i < end; ++i) {
        tensor &node = *g.nodes[i];
        const cpu::op_kernel &k = cpu::kernel_of(node.op);
        if (!k.compute) continue;  // views and leafs: no work, no barrier
        const node_plan &np = plan.empty() ? everyone : plan[i];
        if (np.shared == 0) continue;  // computed with an earlier product
        p.node_index = alone.node_index = i;
        const bool timed = profile != nullptr;
        const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        const auto ns_since = [&t0] {
            return double(
                std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
                    .count());
        };
        try {
            if (np.alone) {
                if (ith == 0) k.compute(alone, node);
            } else {
                p.counters = node_counters.for_step(step++, ith);
                if (np.shared > 1)
                    cpu::compute_mul_mat_shared(p, &shared_nodes[np.first_shared], np.shared);
                else
                    k.compute(p, node);
            }
        } catch (const std::exception &e) {
            // kernels report bad data through p.fail(); anything else (out of memory) must still
            // reach the barrier, or the other threads would wait there for ever
            control.report_failure(i, "[cpu] node " + node_label(node) + ": " + e.what());
        }
        if (timed && (ith == 0 || !np.alone)) busy_ns[i * size_t(p.nth) + size_t(ith)] = ns_since();
        if (ith == 0 && abort_callback) poll_abort(i);
        // a stop is looked at only after a barrier: every thread leaves the walk at the same node
        if (np.barrier_after) pool.barrier(ith);
        if (timed && ith == 0) wall_ns[i] = ns_since();
        if (np.barrier_after && control.should_stop(i)) break;
    }
}

// The nodes [begin, end) just computed, into the profile: each node's wall time and its threads' busy
// time; products computed together share theirs out by their weights' rows.
void cpu_backend::impl::add_profile(const graph &g, size_t begin, size_t end) {
    const int nth = pool.size();
    for (size_t i = begin; i < end; ++i) {
        if (wall_ns[i] < 0) continue;
        double busy = 0;
        for (int t = 0; t < nth; ++t) busy += busy_ns[i * size_t(nth) + size_t(t)];
        const node_plan *np = plan.empty() ? nullptr : &plan[i];
        if (!np || np->shared <= 1) {
            profile->add(*g.nodes[i], wall_ns[i], busy, nth);
            continue;
        }
        double rows = 0;
        for (int j = 0; j < np->shared; ++j)
            rows += double(shared_nodes[np->first_shared + uint32_t(j)]->ne[0]);
        for (int j = 0; j < np->shared; ++j) {
            const tensor &node = *shared_nodes[np->first_shared + uint32_t(j)];
            const double part = double(node.ne[0]) / rows;
            profile->add(node, wall_ns[i] * part, busy * part, nth);
        }
    }
}

compute_status cpu_backend::impl::run_nodes(graph &g, size_t begin, size_t end) {
    const size_t counter_bytes = cpu::alternating_counters::bytes(pool.size());
    if (counters.size() < counter_bytes) counters = cpu::host_block(counter_bytes, "chunk counters");
    cpu::alternating_counters(counters.data(), pool.size()).zero_first();
    if (profile) {
        wall_ns.assign(g.nodes.size(), -1.0);
        busy_ns.assign(g.nodes.size() * size_t(pool.size()), 0.0);
    }
    pool.run([&](int ith) { compute_nodes(ith, g, begin, end); });
    if (profile) add_profile(g, begin, end);
    if (control.failed) throw error(control.failure);
    return control.stop_after.load() != cpu::run_control::never ? compute_status::aborted
                                                                : compute_status::ok;
}

cpu_backend::cpu_backend(int n_threads) {
    check_thread_count(n_threads);
    impl_ = std::make_unique<impl>(n_threads);
}

cpu_backend::~cpu_backend() = default;

bool cpu_backend::supports_op(const tensor &node) const {
    const cpu::op_kernel &k = cpu::kernel_of(node.op);
    return !k.supports || k.supports(node);
}

compute_status cpu_backend::graph_compute(graph &g, const eval_callback &cb) {
    impl &s = *impl_;
    s.check_graph(g);
    size_t work_needed = 0;
    for (const tensor *node : g.nodes) {
        const cpu::op_kernel &k = cpu::kernel_of(node->op);
        if (k.compute && k.work_size) work_needed = std::max(work_needed, k.work_size(*node, s.pool.size()));
    }
    s.reserve_work(work_needed);
    s.control.reset();
    if (s.profile) s.profile->add_graph();

    if (!cb) {
        s.plan_nodes(g);
        return s.run_nodes(g, 0, g.nodes.size());
    }
    s.plan.clear();  // the observer's ranges: every node by all threads, each seen when it is done
    // With an observer: run up to (and including) the next node it wants to see, show it, go on.
    size_t begin = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const bool observe = cb(g.nodes[i], true);
        if (!observe && i + 1 < g.nodes.size()) continue;
        const compute_status status = s.run_nodes(g, begin, i + 1);
        if (status != compute_status::ok) return status;
        if (observe && !cb(g.nodes[i], false)) return compute_status::aborted;
        begin = i + 1;
    }
    return compute_status::ok;
}

std::vector<cpu_node_partition> cpu_backend::partition_report(const graph &g, int n_threads) {
    check_thread_count(n_threads);
    std::vector<impl::node_plan> plan;
    std::vector<tensor *> shared_nodes;
    impl::plan_graph(g, n_threads, plan, shared_nodes);
    std::vector<cpu_node_partition> report;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        tensor &node = *g.nodes[i];
        const impl::node_plan &np = plan[i];
        if (!cpu::kernel_of(node.op).compute || np.shared == 0) continue;
        cpu_node_partition r;
        r.node = &node;
        r.n_products = np.shared;
        r.alone = np.alone;
        r.work.assign(size_t(n_threads), 0.0);
        if (np.alone)
            r.work[0] = double(cpu::elements_written(node));
        else if (np.shared > 1)
            cpu::mul_mat_thread_work(&shared_nodes[np.first_shared], np.shared, n_threads, r.work);
        else
            r.modelled = cpu::node_thread_work(node, n_threads, r.work);
        if (!r.modelled) r.work.clear();
        report.push_back(std::move(r));
    }
    return report;
}

void cpu_backend::set_n_threads(int n) {
    check_thread_count(n);
    impl_->pool.resize(n);
}

int cpu_backend::n_threads() const {
    return impl_->pool.size();
}

int64_t cpu_backend::threads_started() const {
    return impl_->pool.threads_started();
}

void cpu_backend::set_profile(op_profile *profile) {
    impl_->profile = profile;
}

void cpu_backend::set_abort_callback(std::function<bool()> cb) {
    impl_->abort_callback = std::move(cb);
}

}  // namespace weft
