// src/backends/cpu/bandwidth.cpp — the machine's memory read bandwidth, measured with the widest
// loads the CPU has on every requested thread (the ceiling a memory-bound decode can reach).
#include "backends/cpu/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "backends/cpu/host_memory.h"
#include "backends/cpu/simd_level.h"
#include "weft/backends/cpu.h"
#include "weft/core/error.h"

namespace weft::cpu {

uint64_t read_all_scalar(const void *p, size_t n) {
    const auto *v = static_cast<const uint64_t *>(p);
    uint64_t s[8] = {};
    for (size_t i = 0; i < n / 8; i += 8)
        for (int j = 0; j < 8; ++j) s[j] ^= v[i + size_t(j)];
    return s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

}  // namespace weft::cpu

namespace weft {

double cpu_read_bandwidth(int n_threads, size_t bytes, int passes) {
    if (n_threads < 1) throw error("[cpu] bandwidth probe: n_threads is " + std::to_string(n_threads));
    const size_t share = std::max<size_t>(bytes / size_t(n_threads) / 512 * 512, 512);
    const size_t total = share * size_t(n_threads);
    // the same memory as the weights' (huge pages where the kernel has them): the probe measures
    // what the kernels can reach
    const cpu::host_block buf(total, "bandwidth probe memory");
    using read_fn = uint64_t (*)(const void *, size_t);
    const read_fn read_all =
        cpu::best_of<read_fn>({cpu::read_all_scalar, cpu::read_all_avx2, cpu::read_all_avx512});

    std::vector<uint64_t> sinks(size_t(n_threads) * 8);
    auto on_every_thread = [&](auto &&fn) {
        std::vector<std::thread> workers;
        for (int t = 0; t < n_threads; ++t) workers.emplace_back([&, t] { fn(t); });
        for (auto &w : workers) w.join();
    };
    // first touch from the threads that read, so pages are placed near them
    on_every_thread([&](int t) { std::memset(buf.data() + size_t(t) * share, t + 1, share); });
    double best = 0.0;
    for (int pass = 0; pass < passes; ++pass) {
        const auto t0 = std::chrono::steady_clock::now();
        on_every_thread(
            [&](int t) { sinks[size_t(t) * 8] ^= read_all(buf.data() + size_t(t) * share, share); });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, double(total) / s);
    }
    volatile uint64_t keep = 0;
    for (uint64_t x : sinks) keep = keep ^ x;
    return best;
}

}  // namespace weft
