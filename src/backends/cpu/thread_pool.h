// src/backends/cpu/thread_pool.h — the CPU backend's persistent worker threads and their barrier.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace weft::cpu {

// Workers are started once and never joined until the pool goes away: the pool only grows, and
// a run uses the first size() threads (the caller of run() is thread 0). Between runs the workers
// sleep on a condition variable; inside a run, barrier() spins briefly and then sleeps on the
// barrier word (the machine may have fewer cores than threads, or another process may need them).
//
// The barrier is a tree: threads arrive in groups of barrier_fan_in consecutive threads, each group
// counting on a cache line of its own; the last thread of a group arrives at the group's parent (a
// group of groups), and the last thread at the root advances the phase, which releases everyone.
// With one shared counter every arrival was an atomic add on one cache line that all threads
// fought over (~50–150 ns apiece across a socket: 5–10 µs per barrier at 64 threads); in the tree
// a line sees at most barrier_fan_in arrivals, and 64 threads pass two levels. Up to
// barrier_fan_in threads the tree is one node: the shared counter it replaces.
class thread_pool {
  public:
    explicit thread_pool(int n_threads);
    ~thread_pool();
    thread_pool(const thread_pool &) = delete;
    thread_pool &operator=(const thread_pool &) = delete;

    // Threads a run uses.
    int size() const { return n_active_; }
    // Uses n threads from the next run on; starts workers only when more are needed than ever before.
    void resize(int n_threads);
    // Calls job(ith) on every active thread (the caller is ith 0) and returns once all have returned.
    void run(const std::function<void(int ith)> &job);
    // All active threads wait here until the last one arrives; ith: the caller's thread (as run()
    // passed it). Only valid inside run().
    void barrier(int ith);
    // Workers started over the pool's life: a health figure that must not grow per graph.
    int64_t threads_started() const { return threads_started_; }

    // Threads that count on one cache line of the barrier (consecutive threads: those pinned to
    // neighbouring cores, which share a cache).
    static constexpr int barrier_fan_in = 8;
    // Nodes of the barrier tree for n threads (1 up to barrier_fan_in threads).
    static int barrier_nodes(int n_threads);

  private:
    void start_workers(int up_to);
    void worker_main(int ith, uint64_t seen_generation);

    int n_active_ = 1;
    std::vector<std::thread> workers_;  // thread ith is workers_[ith - 1]
    int64_t threads_started_ = 0;

    std::mutex mutex_;
    std::condition_variable work_ready_;
    std::condition_variable work_done_;
    const std::function<void(int)> *job_ = nullptr;
    uint64_t job_generation_ = 0;  // bumped per run(); a worker runs each generation once
    int job_threads_ = 1;          // the active count of the current run
    int workers_busy_ = 0;
    bool stopping_ = false;

    void plan_barrier(int n_threads);

    // barrier state: a node's last thread resets its count and goes on to the parent; the root's
    // last advances the phase
    struct alignas(64) barrier_node {
        std::atomic<int> arrived{0};
        int expected = 0;  // threads (level 0) or child nodes arriving here
        int parent = -1;   // -1: the root
    };
    std::vector<barrier_node> barrier_tree_;  // level 0 first (node of thread ith: ith / fan-in), root last
    alignas(64) std::atomic<uint64_t> barrier_phase_{0};
};

}  // namespace weft::cpu
