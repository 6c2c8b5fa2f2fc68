// tools/weft/cmd_graph.cpp — `weft graph`: build a compute graph, print it, plan its memory, dump DOT.
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "weft/backends/cpu.h"
#include "weft/command.h"
#include "weft/core/allocator.h"
#include "weft/core/error.h"
#include "weft/core/graph.h"
#include "weft/core/ops.h"
#include "weft/core/safe_file.h"
#include "weft/device_options.h"
#include "weft/file_arguments.h"
#include "weft/model/model.h"
#include "weft/ranks.h"
#include "weft/runtime/context.h"
#include "weft/runtime/pipeline.h"

namespace weft::tool {
namespace {

struct graph_options {
    bool demo = false;
    std::string model_path;  // -m: one decode step of this model
    std::string dot_path;    // empty: no DOT file
    int64_t n_embd = 64;
    int64_t n_hidden = 256;
    int64_t n_tokens = 8;
    std::string split;  // --split-layers: the placement of that many ranks, and rank `rank`'s graph
    int rank = 0;
    device_options devices;              // -m: --device / -ngl, the blocks offloaded to a GPU
    std::vector<int> partition_threads;  // --partition: report the CPU's split at these thread counts
};

constexpr size_t planner_alignment = 64;

std::string human_bytes(size_t bytes) {
    char buf[32];
    if (bytes >= (size_t(1) << 20))
        std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / double(1 << 20));
    else
        std::snprintf(buf, sizeof buf, "%.2f KiB", double(bytes) / 1024.0);
    return buf;
}

// Writes the DOT text through a temporary file renamed into place (weft/core/safe_file.h): a reader
// never sees a half-written file and a failure leaves any previous file untouched.
void write_dot_atomically(const graph &g, const std::string &path) {
    std::ostringstream text;
    graph_dump_dot(g, text);
    output_file out(path);
    out.write(text.str());
    out.commit();
}

// What every mode prints once it has a graph: the nodes and leafs, counts, nodes per op and the
// planned peak of compute memory (what a graph_allocator would reserve for it).
void report_graph(const graph &g, const graph_options &opt) {
    graph_print(g, std::cout);
    std::cout << "\nnodes: " << g.nodes.size() << "\nleafs: " << g.leafs.size() << "\nnodes per op:\n";
    for (const auto &[op, n] : graph_op_counts(g)) std::cout << "  " << op_name(op) << ": " << n << '\n';
    const auto plan = graph_allocator::make_plan(g, planner_alignment);
    std::cout << "planned peak compute memory: " << plan.peak_bytes << " bytes ("
              << human_bytes(plan.peak_bytes) << "), " << plan.offsets.size() << " tensors placed, "
              << plan.inplace.size() << " in place\n";
    std::cout.flush();
    if (!opt.dot_path.empty()) {
        write_dot_atomically(g, opt.dot_path);
        std::fprintf(stderr, "wrote %s\n", opt.dot_path.c_str());
    }
}

// --demo: a two-layer MLP y = W2 · silu(W1 · x), recorded in a metadata-only context.
int graph_demo(const graph_options &opt) {
    context ctx(context_params{context_overhead(16), true});
    tensor *x =
        ctx.new_tensor(dtype::f32, {opt.n_embd, opt.n_tokens})->set_name("x");  // f32 [n_embd, n_tokens]
    x->flags |= tensor_flag_input;
    tensor *w1 =
        ctx.new_tensor(dtype::f32, {opt.n_embd, opt.n_hidden})->set_name("W1");  // [n_embd, n_hidden]
    w1->flags |= tensor_flag_param;
    tensor *w2 =
        ctx.new_tensor(dtype::f32, {opt.n_hidden, opt.n_embd})->set_name("W2");  // [n_hidden, n_embd]
    w2->flags |= tensor_flag_param;
    tensor *h = mul_mat(ctx, w1, x)->set_name("h");  // [n_hidden, n_tokens]
    tensor *act = silu(ctx, h)->set_name("act");
    tensor *y = mul_mat(ctx, w2, act)->set_name("y");  // [n_embd, n_tokens]
    y->flags |= tensor_flag_output;

    graph g;
    build_forward_expand(g, y);
    std::cout << "demo: two-layer MLP y = W2 * silu(W1 * x), n_embd = " << opt.n_embd
              << ", n_hidden = " << opt.n_hidden << ", n_tokens = " << opt.n_tokens << "\n\n";
    report_graph(g, opt);
    return 0;
}

// Where the nodes of a step compute when blocks are offloaded: the runs of consecutive nodes on one
// backend (the scheduler's splits), the nodes of offloaded blocks the device leaves to the host, and
// the copies between them.
void report_placement_runs(const graph &g, const inference_context::graph_report &r) {
    std::cout << "\nplacement: " << r.n_splits << " runs of nodes on one backend, " << r.n_copies
              << " tensors copied between backends per step\n";
    for (size_t i = 0; i < g.nodes.size();) {
        size_t j = i;
        while (j < g.nodes.size() && r.node_backends[j] == r.node_backends[i]) ++j;
        std::cout << "  #" << i << " - #" << (j - 1) << "  " << r.node_backends[i] << "  ("
                  << g.nodes[i]->name << " ... " << g.nodes[j - 1]->name << ")\n";
        i = j;
    }
}

// --partition: for each thread count, per op, how evenly the CPU kernels' own partition functions
// share each node out (cpu_backend::partition_report): the busiest thread's work over the mean.
// `worst` is the most uneven node; `step` weighs the nodes by their work (the sum of the busiest
// threads' shares over the sum of the means: how much longer the op's nodes take than an even
// split would, all threads equally fast). Serial nodes (thread 0 alone) are counted apart.
void report_partition(const graph &g, const std::vector<int> &thread_counts) {
    std::cout << "\npartition of the step's nodes (the kernels' own split, all threads equally fast;\n"
                 "imbalance = busiest thread's work / mean; serial: computed by thread 0 alone):\n";
    std::printf("%8s  %-16s %6s %7s %11s %10s %12s\n", "threads", "op", "nodes", "serial", "worst", "step",
                "not modelled");
    for (const int nth : thread_counts) {
        struct op_sum {
            int nodes = 0, serial = 0, unmodelled = 0;
            double worst = 1, busiest = 0, mean = 0;
        };
        std::map<std::string, op_sum> ops;
        for (const cpu_node_partition &r : cpu_backend::partition_report(g, nth)) {
            op_sum &o = ops[std::string(op_name(r.node->op)) +
                            (r.n_products > 1 ? " x" + std::to_string(r.n_products) : "")];
            ++o.nodes;
            if (r.alone) {
                ++o.serial;
                continue;
            }
            if (!r.modelled) {
                ++o.unmodelled;
                continue;
            }
            double total = 0, most = 0;
            for (const double w : r.work) {
                total += w;
                most = std::max(most, w);
            }
            if (total <= 0) continue;
            const double mean = total / double(nth);
            o.worst = std::max(o.worst, most / mean);
            o.busiest += most;
            o.mean += mean;
        }
        for (const auto &[name, o] : ops)
            std::printf("%8d  %-16s %6d %7d %11.3f %10.3f %12d\n", nth, name.c_str(), o.nodes, o.serial,
                        o.worst, o.mean > 0 ? o.busiest / o.mean : 1.0, o.unmodelled);
    }
    std::cout.flush();
}

// -m MODEL: the graph of one decode step of --tokens tokens, built as decode would build it (KV
// cache views, mask, output row) but not computed.
int graph_model(graph_options &opt) {
    // the placement: which blocks each rank holds (one process: all of them), on which device
    const int64_t n_layer = block_count_of(opt.model_path);
    const std::vector<double> weights = parse_split_layers(opt.split);
    const std::vector<layer_span> plan =
        split_layers(n_layer, std::max<int>(1, int(weights.size())), weights);
    if (opt.rank < 0 || size_t(opt.rank) >= plan.size())
        throw error("--rank " + std::to_string(opt.rank) + ": the placement has " +
                    std::to_string(plan.size()) + " ranks");
    model_params mp;
    mp.layers = plan[size_t(opt.rank)];
    device_options &devices = opt.devices;
    auto m = devices.load(mp, [&](const model_params &p) { return model::load(opt.model_path, p); });
    inference_params ip;
    devices.apply(ip);
    const device &dev = select_device(ip.device);
    std::cout << "placement (" << plan.size() << (plan.size() == 1 ? " process" : " ranks: mpirun -np ")
              << (plan.size() == 1 ? "" : std::to_string(plan.size())) << "):\n";
    for (size_t r = 0; r < plan.size(); ++r)
        std::cout << "  " << (plan.size() == 1 ? "" : "rank " + std::to_string(r) + ": ") << "blocks ["
                  << plan[r].begin << ", " << plan[r].end << ")" << (r == 0 ? " + token embedding" : "")
                  << (r + 1 == plan.size() ? " + output" : "") << ": weights, KV cache and computation on "
                  << dev.name() << (int(r) == opt.rank ? "  <- the graph below" : "") << "\n";
    if (const device *gpu = m->offload_device())
        std::cout << "  of which blocks [" << (m->layers().end - m->n_offloaded_layers()) << ", "
                  << m->layers().end << ")" << (m->output_offloaded() ? " + output" : "") << " on "
                  << gpu->name() << " (" << gpu->description()
                  << "): their weights, KV cache and the ops it supports\n";
    ip.n_ctx = uint32_t((opt.n_tokens + 255) / 256 * 256);
    ip.n_batch = ip.n_ubatch = uint32_t(opt.n_tokens);
    ip.n_threads = ip.n_threads_batch = 1;
    inference_context ctx(*m, ip);
    std::cout << "model: " << m->describe() << "\none decode step of " << opt.n_tokens
              << " tokens, KV cache of " << ctx.n_ctx() << " cells\n\n";
    if (!opt.partition_threads.empty()) {
        ctx.visit_step_graph(int32_t(opt.n_tokens),
                             [&](const graph &g) { report_partition(g, opt.partition_threads); });
        return 0;
    }
    ctx.visit_step_graph(int32_t(opt.n_tokens), [&](const graph &g) { report_graph(g, opt); });
    if (m->offload_device()) {
        const inference_context::graph_report r = ctx.describe_graph(int32_t(opt.n_tokens));
        ctx.visit_step_graph(int32_t(opt.n_tokens), [&](const graph &g) { report_placement_runs(g, r); });
    }
    return 0;
}

int graph_main(int argc, char **argv) {
    CLI::App app{
        "Builds a compute graph without computing it, prints its nodes and leafs (index, op, name,\n"
        "shape, type, sources), the nodes per op and the planned peak compute memory, and\n"
        "optionally writes it as Graphviz DOT (render with: dot -Tsvg FILE -o graph.svg).",
        "weft graph"};
    graph_options opt;
    app.add_flag("--demo", opt.demo, "a two-layer MLP y = W2 * silu(W1 * x)");
    app.add_option("-m,--model", opt.model_path,
                   "a GGUF model: the graph of one decode step of --tokens tokens")
        ->option_text("MODEL.gguf")
        ->check(weft::tool::input_file());
    app.add_option("--split-layers", opt.split,
                   "-m: the placement of a pipeline of as many ranks as values (e.g. 3,1), and the graph of "
                   "--rank's stage");
    app.add_option("--rank", opt.rank, "-m with --split-layers: the rank whose stage graph is printed")
        ->capture_default_str();
    app.add_option("--dot", opt.dot_path, "also write the graph as Graphviz DOT to FILE")
        ->option_text("FILE");
    app.add_option("--embd", opt.n_embd, "demo: embedding size (x is [embd, tokens])")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    app.add_option("--hidden", opt.n_hidden, "demo: hidden size of the MLP")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    app.add_option("--tokens", opt.n_tokens, "tokens in the step (--demo and -m)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    app.add_option("--partition", opt.partition_threads,
                   "-m: instead of the graph, how evenly the CPU kernels share each op's nodes out among "
                   "these thread counts (e.g. 1,2,4,8,16,32,64), from the kernels' own partition functions")
        ->delimiter(',')
        ->check(CLI::Range(1, 4096));
    add_device_options(app, opt.devices);
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;

    if (opt.demo) return graph_demo(opt);
    if (!opt.model_path.empty()) return graph_model(opt);
    throw error("no graph chosen: pass --demo or -m MODEL.gguf (see --help)");
}

[[maybe_unused]] const bool registered_graph =
    register_command({"graph", "build a compute graph, print it, plan its memory, write DOT", &graph_main});

}  // namespace
}  // namespace weft::tool
