// src/backends/cpu/thread_pool.cpp — worker lifecycle, run dispatch and the barrier (spin, then sleep).
#include "backends/cpu/thread_pool.h"

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

void thread_pool::barrier() {
    if (n_active_ == 1) return;
    const uint64_t phase = barrier_phase_.load(std::memory_order_acquire);
    if (barrier_arrived_.fetch_add(1, std::memory_order_acq_rel) == n_active_ - 1) {
        barrier_arrived_.store(0, std::memory_order_relaxed);
        barrier_phase_.fetch_add(1, std::memory_order_release);
        barrier_phase_.notify_all();
        return;
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
