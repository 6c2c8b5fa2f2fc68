// tests/backends/bench_attention_depth.cpp — the fused attention op alone on a prompt at depth: a
// block of 64 tokens x 8 query heads of one KV head (a 1.1B llama's shape; 8 tiles of 64 query rows)
// against `depth` cached slots of an f16 cache, head 64, on one thread, the path of
// attention_impl.h beyond attention_untiled_slots (the tiles). `--depth 0 --tokens 512` is instead a
// prompt's first 512 tokens (a pp512 at depth 0: blocks of 64 tokens, token by token over at most
// attention_untiled_slots slots). Prints GFLOP/s of the products (2 * rows * the cells each sees *
// (head_k + head_v)), counting the conversion of K and V and the softmax in the time.
// Times are this process's CPU time (one thread computes), so other processes sharing the cores slow
// it little; the best run is printed too (the least disturbed by the neighbours' use of the caches). Every
// run's result is checked bit for bit against the scalar build's (--check 0: not; the scalar build takes
// minutes on a whole model's layer). Not a test: ctest runs it once, briefly, to keep it building and
// agreeing. `--kv-heads 4 --threads 2 --tokens 512 --heads 8` is a 1.1B llama's whole layer as a pp512
// runs it on two threads (then the times are wall-clock times).
//
//   bench_attention_depth [--depth 4096] [--tokens 64] [--heads 8] [--kv-heads 1] [--head 64] [--ms 500]
//                         [--type f16] [--threads 1] [--check 1]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "weft/backends/cpu.h"
#include "weft/core/context.h"
#include "weft/core/cpu_features.h"
#include "weft/core/graph.h"
#include "weft/core/ops.h"
#include "weft/core/tensor.h"
#include "weft/core/type.h"
#include "weft/quant/quant.h"

namespace {

using namespace weft;

int n_threads = 1;

// this process's CPU time, or the wall-clock time when several threads compute
double process_seconds() {
    timespec t{};
    clock_gettime(n_threads > 1 ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// Fills a K or V tensor (contiguous rows) with values in [-1, 1) stored by its type's from_float.
void fill_rows(tensor &t, std::mt19937 &rng) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const int64_t n = t.ne[0], rows = t.nelements() / n;
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
        for (float &x : values) x = dist(rng);
        quant_traits_of(t.type).from_float(values.data(), static_cast<char *>(t.data) + r * int64_t(t.nb[1]),
                                           n);
    }
}

std::vector<float> compute(graph &g, const tensor &out) {
    cpu_backend backend(n_threads);
    if (backend.graph_compute(g, {}) != compute_status::ok) {
        std::fprintf(stderr, "the attention op failed\n");
        std::exit(1);
    }
    const auto *x = static_cast<const float *>(out.data);
    return std::vector<float>(x, x + out.nelements());
}

}  // namespace

int main(int argc, char **argv) {
    int64_t depth = 4096, tokens = 64, heads = 8, kv_heads = 1, head = 64;
    bool check = true;
    double ms = 500;
    std::string type_name_arg = "f16";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view opt = argv[i];
        const char *val = argv[i + 1];
        if (opt == "--depth")
            depth = std::atoll(val);
        else if (opt == "--tokens")
            tokens = std::atoll(val);
        else if (opt == "--heads")
            heads = std::atoll(val);
        else if (opt == "--kv-heads")
            kv_heads = std::atoll(val);
        else if (opt == "--head")
            head = std::atoll(val);
        else if (opt == "--threads")
            n_threads = std::atoi(val);
        else if (opt == "--check")
            check = std::atoi(val) != 0;
        else if (opt == "--ms")
            ms = std::atof(val);
        else if (opt == "--type")
            type_name_arg = val;
        else {
            std::fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (depth < 0 || tokens < 1 || heads < 1 || head < 1 || head > 1024 || depth > (1 << 20) ||
        tokens > 4096 || kv_heads < 1 || kv_heads > 64 || n_threads < 1 || n_threads > 256) {
        std::fprintf(stderr, "bad shape\n");
        return 2;
    }
    if (type_name_arg != "f16" && type_name_arg != "q8_0") {
        std::fprintf(stderr, "--type: f16 or q8_0\n");
        return 2;
    }
    const dtype type = type_name_arg == "q8_0" ? dtype::q8_0 : dtype::f16;
    const int64_t n_kv = depth + tokens;
    context ctx(context_params{(size_t(64) << 20) + size_t(n_kv) * size_t(8 * head * kv_heads + 4 * tokens) +
                                   size_t(tokens * heads * kv_heads * head) * 8,
                               false});
    tensor *q_rows = ctx.new_tensor(dtype::f32, {head, heads * kv_heads, tokens});
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto *qd = static_cast<float *>(q_rows->data);
    for (int64_t i = 0; i < q_rows->nelements(); ++i) qd[i] = dist(rng);
    tensor *q = permute(ctx, q_rows, 0, 2, 1, 3);
    tensor *k = ctx.new_tensor(type, {head, n_kv, kv_heads});
    tensor *v = ctx.new_tensor(type, {head, n_kv, kv_heads});
    fill_rows(*k, rng);
    fill_rows(*v, rng);
    tensor *mask = ctx.new_tensor(dtype::f32, {n_kv, tokens});
    auto *m = static_cast<float *>(mask->data);
    for (int64_t t = 0; t < tokens; ++t)  // causal: token t at position depth + t
        for (int64_t j = 0; j < n_kv; ++j)
            m[t * n_kv + j] = j <= depth + t ? 0.0f : -std::numeric_limits<float>::infinity();
    tensor *out = attention(ctx, q, k, v, mask, 0.125f, 0.0f);
    graph g;
    build_forward_expand(g, out);

    force_scalar(true);
    const std::vector<float> expected = check ? compute(g, *out) : std::vector<float>{};
    force_scalar(false);
    const double seen = double(tokens) * double(depth) + double(tokens) * double(tokens + 1) / 2;  // causal
    const double flops = 2.0 * double(heads * kv_heads) * seen * double(2 * head);
    int64_t runs = 0;
    bool same = true;
    const double t0 = process_seconds();
    double seconds = 0, best = std::numeric_limits<double>::infinity();
    do {
        const double r0 = process_seconds();
        const std::vector<float> got = compute(g, *out);
        same = same && (!check || got == expected);
        best = std::min(best, process_seconds() - r0);
        ++runs;
        seconds = process_seconds() - t0;
    } while (seconds < ms * 1e-3);
    std::printf(
        "| %s | depth %lld | %lld tokens x %lld heads x %lld KV heads | head %lld | %d threads | %.3f ms "
        "(best "
        "%.3f) | %.1f GFLOP/s (best %.1f) |\n",
        type_name(type), static_cast<long long>(depth), static_cast<long long>(tokens),
        static_cast<long long>(heads), static_cast<long long>(kv_heads), static_cast<long long>(head),
        n_threads, seconds / double(runs) * 1e3, best * 1e3, flops * double(runs) / seconds / 1e9,
        flops / best / 1e9);
    if (!same) {
        std::fprintf(stderr, "the result differs from the scalar build's\n");
        return 1;
    }
    return 0;
}
