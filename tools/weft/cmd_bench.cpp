// tools/weft/cmd_bench.cpp — `weft bench`: prompt-processing and generation tokens/s, and the
// fraction of the machine's memory bandwidth that generation reaches.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "weft/backends/cpu.h"
#include "weft/cache_types.h"
#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/core/profile.h"
#include "weft/device_options.h"
#include "weft/file_arguments.h"
#include "weft/model/model.h"
#include "weft/numa_options.h"
#include "weft/ranks.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"
#include "weft/runtime/memory.h"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct stats {
    double mean = 0.0, stddev = 0.0;
};

stats summarize(const std::vector<double> &v) {
    stats s;
    if (v.empty()) return s;
    s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    double var = 0.0;
    for (double x : v) var += (x - s.mean) * (x - s.mean);
    s.stddev = v.size() > 1 ? std::sqrt(var / double(v.size() - 1)) : 0.0;
    return s;
}

// Bytes read from memory to generate one token at cache position `pos`: every weight matrix once
// (the token embedding contributes one row unless it doubles as the output matrix; of a mixture's
// experts only the n_expert_used picked ones) plus the K and V cache rows attended over.
double bytes_per_generated_token(const weft::model &m, const weft::inference_context &ctx, double pos) {
    const auto &w = m.weights();
    double bytes = double(m.n_weight_bytes());
    if (w.tok_embd != nullptr && w.output != w.tok_embd)
        bytes -= double(w.tok_embd->nbytes()) - double(w.tok_embd->nb[1]);
    if (const auto &hp = m.hparams(); hp.n_expert > 0) {
        const double unused = 1.0 - double(hp.n_expert_used) / double(hp.n_expert);
        for (const auto &l : w.layers)
            for (const weft::tensor *t : {l.ffn_gate_exps, l.ffn_up_exps, l.ffn_down_exps})
                if (t) bytes -= unused * double(t->nbytes());
    }
    // recurrent states (a recurrent or hybrid model's) are read whole whatever the position, the KV
    // cache's rows up to it
    const weft::kv_cache *kv = ctx.memory().attention();
    const double kv_bytes = kv ? double(kv->total_bytes()) : 0.0;
    const double kv_row_bytes = kv_bytes / double(ctx.n_ctx());  // all layers, K and V
    return bytes + (double(ctx.kv_bytes()) - kv_bytes) + kv_row_bytes * pos;
}

int bench_main(int argc, char **argv) {
    CLI::App app{
        "Measure speed: prompt processing (one batch of P tokens) and generation (N tokens one at a "
        "time), each repeated R times from an empty cache (or one first filled with D random tokens, "
        "untimed, with -d), with random token ids. Reports tokens/s "
        "(mean ± stddev) and the memory bandwidth generation reaches against the machine's measured "
        "read bandwidth. Results to stdout (a table, or JSON with --json); progress to stderr.",
        "weft bench"};
    std::string model_path;
    int n_prompt = 512, n_gen = 128, n_depth = 0, reps = 3, n_parallel = 1,
        n_threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 64u));
    uint32_t n_ubatch = 512;
    weft::tool::cache_type_options cache_types;
    bool json = false, no_bandwidth = false, profile = false, no_repack = false;
    app.add_option("-m,--model", model_path, "model file (GGUF)")
        ->required()
        ->check(weft::tool::input_file());
    app.add_option("-p,--n-prompt", n_prompt, "prompt tokens per prompt-processing run (0: skip)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 16));
    app.add_option("-n,--n-gen", n_gen, "tokens per generation run (0: skip)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 16));
    app.add_option("-d,--n-depth", n_depth,
                   "cache depth: before each run the cache is filled with this many random tokens, "
                   "untimed, and the test is measured after them (named e.g. \"tg32 @ d512\")")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_option(
           "--parallel", n_parallel,
           "also -np: sequences generating together: each generation step decodes the next token of every "
           "one of them in one batch, all rows outputs (the continuous batching of `weft serve "
           "-np`; named e.g. \"tg128 x4\", t/s counting every sequence's tokens)")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    app.add_option("-r,--repetitions", reps, "runs of each test")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    app.add_option("-t,--threads", n_threads, "threads")->capture_default_str()->check(CLI::Range(1, 512));
    app.add_option("--ubatch-size", n_ubatch, "physical batch size (tokens per graph)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 16));
    weft::tool::add_cache_type_options(app, cache_types);
    app.add_flag("--json", json, "print one JSON object instead of the table");
    app.add_flag("--profile", profile,
                 "time every op during the measured runs and print a table per test: op, weight type, "
                 "calls, total ms, ms per graph, share, serial fraction (the share of the threads' time at "
                 "the op spent waiting for the others), bytes read and written, GB/s, GFLOP/s");
    app.add_flag("--no-repack", no_repack,
                 "keep every weight in the file mapping (no interleaved copies of q4_0, q4_K, iq4_nl ...)");
    app.add_flag("--no-bandwidth", no_bandwidth, "skip measuring the machine's memory bandwidth");
    weft::tool::rank_options ranks;
    weft::tool::add_rank_options(app, ranks);
    weft::tool::device_options devices;
    weft::tool::add_device_options(app, devices);
    std::string numa;
    weft::tool::add_numa_option(app, numa);
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
    weft::tool::apply_numa_option(numa, n_threads);
    if (n_prompt == 0 && n_gen == 0) throw weft::error("nothing to measure: both -p and -n are 0");

    auto t_load = clock_type::now();
    weft::model_params mp;
    mp.repack = !no_repack;
    auto m = devices.load(
        mp, [&](const weft::model_params &p) { return weft::tool::load_stage_model(model_path, p, ranks); });
    std::fprintf(stderr, "weft bench: loaded %s in %.0f ms\n", m->describe().c_str(),
                 seconds_since(t_load) * 1e3);

    weft::inference_params ip;
    ip.n_ctx = uint32_t(std::max(n_depth + n_prompt + n_gen, 16));
    if (n_parallel > 1) ip.n_ctx = uint32_t(std::max(int(ip.n_ctx), n_parallel * (n_depth + n_gen + 1)));
    ip.n_seq_max = uint32_t(n_parallel);
    // the depth goes in in batches of up to a ubatch (n_batch only bounds a decode call's tokens)
    ip.n_batch = uint32_t(std::max({n_prompt, std::min(n_depth, int(n_ubatch)), n_parallel}));
    ip.n_ubatch = std::min<uint32_t>(n_ubatch, ip.n_batch);
    ip.n_threads = n_threads;
    ip.n_threads_batch = n_threads;
    cache_types.apply(ip);
    devices.apply(ip);
    if (m->offload_device()) weft::tool::report_placement(*m, ip, "bench");
    if (weft::tool::follow_rank_zero(*m, ip)) return 0;  // a rank > 0 of mpirun: its blocks only
    weft::inference_context ctx(*m, ip);

    const int32_t n_vocab = ctx.n_vocab();
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
    auto random_tokens = [&](int n) {
        std::vector<weft::token> t(static_cast<size_t>(n));
        for (auto &x : t) x = pick(rng);
        return t;
    };
    auto check = [&](int rc) {
        if (rc != 0) throw weft::error("decode failed (" + std::to_string(rc) + "): " + ctx.last_error());
    };

    // warm-up: pages the weights in and builds the graphs once
    {
        check(ctx.decode(weft::batch::from_tokens(random_tokens(std::min(std::max(n_prompt, 1), 8)))));
        check(ctx.decode(weft::batch::from_tokens(random_tokens(1))));
        ctx.kv_clear();
    }

    const std::string at_depth = n_depth > 0 ? " @ d" + std::to_string(n_depth) : "";
    const std::string sequences = n_parallel > 1 ? " x" + std::to_string(n_parallel) : std::string();
    // depth tokens in sequence `seq`: random tokens at positions [0, n_depth)
    auto fill_depth = [&](weft::seq_id seq) {
        for (int done = 0; done < n_depth;) {
            const int n = std::min(n_depth - done, int(ip.n_batch));
            weft::batch b;
            for (int i = 0; i < n; ++i) b.add(pick(rng), weft::llm_pos(done + i), {seq}, i + 1 == n);
            check(ctx.decode(b));
            done += n;
        }
    };
    // a run's start: an empty cache, then the depth's random tokens (untimed, not profiled)
    auto start_run = [&](weft::op_profile *prof, int n_seqs) {
        ctx.kv_clear();
        if (n_depth == 0) return;
        ctx.set_profile(nullptr);
        for (int s = 0; s < n_seqs; ++s) fill_depth(weft::seq_id(s));
        if (prof) ctx.set_profile(prof);
    };

    weft::op_profile pp_profile, tg_profile;
    std::vector<double> pp_tps, tg_tps, tg_seconds;
    if (profile) ctx.set_profile(&pp_profile);
    for (int r = 0; r < reps && n_prompt > 0; ++r) {
        start_run(profile ? &pp_profile : nullptr, 1);
        const auto toks = random_tokens(n_prompt);
        const auto t0 = clock_type::now();
        check(ctx.decode(weft::batch::from_tokens(toks)));
        pp_tps.push_back(n_prompt / seconds_since(t0));
        std::fprintf(stderr, "weft bench: pp%d%s run %d: %.2f t/s\n", n_prompt, at_depth.c_str(), r + 1,
                     pp_tps.back());
    }
    if (profile) ctx.set_profile(&tg_profile);
    for (int r = 0; r < reps && n_gen > 0; ++r) {
        start_run(profile ? &tg_profile : nullptr, n_parallel);
        const auto t0 = clock_type::now();
        for (int i = 0; i < n_gen; ++i) {
            weft::batch b;
            for (int s = 0; s < n_parallel; ++s)
                b.add(pick(rng), weft::llm_pos(n_depth + i), {weft::seq_id(s)}, true);
            check(ctx.decode(b));
        }
        const double s = seconds_since(t0);
        tg_seconds.push_back(s);
        tg_tps.push_back(double(n_gen) * n_parallel / s);
        std::fprintf(stderr, "weft bench: tg%d%s%s run %d: %.2f t/s\n", n_gen, sequences.c_str(),
                     at_depth.c_str(), r + 1, tg_tps.back());
    }
    const auto perf = ctx.perf();
    ctx.set_profile(nullptr);

    // across ranks the blocks stream on several processes: no one machine bandwidth to compare with
    const int n_ranks = weft::tool::n_ranks();
    double machine_bw = 0.0;
    if (!no_bandwidth && n_gen > 0 && n_ranks == 1) {
        std::fprintf(stderr, "weft bench: measuring memory read bandwidth with %d threads...\n", n_threads);
        machine_bw = weft::cpu_read_bandwidth(n_threads);
    }
    const stats pp = summarize(pp_tps), tg = summarize(tg_tps);
    // generation reads the weights once per step, plus, for each sequence, the depth's and on average
    // half the generated KV rows
    const double one_sequence = bytes_per_generated_token(*m, ctx, n_depth + 0.5 * n_gen);
    const double tg_bytes_per_step =
        one_sequence + (n_parallel - 1) * (one_sequence - bytes_per_generated_token(*m, ctx, 0));
    const double tg_bw = n_gen > 0 ? tg_bytes_per_step * tg.mean / n_parallel : 0.0;
    const double fraction = machine_bw > 0 ? tg_bw / machine_bw : 0.0;

    if (json) {
        nlohmann::json j;
        j["model"] = model_path;
        j["description"] = m->describe();
        j["n_params"] = m->n_params();
        j["weight_bytes"] = m->n_weight_bytes();
        j["threads"] = n_threads;
        j["n_ubatch"] = ip.n_ubatch;
        j["type_k"] = weft::type_name(ip.type_k);
        j["type_v"] = weft::type_name(ip.type_v);
        j["kv_bytes_per_token"] = ctx.memory().attention()
                                      ? double(ctx.memory().attention()->total_bytes()) / double(ctx.n_ctx())
                                      : 0.0;
        j["repetitions"] = reps;
        j["n_depth"] = n_depth;
        j["ranks"] = n_ranks;
        j["layers"] = {m->layers().begin, m->layers().end};  // this rank's blocks
        j["device"] = m->offload_device() ? m->offload_device()->name() : ctx.device().name();
        j["n_gpu_layers"] = m->n_offloaded_layers() + (m->output_offloaded() ? 1 : 0);
        j["peak_resident_mib"] = double(weft::tool::peak_resident_bytes()) / double(1 << 20);
        if (n_prompt > 0)
            j["pp"] = {{"n_tokens", n_prompt},
                       {"n_depth", n_depth},
                       {"tokens_per_s", pp.mean},
                       {"stddev", pp.stddev},
                       {"runs", pp_tps}};
        if (n_gen > 0)
            j["tg"] = {{"n_tokens", n_gen},
                       {"n_depth", n_depth},
                       {"n_parallel", n_parallel},
                       {"tokens_per_s", tg.mean},
                       {"stddev", tg.stddev},
                       {"runs", tg_tps},
                       {"bytes_per_token", tg_bytes_per_step / n_parallel},
                       {"bytes_per_step", tg_bytes_per_step},
                       {"bandwidth_gb_s", tg_bw / 1e9},
                       {"machine_bandwidth_gb_s", machine_bw / 1e9},
                       {"bandwidth_fraction", fraction}};
        if (profile) {
            auto rows_json = [](const weft::op_profile &prof) {
                nlohmann::json rows = nlohmann::json::array();
                for (const auto &r : prof.rows())
                    rows.push_back({{"op", r.op},
                                    {"type", r.type},
                                    {"calls", r.calls},
                                    {"ms", r.ns / 1e6},
                                    {"share", prof.total_ns() > 0 ? r.ns / prof.total_ns() : 0.0},
                                    {"bytes_read", r.bytes_read},
                                    {"bytes_written", r.bytes_written},
                                    {"flops", r.flops},
                                    {"serial_fraction", r.serial_fraction()}});
                return nlohmann::json{
                    {"graphs", prof.graphs()}, {"serial_fraction", prof.serial_fraction()}, {"ops", rows}};
            };
            if (n_prompt > 0) j["profile"]["pp"] = rows_json(pp_profile);
            if (n_gen > 0) j["profile"]["tg"] = rows_json(tg_profile);
        }
        j["graph_builds"] = perf.n_graph_builds;
        j["graph_reuses"] = perf.n_graph_reuses;
        std::printf("%s\n", j.dump(2).c_str());
        return 0;
    }
    std::printf("| model | size | params | threads | type_k | type_v | test | t/s |\n");
    std::printf("| --- | ---: | ---: | ---: | --- | --- | --- | ---: |\n");
    const double bytes = double(m->n_weight_bytes()), params = double(m->n_params());
    char size[32], count[32];
    if (bytes >= double(1 << 30))
        std::snprintf(size, sizeof size, "%.2f GiB", bytes / double(1 << 30));
    else
        std::snprintf(size, sizeof size, "%.2f MiB", bytes / double(1 << 20));
    if (params >= 1e9)
        std::snprintf(count, sizeof count, "%.2f B", params / 1e9);
    else
        std::snprintf(count, sizeof count, "%.2f M", params / 1e6);
    const auto row = [&](const char *test, int n, const stats &st) {
        const std::string seqs = test == std::string("tg") ? sequences : std::string();
        std::printf("| %s | %s | %s | %d | %s | %s | %s%d%s%s | %.2f ± %.2f |\n", m->name().c_str(), size,
                    count, n_threads, weft::type_name(ip.type_k), weft::type_name(ip.type_v), test, n,
                    seqs.c_str(), at_depth.c_str(), st.mean, st.stddev);
    };
    if (n_prompt > 0) row("pp", n_prompt, pp);
    if (n_gen > 0) row("tg", n_gen, tg);
    if (n_gen > 0) {
        std::printf("\ngeneration reads %.1f MiB per step (%d token%s): %.2f GB/s",
                    tg_bytes_per_step / double(1 << 20), n_parallel, n_parallel > 1 ? "s" : "", tg_bw / 1e9);
        if (machine_bw > 0)
            std::printf(" of %.2f GB/s measured read bandwidth (%.0f%%)", machine_bw / 1e9, 100.0 * fraction);
        std::printf("\n");
    }
    std::printf("graphs built %lld, reused %lld\n", static_cast<long long>(perf.n_graph_builds),
                static_cast<long long>(perf.n_graph_reuses));
    if (n_ranks > 1)
        std::printf(
            "%d ranks; rank 0: blocks [%lld, %lld) of %lld, peak resident memory %.1f MiB (each rank "
            "prints its own on stderr)\n",
            n_ranks, (long long)m->layers().begin, (long long)m->layers().end,
            (long long)m->hparams().n_layer, double(weft::tool::peak_resident_bytes()) / double(1 << 20));
    if (profile && n_prompt > 0)
        std::printf("\n%s", pp_profile.format("profile of pp" + std::to_string(n_prompt) + at_depth).c_str());
    if (profile && n_gen > 0)
        std::printf("\n%s", tg_profile.format("profile of tg" + std::to_string(n_gen) + at_depth).c_str());
    return 0;
}

const bool registered_bench = weft::tool::register_command(
    {"bench", "measure prompt and generation tokens/s and memory bandwidth reached", &bench_main});

}  // namespace
