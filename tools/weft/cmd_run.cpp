// tools/weft/cmd_run.cpp — `weft run`: generate from a prompt, streamed to stdout.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "weft/assets.h"
#include "weft/cache_types.h"
#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/core/type.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/sampling.h"
#include "weft/serving/engine.h"

namespace {

int default_threads() {
    return int(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
}

int run_main(int argc, char **argv) {
    CLI::App app{
        "Generate text: evaluate PROMPT, then sample up to N tokens, streamed to stdout as they "
        "are produced. The load line and timings go to stderr.",
        "weft run"};
    std::string model_path, prompt;
    weft::tool::cache_type_options cache_types;
    int n_predict = 128;
    int n_threads = default_threads(), n_threads_batch = 0;
    uint32_t n_ctx = 0, n_batch = 2048, n_ubatch = 512;
    bool no_mmap = false, no_repack = false;
    weft::sampling_params sp;
    int64_t seed = -1;
    app.add_option("-m,--model", model_path, "model file (GGUF); none: the built-in stories260K")
        ->check(CLI::ExistingFile);
    app.add_option("-p,--prompt", prompt, "prompt text (empty: start from BOS alone)");
    app.add_option("-n,--n-predict", n_predict,
                   "tokens to generate at most (stops earlier at end of generation)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_option("--temp", sp.temp, "temperature; 0 picks the most likely token (greedy)")
        ->capture_default_str();
    app.add_option("--top-k", sp.top_k, "keep the K most likely tokens (0: off)")->capture_default_str();
    app.add_option("--top-p", sp.top_p, "nucleus sampling threshold (1: off)")->capture_default_str();
    app.add_option("--min-p", sp.min_p, "drop tokens below P x the top probability (0: off)")
        ->capture_default_str();
    app.add_option("--repeat-penalty", sp.penalty_repeat, "penalty for repeated tokens (1: off)")
        ->capture_default_str();
    app.add_option("--seed", seed, "sampling seed (-1: random)")->capture_default_str();
    app.add_option("-t,--threads", n_threads, "threads for single-token generation")
        ->capture_default_str()
        ->check(CLI::Range(1, 512));
    app.add_option("--threads-batch", n_threads_batch,
                   "threads for prompt evaluation, also -tb (0: same as -t)")
        ->check(CLI::Range(0, 512));
    app.add_option("-c,--ctx-size", n_ctx,
                   "context size in tokens (0: the model's training context, at most 4096)")
        ->check(CLI::Range(0u, 1u << 24));
    app.add_option("-b,--batch-size", n_batch, "most tokens per decode call")
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 20));
    app.add_option("--ubatch-size", n_ubatch, "most tokens per graph computation, also -ub")
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 20));
    weft::tool::add_cache_type_options(app, cache_types);
    app.add_flag("--no-mmap", no_mmap, "read the weights into memory instead of mapping the file");
    app.add_flag(
        "--no-repack", no_repack,
        "keep every weight in the file mapping (no interleaved q4_0/q8_0 copies for faster products)");
    try {
        app.parse(weft::tool::cli_args(argc, argv));
    } catch (const CLI::ParseError &e) {
        return app.exit(e);
    }
    if (seed >= 0) sp.seed = uint32_t(seed);

    weft::model_params mp;
    mp.use_mmap = !no_mmap;
    mp.repack = !no_repack;
    auto model = weft::tool::load_model_or_default(model_path, mp);
    std::fprintf(stderr, "weft run: loaded %s in %.1f ms: %s\n", model->path().c_str(), model->load_ms(),
                 model->describe().c_str());

    weft::inference_params ip;
    ip.n_ctx = n_ctx ? n_ctx : uint32_t(std::min<int64_t>(model->hparams().n_ctx_train, 4096));
    ip.n_batch = n_batch;
    ip.n_ubatch = n_ubatch;
    ip.n_threads = n_threads;
    ip.n_threads_batch = n_threads_batch ? n_threads_batch : n_threads;
    cache_types.apply(ip);
    weft::serving::engine_params ep;
    ep.n_slots = 1;
    ep.context = ip;
    weft::serving::engine eng(*model, ep);
    const weft::inference_context &ctx = eng.context();

    const weft::vocab &vocab = model->vocab();
    std::vector<weft::token> tokens = vocab.tokenize(prompt, true, true);
    if (tokens.empty()) {
        if (vocab.bos() == weft::token_null)
            throw weft::error("the prompt is empty and the vocabulary has no BOS token");
        tokens.push_back(vocab.bos());
    }

    std::fprintf(stderr, "weft run: prompt %zu tokens, context %u, sampler: %s\n", tokens.size(), ctx.n_ctx(),
                 weft::make_sampler_chain(sp)->describe().c_str());
    weft::serving::request req;
    req.prompt = tokens;
    req.max_tokens = n_predict;
    req.sampling = sp;
    const weft::serving::completion done = eng.generate(std::move(req), [](const weft::serving::event &e) {
        std::fwrite(e.text.data(), 1, e.text.size(), stdout);
        std::fflush(stdout);
        return true;
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (done.finish == weft::serving::finish_reason::error)
        throw weft::error("generation failed: " + done.error);
    const int n_generated = int(done.tokens.size());
    if (done.finish == weft::serving::finish_reason::length && n_generated < n_predict)
        std::fprintf(stderr, "weft run: context full (%u tokens)\n", ctx.n_ctx());

    const weft::inference_perf p = ctx.perf();
    auto rate = [](int64_t n, double ms) { return ms > 0 ? 1000.0 * double(n) / ms : 0.0; };
    std::fprintf(stderr, "weft run: load %.1f ms\n", model->load_ms());
    std::fprintf(stderr, "weft run: prompt %zu tokens in %.1f ms (%.2f tokens/s)\n", tokens.size(),
                 done.prompt_ms, rate(int64_t(tokens.size()), done.prompt_ms));
    std::fprintf(
        stderr,
        "weft run: generated %d tokens in %.1f ms (%.2f tokens/s; single-token decode %lld calls, %.2f ms "
        "each)\n",
        n_generated, done.generate_ms, rate(n_generated > 0 ? n_generated - 1 : 0, done.generate_ms),
        (long long)p.n_eval, p.n_eval ? p.t_eval_ms / double(p.n_eval) : 0.0);
    std::fprintf(
        stderr,
        "weft run: graphs built %lld (%.2f ms), reused %lld; KV %.1f MiB (K %s, V %s), compute %.1f MiB, "
        "threads %d/%d\n",
        (long long)p.n_graph_builds, p.t_graph_build_ms, (long long)p.n_graph_reuses,
        double(ctx.kv_bytes()) / 1048576.0, weft::type_name(ctx.kv().type_k()),
        weft::type_name(ctx.kv().type_v()), double(ctx.compute_buffer_bytes()) / 1048576.0, ip.n_threads,
        ip.n_threads_batch);
    return 0;
}

const bool registered = weft::tool::register_command(
    {"run", "generate text from a prompt with a model (streamed to stdout)", &run_main});

}  // namespace
