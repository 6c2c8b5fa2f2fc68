// tests/backends/bench_group_kernel.cpp — the interleaved group kernel alone: cycles per 64
// multiply-adds (one vpdpbusd's worth) for a weight type, a row count and column counts, with the
// weights and activations in cache unless the rows say otherwise. A tool for kernel work (the model
// benchmarks move ±10-30% with this machine's memory bandwidth; this measures the arithmetic);
// every result is also checked bit for bit against the scalar kernel. Times are this thread's CPU
// time (clock and kernels alike), so other processes sharing the cores slow neither side of the
// ratio. Not a test: ctest runs it once, briefly, to keep it building and agreeing. bf16 runs the
// float groups' vdpbf16ps kernel (float_mm.h) instead, on activations rounded and packed into
// panels as mul_mat packs them, called as mul_mat calls it (4 groups over 48-column passes); f16
// runs the int16 kernel (f16_int16_mm.h) the same way, on weights repacked as at load and columns
// quantized into panels as mul_mat quantizes them, and prints (stderr) the time of that quantization
// against the product's (in passes of --pass columns, 48 without it). --pass P (P > 0) calls the
// interleaved types' groups kernel as mul_mat does (compute_mul_mat_shared: chunks of 4 groups, each
// in passes of P columns, so the weights of a chunk are read once a pass and a pass's activations stay
// in cache); without it, each group takes all the columns at once (at hundreds of columns their
// activations no longer fit in L2).
//
//   bench_group_kernel [--types q8_0,q4_0,bf16,f16] [--k 512] [--rows 256] [--cols 1,3,4,16] [--ms 300]
//                      [--pass 16]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backends/bench_testing.h"
#include "backends/cpu/f16_int16_mm.h"
#include "backends/cpu/float_mm.h"
#include "backends/cpu/interleaved.h"
#include "backends/cpu/simd_level.h"
#include "backends/interleaved_testing.h"
#include "weft/core/fp16.h"
#include "weft/core/tensor.h"
#include "weft/core/type.h"
#include "weft/quant/quant.h"

namespace {

using namespace weft;

// The clock of this core, from a chain of dependent adds (one a cycle on every x86 core since the
// P6); elsewhere 0 (then only GMAC/s are printed).
double measured_ghz() {
#if defined(__x86_64__)
    uint64_t x = 0;
    const int64_t n = 200000000;
    const double t0 = test::thread_seconds();
    for (int64_t i = 0; i < n; ++i)
        asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
    const double s = test::thread_seconds() - t0;
    return 4.0 * double(n) / s / 1e9;
#else
    return 0.0;
#endif
}

// Prints a row of the table: `macs` multiply-adds in `seconds` of this thread.
void print_row(dtype type, int64_t k, int64_t rows, int64_t n, double macs, double seconds, double ghz) {
    const double per_64 = ghz > 0 ? seconds * ghz * 1e9 / (macs / 64.0) : 0.0;
    std::printf("| %s | %lld | %lld | %lld | %.2f | %.1f |\n", type_name(type), static_cast<long long>(k),
                static_cast<long long>(rows), static_cast<long long>(n), per_64, macs / seconds / 1e9);
}

// Calls all(out) until `ms` of this thread's time have passed; returns the seconds and the calls.
template <class All>
double time_calls(double ms, All all, int64_t &calls) {
    calls = 0;
    const double t0 = test::thread_seconds();
    double seconds = 0;
    // calls between clock readings: the clock takes a system call here, as long as a small product
    constexpr int per_reading = 16;
    do {
        for (int i = 0; i < per_reading; ++i) all();
        calls += per_reading;
        seconds = test::thread_seconds() - t0;
    } while (seconds * 1000.0 < ms);
    return seconds;
}

// all_groups(kernel, out) computes every result of the product into out: the scalar kernel's results
// and the best kernel's must be the same bits (else a message and 0), then the best kernel is timed
// and its row printed; returns its seconds per call.
template <class Kernel, class All>
double check_and_time(dtype type, int64_t k, int64_t rows, int64_t n, double ms, double ghz, Kernel scalar,
                      Kernel best, All all_groups) {
    std::vector<float> out(size_t(rows * n)), want(size_t(rows * n));
    all_groups(scalar, want.data());
    all_groups(best, out.data());
    if (std::memcmp(out.data(), want.data(), out.size() * sizeof(float)) != 0) {
        std::fprintf(stderr, "%s, %lld columns: the SIMD kernel differs from the scalar one\n",
                     type_name(type), static_cast<long long>(n));
        return 0;
    }
    int64_t calls = 0;
    const double seconds = time_calls(
        ms, [&] { all_groups(best, out.data()); }, calls);
    print_row(type, k, rows, n, double(calls) * double(rows) * double(k) * double(n), seconds, ghz);
    return seconds / double(calls);
}

// bf16: the grouped weights' kernel (float_mm.h) over a [k, rows] matrix against n columns rounded
// to bf16 pairs in panels; 0 when the results differ from the scalar kernel's.
int run_bf16_groups(int64_t k, int64_t rows, int64_t n, double ms, double ghz) {
    std::mt19937 rng(uint32_t(rows * 131 + n));
    std::normal_distribution<float> normal;
    tensor a = test::plain_matrix(dtype::bf16, k, rows);
    std::vector<bf16_t> plain(size_t(k * rows));
    for (auto &v : plain) v = fp32_to_bf16(normal(rng));
    std::vector<uint8_t> grouped(a.nbytes());
    cpu::group_float_tensor(a, plain.data(), grouped.data());
    // the columns as mul_mat packs them: each rounded to pairs, then transposed into its panel (a
    // single column is its own panel of width 1)
    const int64_t width = n == 1 ? 1 : cpu::float_panel_width, kp = k / 2, panels = (n + width - 1) / width;
    std::vector<float> columns(size_t(k * n));
    for (auto &v : columns) v = normal(rng);
    std::vector<uint32_t> panel_words(size_t(panels * width * kp)), column_pairs(size_t(width * kp));
    const cpu::round_pairs_fn round_pairs = cpu::best_round_to_bf16_pairs();
    const cpu::pack_panel_fn pack = cpu::best_pack_panel();
    for (int64_t p = 0; p < panels; ++p) {
        const int64_t c0 = p * width, in_panel = std::min(width, n - c0);
        const float *pairs[cpu::float_panel_width];
        for (int64_t j = 0; j < in_panel; ++j) {
            round_pairs(columns.data() + (c0 + j) * k, k, column_pairs.data() + j * kp);
            pairs[j] = reinterpret_cast<const float *>(column_pairs.data() + j * kp);
        }
        pack(pairs, in_panel, kp, width,
             reinterpret_cast<float *>(panel_words.data() + cpu::panel_index(0, c0, kp, width)));
    }
    const auto *x = reinterpret_cast<const float *>(panel_words.data());
    const size_t group_bytes = size_t(k) * cpu::float_group_rows * sizeof(bf16_t);
    const int64_t groups = rows / cpu::float_group_rows;
    constexpr int64_t groups_per_call = 4, pass = 2 * cpu::float_panel_width;
    auto all_groups = [&](cpu::float_group_fn f, float *to) {
        for (int64_t g = 0; g < groups; g += groups_per_call)
            for (int64_t c0 = 0; c0 < n; c0 += pass)
                f(dtype::bf16, reinterpret_cast<const char *>(grouped.data()) + size_t(g) * group_bytes,
                  group_bytes, std::min(groups_per_call, groups - g), k,
                  x + cpu::panel_index(0, c0, kp, width), width, std::min(pass, n - c0),
                  to + c0 * rows + g * cpu::float_group_rows, size_t(rows));
    };
    return check_and_time(dtype::bf16, k, rows, n, ms, ghz, cpu::float_group_fn(cpu::float_groups_scalar),
                          cpu::best_float_groups(), all_groups) > 0
               ? 1
               : 0;
}

// f16: the int16 kernel (f16_int16_mm.h) over a [k, rows] matrix repacked as at load, against n
// columns quantized into panels as mul_mat quantizes them; 0 when the results differ from the scalar
// kernel's.
int run_f16_int16(int64_t k, int64_t rows, int64_t n, int64_t pass_cols, double ms, double ghz) {
    std::mt19937 rng(uint32_t(rows * 131 + n));
    std::normal_distribution<float> normal;
    tensor a = test::plain_matrix(dtype::f16, k, rows);
    std::vector<fp16_t> plain(size_t(k * rows));
    for (auto &v : plain) v = fp32_to_fp16(normal(rng));
    std::vector<char> grouped(cpu::f16_int16_size(a));
    cpu::group_f16_int16(a, plain.data(), grouped.data());
    const int64_t width = n == 1 ? 1 : cpu::int16_panel_width, panels = (n + width - 1) / width;
    const size_t panel_words = cpu::int16_panel_bytes(k, width) / sizeof(uint32_t);
    std::vector<float> columns(size_t(k * n));
    for (auto &v : columns) v = normal(rng);
    std::vector<uint32_t> x(size_t(panels) * panel_words),
        scratch(size_t(width) * cpu::int16_panel_bytes(k, 1) / 4);
    const cpu::quantize_int16_fn quantize = cpu::best_quantize_int16();
    auto quantize_all = [&] {  // as mul_mat: each column quantized, then a panel's columns transposed
        const size_t column_words = cpu::int16_panel_bytes(k, 1) / sizeof(uint32_t);
        const uint32_t *in_panel[cpu::int16_panel_width];
        for (int64_t p = 0; p < panels; ++p) {
            const int64_t c0 = p * width, count = std::min(width, n - c0);
            uint32_t *to = x.data() + size_t(p) * panel_words;
            for (int64_t j = 0; j < count; ++j) {
                uint32_t *column = width == 1 ? to : scratch.data() + size_t(j) * column_words;
                quantize(columns.data() + (c0 + j) * k, k, column);
                in_panel[j] = column;
            }
            if (width > 1) cpu::pack_int16_panel(in_panel, count, k, width, to);
        }
    };
    quantize_all();
    const size_t group_bytes = cpu::f16_int16_group_bytes(k);
    const int64_t groups = rows / cpu::int16_rows;
    constexpr int64_t groups_per_call = 4;
    const int64_t pass = pass_cols > 0 ? pass_cols : 2 * cpu::int16_panel_width;
    auto all_groups = [&](cpu::int16_group_fn f, float *to) {
        for (int64_t g = 0; g < groups; g += groups_per_call)
            for (int64_t c0 = 0; c0 < n; c0 += pass)
                f(grouped.data() + size_t(g) * group_bytes, group_bytes,
                  std::min(groups_per_call, groups - g), k, x.data() + size_t(c0 / width) * panel_words,
                  width, std::min(pass, n - c0), to + c0 * rows + g * cpu::int16_rows, size_t(rows));
    };
    const double product_each =
        check_and_time(dtype::f16, k, rows, n, ms, ghz, cpu::int16_group_fn(cpu::int16_groups_scalar),
                       cpu::best_int16_groups(), all_groups);
    if (product_each == 0) return 0;
    int64_t quantizations = 0;
    constexpr int repeats = 32;  // per clock reading: the clock takes a system call here
    const double q_seconds = time_calls(
        ms / 4,
        [&] {
            for (int r = 0; r < repeats; ++r) quantize_all();
        },
        quantizations);
    const double q_each = q_seconds / double(quantizations * repeats);
    std::fprintf(stderr,
                 "f16, k %lld, %lld columns: quantizing them %.1f us (%.2f ns a value), %.1f%% of the "
                 "product's time\n",
                 static_cast<long long>(k), static_cast<long long>(n), q_each * 1e6,
                 q_each * 1e9 / double(k * n), 100.0 * q_each / product_each);
    return 1;
}

// Times the best kernel over every group of a [k, rows] matrix of `type` against n columns (pass > 0:
// the groups kernel over chunks of 4 groups in passes of `pass` columns, as mul_mat calls it); 0 when
// the results differ from the scalar kernel's.
int run(dtype type, int64_t k, int64_t rows, int64_t n, int64_t pass, double ms, double ghz) {
    std::mt19937 rng(uint32_t(rows * 131 + n));
    tensor a = test::plain_matrix(type, k, rows);
    std::vector<float> values(size_t(k * rows));
    std::normal_distribution<float> normal;
    for (auto &v : values) v = normal(rng);
    std::vector<float> importance(static_cast<size_t>(k), 1.0f);
    std::vector<uint8_t> plain(a.nb[2]);
    quantize_rows(type, values.data(), plain.data(), rows, k, importance.data());
    if (!cpu::can_interleave(a)) {
        std::fprintf(stderr, "%s: no interleaved layout for k %lld, rows %lld\n", type_name(type),
                     static_cast<long long>(k), static_cast<long long>(rows));
        return 1;
    }
    std::vector<uint8_t> packed(cpu::interleaved_size(a));
    cpu::interleave_tensor(a, plain.data(), packed.data());
    const cpu::interleaved_layout &l = *cpu::interleaved_layout_of(a);
    const test::quantized_columns x =
        test::quantize_columns(cpu::activation_format(l), k, n, uint32_t(rng()));
    const size_t group_bytes = size_t(k / l.block) * l.block_bytes;
    const int64_t groups = rows / cpu::interleave_rows;
    if (pass > 0) {
        constexpr int64_t groups_per_chunk = 4;
        auto all_chunks = [&](cpu::groups_kernel_fn f, float *to) {
            for (int64_t g = 0; g < groups; g += groups_per_chunk)
                for (int64_t c0 = 0; c0 < n; c0 += pass)
                    f(l, packed.data() + size_t(g) * group_bytes, group_bytes,
                      std::min(groups_per_chunk, groups - g), x.rows, c0, std::min(pass, n - c0),
                      to + c0 * rows + g * cpu::interleave_rows, rows);
        };
        return check_and_time(type, k, rows, n, ms, ghz, cpu::groups_kernel_at(cpu::simd_level::scalar),
                              cpu::best_groups_kernel(), all_chunks) > 0
                   ? 1
                   : 0;
    }
    auto all_groups = [&](cpu::group_kernel_fn f, float *to) {
        for (int64_t g = 0; g < groups; ++g)
            f(l, packed.data() + size_t(g) * group_bytes, x.rows, 0, n, to + g * cpu::interleave_rows, rows);
    };
    return check_and_time(type, k, rows, n, ms, ghz, cpu::group_kernel_fn(cpu::group_kernel_scalar),
                          cpu::best_group_kernel(), all_groups) > 0
               ? 1
               : 0;
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<std::string> types = {"q8_0", "q4_0", "q4_k", "iq4_nl", "mxfp4"};
    std::vector<std::string> cols = {"1", "3", "4", "16"};
    int64_t k = 512, rows = 256, pass = 0;
    double ms = 300;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view flag = argv[i];
        if (flag == "--types") {
            types = test::split_list(argv[i + 1]);
        } else if (flag == "--cols") {
            cols = test::split_list(argv[i + 1]);
        } else if (flag == "--k") {
            k = std::atoll(argv[i + 1]);
        } else if (flag == "--rows") {
            rows = std::atoll(argv[i + 1]);
        } else if (flag == "--ms") {
            ms = std::atof(argv[i + 1]);
        } else if (flag == "--pass") {
            pass = std::atoll(argv[i + 1]);
        } else {
            std::fprintf(stderr, "unknown option %s (--types, --k, --rows, --cols, --ms, --pass)\n", argv[i]);
            return 2;
        }
    }
    if (k <= 0 || k % 256 != 0 || rows <= 0 || rows % weft::cpu::interleave_rows != 0) {
        std::fprintf(stderr, "--k must be a positive multiple of 256 and --rows of 16\n");
        return 2;
    }
    const double ghz = measured_ghz();
    const char *levels[] = {"scalar", "avx2", "avx512", "avx512_vnni"};
    std::fprintf(stderr, "clock %.2f GHz (dependent adds), kernels: %s\n", ghz,
                 levels[static_cast<int>(weft::cpu::best_simd_level())]);
    std::printf(
        "| type | k | rows | columns | cycles per 64 MACs | GMAC/s |\n| --- | ---: | ---: | ---: | ---: | "
        "---: |\n");
    int failures = 0;
    for (const std::string &name : types) {
        const auto type = weft::type_from_name(name);
        if (!type) {
            std::fprintf(stderr, "unknown type %s\n", name.c_str());
            return 2;
        }
        for (const std::string &c : cols) {
            const int64_t n = std::atoll(c.c_str());
            if (n <= 0) {
                std::fprintf(stderr, "bad column count %s\n", c.c_str());
                return 2;
            }
            const int ok = *type == weft::dtype::bf16  ? run_bf16_groups(k, rows, n, ms, ghz)
                           : *type == weft::dtype::f16 ? run_f16_int16(k, rows, n, pass, ms, ghz)
                                                       : run(*type, k, rows, n, pass, ms, ghz);
            if (ok == 0) ++failures;
        }
    }
    return failures == 0 ? 0 : 1;
}
