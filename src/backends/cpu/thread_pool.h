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
    // All active threads wait here until the last one arrives. Only valid inside run().
    void barrier();
    // Workers started over the pool's life: a health figure that must not grow per graph.
    int64_t threads_started() const { return threads_started_; }

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

    // barrier state: the last thread to arrive resets the count and advances the phase
    alignas(64) std::atomic<int> barrier_arrived_{0};
    alignas(64) std::atomic<uint64_t> barrier_phase_{0};
};

}  // namespace weft::cpu
