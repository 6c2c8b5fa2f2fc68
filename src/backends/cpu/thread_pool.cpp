// src/backends/cpu/thread_pool.cpp — worker lifecycle, run dispatch and the spinning barrier.
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
}  // namespace

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads) {
    WEFT_ASSERT(n_threads >= 1);
    start_workers();
}

thread_pool::~thread_pool() {
    stop_workers();
}

void thread_pool::resize(int n_threads) {
    WEFT_ASSERT(n_threads >= 1);
    if (n_threads == n_threads_) return;
    stop_workers();
    n_threads_ = n_threads;
    start_workers();
}

void thread_pool::start_workers() {
    stopping_ = false;
    workers_.reserve(size_t(n_threads_ - 1));
    for (int ith = 1; ith < n_threads_; ++ith) {
        workers_.emplace_back([this, ith, generation = job_generation_] { worker_main(ith, generation); });
        ++threads_started_;
    }
}

void thread_pool::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    work_ready_.notify_all();
    for (auto &w : workers_) w.join();
    workers_.clear();
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
    if (n_threads_ == 1) {
        job(0);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &job;
        workers_busy_ = n_threads_ - 1;
        ++job_generation_;
    }
    work_ready_.notify_all();
    job(0);
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, [&] { return workers_busy_ == 0; });
    job_ = nullptr;
}

void thread_pool::barrier() {
    if (n_threads_ == 1) return;
    const uint64_t phase = barrier_phase_.load(std::memory_order_acquire);
    if (barrier_arrived_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
        barrier_arrived_.store(0, std::memory_order_relaxed);
        barrier_phase_.fetch_add(1, std::memory_order_release);
        return;
    }
    // Spin a little (a node's threads usually finish close together), then give the core away.
    for (int spins = 0; barrier_phase_.load(std::memory_order_acquire) == phase; ++spins) {
        if (spins < 2000)
            cpu_relax();
        else
            std::this_thread::yield();
    }
}

}  // namespace weft::cpu
