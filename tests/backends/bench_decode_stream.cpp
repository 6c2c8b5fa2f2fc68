// tests/backends/bench_decode_stream.cpp — the decode (one-column) product streaming weights from
// memory: a model's worth of repacked matrices (a 1.1B llama's layers: 2048x2048 twice, 2048->5632
// twice, 5632->2048, repeated until the q8_0 weights reach --gib), each product split between the
// threads as the runtime splits it (a contiguous share of the row groups each, a barrier after each
// product), for the interleaved q8_0 / q4_0 layouts and the f16 int16 layout. Prints the weight bytes
// streamed per second (best pass and median), next to the machine's read bandwidth probe
// (cpu_read_bandwidth) at the same thread count. Decode is memory-bound, so this is the ceiling of
// tg for a weight type without the model's noise (the whole-model tg on this VM moves 20-30% between
// runs of one binary). Every kernel's result on the first matrix of each shape is checked bit for bit
// against its scalar kernel. Not a test: ctest runs it once, tiny, to keep it building and agreeing.
//
// Columns: the best and the median pass by the wall clock; the best pass by the threads' CPU time in
// the products (bytes over the mean thread's seconds: time a thread waits descheduled is not
// counted); "fastest-each": every product's fastest pass (barrier to barrier) summed — the steadiest
// on a busy machine. --compare alternates the passes between the groups kernel on chunks of 4 groups
// (what mul_mat calls) and the group kernel on one group after the other, so both see the same load.
//
//   bench_decode_stream [--types q8_0,q4_0,f16] [--threads 1,2] [--gib 1] [--passes 7] [--compare]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backends/bench_testing.h"
#include "backends/cpu/f16_int16_mm.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/interleaved.h"
#include "backends/cpu/partition.h"
#include "backends/interleaved_testing.h"
#include "weft/backends/cpu.h"
#include "weft/core/fp16.h"
#include "weft/core/tensor.h"
#include "weft/core/type.h"

namespace {

using namespace weft;

// A fast generator for a gigabyte of weights (mt19937 would take longer than the benchmark).
struct xorshift {
    uint64_t s;
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
};

size_t pad64(size_t bytes) {  // each matrix on its own cache lines, as the runtime places them
    return (bytes + 63) / 64 * 64;
}

struct shape {
    int64_t k, m;
};
// One layer of a 1.1B llama (TinyLlama): attention q and o, ffn gate and up, ffn down.
constexpr shape layer_shapes[] = {{2048, 2048}, {2048, 2048}, {2048, 5632}, {2048, 5632}, {5632, 2048}};

// Random plain rows of t: q8_0 / q4_0 blocks of random quants with scales 2^-7 .. 2^-5; f16 values of
// magnitude 2^-5 .. 2^-3 (no infinities or NaNs).
std::vector<uint8_t> random_plain(const tensor &t, xorshift &rng) {
    std::vector<uint8_t> plain(t.nbytes());
    for (size_t i = 0; i + 8 <= plain.size(); i += 8) {
        const uint64_t v = rng.next();
        std::memcpy(&plain[i], &v, 8);
    }
    if (t.type == dtype::f16) {
        for (size_t i = 0; i < plain.size(); i += 2) {
            const uint16_t h = uint16_t((plain[i] | (plain[i + 1] << 8)) & 0x87FF) | 0x2800;
            std::memcpy(&plain[i], &h, 2);
        }
        return plain;
    }
    const size_t block = type_traits(t.type).type_size;
    for (size_t at = 0; at < plain.size(); at += block) {
        const fp16_t d = fp32_to_fp16(0.0078125f * float(1 + (plain[at] & 3)));
        std::memcpy(&plain[at], &d, sizeof d);
    }
    return plain;
}

// A repacked matrix inside the benchmark's weight memory.
struct packed_matrix {
    tensor t;
    const uint8_t *data = nullptr;
    size_t bytes = 0;
    int64_t groups = 0;
    size_t group_bytes = 0;
};

// One column's activations for every k of the shapes, in both formats.
struct column {
    test::quantized_columns q8;
    std::vector<uint32_t> int16_panel;
};

column make_column(int64_t k, uint32_t seed) {
    column c;
    c.q8 = test::quantize_columns(cpu::q8_format::q8_0_block_sums, k, 1, seed);
    std::vector<float> x(static_cast<size_t>(k));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto &v : x) v = dist(rng);
    c.int16_panel.resize(cpu::int16_panel_bytes(k, 1) / sizeof(uint32_t));
    cpu::quantize_int16_column(x.data(), k, 0, 1, c.int16_panel.data());
    return c;
}

// How a thread computes its share of an interleaved product: the groups kernel on chunks of 4 groups
// (what ops_mul_mat.cpp calls: plan_chunks' chunks, 4 groups for these shapes at 1-2 threads), or
// the group kernel on one group after the other (the call before the groups kernel).
enum class call { groups_kernel, group_by_group };
constexpr int64_t groups_per_chunk = 4;

// Groups [g0, g1) of matrix w against its column into out (m floats), with the given kernels.
void product(const packed_matrix &w, const column &x, int64_t g0, int64_t g1, float *out, call how,
             cpu::groups_kernel_fn kernel, cpu::int16_group_fn int16_kernel) {
    const int64_t m = w.t.ne[1];
    if (w.t.type == dtype::f16) {
        if (g1 > g0)
            int16_kernel(reinterpret_cast<const char *>(w.data) + size_t(g0) * w.group_bytes, w.group_bytes,
                         g1 - g0, w.t.ne[0], x.int16_panel.data(), 1, 1, out + g0 * cpu::int16_rows,
                         size_t(m));
        return;
    }
    const auto &layout = *cpu::interleaved_layout_of(w.t);
    const int64_t per_call = how == call::groups_kernel ? groups_per_chunk : 1;
    for (int64_t g = g0; g < g1; g += per_call)
        kernel(layout, w.data + size_t(g) * w.group_bytes, w.group_bytes, std::min(per_call, g1 - g),
               x.q8.rows, 0, 1, out + g * cpu::interleave_rows, m);
}

// A barrier for a few spinning threads (the runtime's threads spin between nodes too).
class spin_barrier {
  public:
    explicit spin_barrier(int n) : n_(n) {}
    void wait() {
        const int phase = phase_.load(std::memory_order_acquire);
        if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
            arrived_.store(0, std::memory_order_relaxed);
            phase_.store(phase + 1, std::memory_order_release);
            return;
        }
        while (phase_.load(std::memory_order_acquire) == phase) std::this_thread::yield();
    }

  private:
    const int n_;
    std::atomic<int> arrived_{0}, phase_{0};
};

// The GB/s of weight bytes one way of calling streamed.
struct result {
    std::vector<double> seconds;  // each pass, wall clock
    double cpu_gbs = 0;           // the threads' CPU time in the products, the best pass
    std::vector<double> fastest;  // each product's fastest pass, barrier to barrier
};

// Streams every matrix once per pass on n_threads threads, the passes taking the ways of calling
// in turn (so every way sees the same load on a busy machine); one result per way.
std::vector<result> stream(const std::vector<packed_matrix> &ws, const std::vector<const column *> &xs,
                           int n_threads, int passes, const std::vector<call> &ways) {
    const cpu::groups_kernel_fn groups_kernel = cpu::best_groups_kernel();
    const cpu::groups_kernel_fn group_by_group =
        [](const cpu::interleaved_layout &l, const uint8_t *groups, size_t stride, int64_t n,
           const cpu::q8_rows &a, int64_t c0, int64_t n_cols, float *dst, int64_t dst_stride) {
            cpu::best_group_kernel()(l, groups, a, c0, n_cols, dst, dst_stride);
            (void)stride;
            (void)n;
        };
    const cpu::int16_group_fn int16_kernel = cpu::best_int16_groups();
    int64_t max_m = 0;
    for (const auto &w : ws) max_m = std::max(max_m, w.t.ne[1]);
    std::vector<std::vector<float>> outs(static_cast<size_t>(n_threads),
                                         std::vector<float>(static_cast<size_t>(max_m)));
    spin_barrier barrier(n_threads);
    std::vector<result> results(ways.size());
    for (auto &r : results) r.fastest.assign(ws.size(), 1e30);
    // cpu[t]: thread t's CPU seconds in the products of the current pass
    std::vector<double> cpu(static_cast<size_t>(n_threads));
    auto work = [&](int t) {
        for (int pass = 0; pass < passes; ++pass) {
            const size_t way = size_t(pass) % ways.size();
            result &r = results[way];
            barrier.wait();
            const auto t0 = std::chrono::steady_clock::now();
            double in_products = 0;
            auto before = t0;
            for (size_t i = 0; i < ws.size(); ++i) {
                const cpu::index_range share = cpu::split_range(ws[i].groups, t, n_threads);
                const double c0 = test::thread_seconds();
                product(ws[i], *xs[i], share.begin, share.end, outs[size_t(t)].data(), ways[way],
                        ways[way] == call::groups_kernel ? groups_kernel : group_by_group, int16_kernel);
                in_products += test::thread_seconds() - c0;
                barrier.wait();
                if (t == 0) {
                    const auto after = std::chrono::steady_clock::now();
                    r.fastest[i] =
                        std::min(r.fastest[i], std::chrono::duration<double>(after - before).count());
                    before = after;
                }
            }
            cpu[size_t(t)] = in_products;
            barrier.wait();
            if (t == 0) {
                r.seconds.push_back(
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
                double sum = 0;
                for (double s : cpu) sum += s;
                size_t bytes = 0;
                for (const auto &w : ws) bytes += w.bytes;
                r.cpu_gbs = std::max(r.cpu_gbs, double(bytes) / (sum / n_threads) / 1e9);
            }
        }
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < n_threads; ++t) threads.emplace_back(work, t);
    work(0);
    for (auto &th : threads) th.join();
    return results;
}

// The first matrix of each shape against the scalar kernels, bit for bit.
bool agrees_with_scalar(const std::vector<packed_matrix> &ws, const std::vector<const column *> &xs) {
    const cpu::groups_kernel_fn scalar = cpu::groups_kernel_at(cpu::simd_level::scalar);
    for (size_t i = 0; i < std::min(ws.size(), std::size(layer_shapes)); ++i) {
        std::vector<float> want(size_t(ws[i].t.ne[1])), got(want.size());
        product(ws[i], *xs[i], 0, ws[i].groups, want.data(), call::groups_kernel, scalar,
                cpu::int16_groups_scalar);
        product(ws[i], *xs[i], 0, ws[i].groups, got.data(), call::groups_kernel, cpu::best_groups_kernel(),
                cpu::best_int16_groups());
        if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) return false;
    }
    return true;
}

// Builds `layers` layers of `type` in one block of host memory (huge pages where there are), times
// them on each thread count. 0 when a kernel disagrees with its scalar one.
int run(dtype type, int layers, const std::vector<int> &thread_counts, int passes, bool compare,
        const std::vector<column> &columns_2048_5632) {
    std::vector<tensor> ts;
    size_t total = 0;
    for (int l = 0; l < layers; ++l)
        for (const shape &s : layer_shapes) {
            ts.push_back(test::plain_matrix(type, s.k, s.m));
            const size_t bytes =
                type == dtype::f16 ? cpu::f16_int16_size(ts.back()) : cpu::interleaved_size(ts.back());
            total += pad64(bytes);
        }
    const cpu::host_block memory(total, "benchmark weights");
    std::vector<packed_matrix> ws;
    std::vector<const column *> xs;
    xorshift rng{0x9E3779B97F4A7C15ull};
    size_t at = 0;
    for (tensor &t : ts) {
        const std::vector<uint8_t> plain = random_plain(t, rng);
        packed_matrix w;
        auto *dst = reinterpret_cast<uint8_t *>(memory.data() + at);
        if (type == dtype::f16) {
            cpu::group_f16_int16(t, plain.data(), dst);
            cpu::mark_f16_int16(t);
            w.bytes = cpu::f16_int16_size(t);
            w.groups = t.ne[1] / cpu::int16_rows;
        } else {
            w.bytes = cpu::interleaved_size(t);
            cpu::interleave_tensor(t, plain.data(), dst);
            w.groups = t.ne[1] / cpu::interleave_rows;
        }
        w.t = t;
        w.data = dst;
        w.group_bytes = w.bytes / size_t(w.groups);
        ws.push_back(w);
        xs.push_back(&columns_2048_5632[t.ne[0] == 2048 ? 0 : 1]);
        at += pad64(w.bytes);
    }
    if (!agrees_with_scalar(ws, xs)) {
        std::fprintf(stderr, "%s: the SIMD kernel differs from the scalar one\n", type_name(type));
        return 0;
    }
    size_t bytes = 0;
    for (const auto &w : ws) bytes += w.bytes;
    std::vector<call> ways = {call::groups_kernel};
    if (compare && type != dtype::f16) ways.push_back(call::group_by_group);
    for (int n : thread_counts) {
        const std::vector<result> results = stream(ws, xs, n, passes, ways);
        // the probe over as many bytes as the weights (from 256 MiB, beyond any cache, to 1 GiB)
        const double probe =
            cpu_read_bandwidth(n, std::clamp(bytes, size_t(256) << 20, size_t(1) << 30), passes) / 1e9;
        for (size_t way = 0; way < ways.size(); ++way) {
            const result &r = results[way];
            std::vector<double> seconds = r.seconds;
            std::sort(seconds.begin(), seconds.end());
            double sum_fastest = 0;
            for (double f : r.fastest) sum_fastest += f;
            const double best = double(bytes) / seconds.front() / 1e9;
            std::printf("| %s | %s | %d | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                        type == dtype::f16 ? "f16 (int16)" : type_name(type),
                        type == dtype::f16                 ? "int16 groups"
                        : ways[way] == call::groups_kernel ? "groups kernel"
                                                           : "group by group",
                        n, double(bytes) / double(1ull << 30), best,
                        double(bytes) / seconds[seconds.size() / 2] / 1e9, r.cpu_gbs,
                        double(bytes) / sum_fastest / 1e9, probe);
        }
        std::fflush(stdout);
    }
    return 1;
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<std::string> types = {"q8_0", "q4_0", "f16"};
    std::vector<int> thread_counts = {1, 2};
    double gib = 1.0;
    int passes = 7, layers = 0;
    bool compare = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view flag = argv[i];
        if (flag == "--compare") {
            compare = true;
            continue;
        }
        if (i + 1 == argc) {
            std::fprintf(stderr, "%s needs a value\n", argv[i]);
            return 2;
        }
        ++i;
        if (flag == "--types") {
            types = test::split_list(argv[i]);
        } else if (flag == "--threads") {
            thread_counts.clear();
            for (const std::string &s : test::split_list(argv[i]))
                thread_counts.push_back(std::atoi(s.c_str()));
        } else if (flag == "--gib") {
            gib = std::atof(argv[i]);
        } else if (flag == "--layers") {
            layers = std::atoi(argv[i]);
        } else if (flag == "--passes") {
            passes = std::atoi(argv[i]);
        } else {
            std::fprintf(stderr,
                         "unknown option %s (--types, --threads, --gib, --layers, --passes, --compare)\n",
                         argv[i - 1]);
            return 2;
        }
    }
    if (passes < 1 || gib <= 0 ||
        std::any_of(thread_counts.begin(), thread_counts.end(), [](int n) { return n < 1 || n > 256; })) {
        std::fprintf(stderr, "--passes must be >= 1, --gib > 0 and --threads 1..256\n");
        return 2;
    }
    if (layers <= 0) {  // enough layers for --gib of q8_0 weights
        double layer_bytes = 0;
        for (const shape &s : layer_shapes) layer_bytes += double(s.k * s.m) * 34.0 / 32.0;
        layers = std::max(1, int(gib * double(1ull << 30) / layer_bytes + 0.5));
    }
    std::vector<column> columns;
    columns.push_back(make_column(2048, 1));
    columns.push_back(make_column(5632, 2));
    std::printf("%d layers of 2048x2048 x2, 2048x5632 x2, 5632x2048; one column (decode)\n\n", layers);
    std::printf(
        "| weights | calls | threads | GiB | best pass GB/s | median pass GB/s | CPU-time GB/s | "
        "fastest-each GB/s "
        "| read probe GB/s |\n");
    std::printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");

    int failures = 0;
    for (const std::string &name : types) {
        const auto type = weft::type_from_name(name);
        if (!type || (*type != dtype::q8_0 && *type != dtype::q4_0 && *type != dtype::f16 &&
                      !cpu::can_interleave(test::plain_matrix(*type, 2048, 2048)))) {
            std::fprintf(stderr, "unsupported type %s (an interleaved type, or f16)\n", name.c_str());
            return 2;
        }
        if (run(*type, layers, thread_counts, passes, compare, columns) == 0) ++failures;
    }
    return failures == 0 ? 0 : 1;
}
