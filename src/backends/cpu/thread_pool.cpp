// src/backends/cpu/thread_pool.cpp — worker lifecycle, run dispatch and the barrier (spin, then sleep).
#include "backends/cpu/thread_pool.h"

#include "backends/cpu/numa.h"
#include "weft/core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace weft::cpu {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}
// Spins before a thread sleeps at the barrier: the threads of a node usually finish within a few
// microseconds of each other, and waking a sleeper costs more than that.
constexpr int barrier_spins = 4000;
}  // namespace

thread_pool::thread_pool(int n_threads) : n_active_(n_threads) {
    WEFT_ASSERT(n_threads >= 1);
    start_workers(n_threads);
    plan_barrier(n_threads);
}

int thread_pool::barrier_nodes(int n_threads) {
    int nodes = 0;
    for (int level = n_threads; level > 1 || nodes == 0;
         level = (level + barrier_fan_in - 1) / barrier_fan_in)
        nodes += (level + barrier_fan_in - 1) / barrier_fan_in;
    return nodes;
}

// Level by level: `arrivals` things (threads, then nodes of the level below) in groups of fan-in.
void thread_pool::plan_barrier(int n_threads) {
    std::vector<barrier_node> tree(size_t(barrier_nodes(n_threads)));
    int below_first = 0, level_first = 0;
    for (int arrivals = n_threads, first_level = 1;; first_level = 0) {
        const int nodes = (arrivals + barrier_fan_in - 1) / barrier_fan_in;
        for (int i = 0; i < nodes; ++i)
            tree[size_t(level_first + i)].expected = std::min(barrier_fan_in, arrivals - i * barrier_fan_in);
        if (!first_level)
            for (int i = 0; i < arrivals; ++i)
                tree[size_t(below_first + i)].parent = level_first + i / barrier_fan_in;
        if (nodes == 1) break;
        below_first = level_first;
        level_first += nodes;
        arrivals = nodes;
    }
    barrier_tree_ = std::move(tree);
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    work_ready_.notify_all();
    for (auto &w : workers_) w.join();
}

void thread_pool::resize(int n_threads) {
    WEFT_ASSERT(n_threads >= 1);
    if (n_threads > int(workers_.size()) + 1) start_workers(n_threads);
    if (n_threads != n_active_) plan_barrier(n_threads);
    n_active_ = n_threads;
}

void thread_pool::start_workers(int up_to) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int ith = int(workers_.size()) + 1; ith < up_to; ++ith) {
        workers_.emplace_back([this, ith, generation = job_generation_] { worker_main(ith, generation); });
        ++threads_started_;
    }
}

// seen_generation: the generation at the worker's start (read by the starting thread, so a run()
// issued before the worker is scheduled is not missed).
void thread_pool::worker_main(int ith, uint64_t seen_generation) {
    pin_thread_to_node(ith);
    for (;;) {
        const std::function<void(int)> *job = nullptr;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            work_ready_.wait(lock, [&] { return stopping_ || job_generation_ != seen_generation; });
            if (stopping_) return;
            seen_generation = job_generation_;
            if (ith >= job_threads_) continue;  // not used by this run
            job = job_;
        }
        (*job)(ith);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (--workers_busy_ == 0) work_done_.notify_one();
        }
    }
}

void thread_pool::run(const std::function<void(int)> &job) {
    // the caller is thread 0: on its node under --numa (once per calling thread)
    thread_local bool caller_pinned = false;
    if (!caller_pinned && !current_numa().nodes.empty()) {
        pin_thread_to_node(0);
        caller_pinned = true;
    }
    if (n_active_ == 1) {
        job(0);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &job;
        job_threads_ = n_active_;
        workers_busy_ = n_active_ - 1;
        ++job_generation_;
    }
    work_ready_.notify_all();
    job(0);
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, [&] { return workers_busy_ == 0; });
    job_ = nullptr;
}

void thread_pool::barrier(int ith) {
    if (n_active_ == 1) return;
    const uint64_t phase = barrier_phase_.load(std::memory_order_acquire);
    // climb while this thread is the last at its node (acq_rel: the last one sees every write made
    // before the others arrived, and passes them up)
    int node = ith / barrier_fan_in;
    for (;;) {
        barrier_node &at = barrier_tree_[size_t(node)];
        if (at.arrived.fetch_add(1, std::memory_order_acq_rel) != at.expected - 1) break;
        // nobody arrives here again before the phase moves on: reset for the next barrier
        at.arrived.store(0, std::memory_order_relaxed);
        if (at.parent < 0) {
            barrier_phase_.fetch_add(1, std::memory_order_release);
            barrier_phase_.notify_all();
            return;
        }
        node = at.parent;
    }
    for (int spins = 0; spins < barrier_spins; ++spins) {
        if (barrier_phase_.load(std::memory_order_acquire) != phase) return;
        cpu_relax();
    }
    // then sleep until the phase moves on (wait returns at once if it already has)
    while (barrier_phase_.load(std::memory_order_acquire) == phase)
        barrier_phase_.wait(phase, std::memory_order_acquire);
}

}  // namespace weft::cpu
