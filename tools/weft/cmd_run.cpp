// tools/weft/cmd_run.cpp — `weft run`: generate from a prompt, streamed to stdout.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "weft/assets.h"
#include "weft/cache_types.h"
#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/core/type.h"
#include "weft/device_options.h"
#include "weft/file_arguments.h"
#include "weft/grammar/grammar.h"
#include "weft/grammar_options.h"
#include "weft/lora_options.h"
#include "weft/model/model.h"
#include "weft/numa_options.h"
#include "weft/ranks.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"
#include "weft/runtime/memory.h"
#include "weft/sampling/sampling.h"
#include "weft/sampling_options.h"
#include "weft/serving/engine.h"
#include "weft/speculative_options.h"
#include "weft/vision_options.h"

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
    bool no_mmap = false, no_repack = false, list_devices = false, no_context_shift = false;
    weft::tool::device_options devices;
    int32_t n_keep = 0;
    std::string prompt_cache;
    weft::tool::sampling_options sampling;
    weft::tool::speculative_options speculative;
    app.add_option("-m,--model", model_path, "model file (GGUF); none: the built-in stories260K")
        ->check(weft::tool::input_file());
    app.add_option("-p,--prompt", prompt, "prompt text (empty: start from BOS alone)");
    app.add_option("-n,--n-predict", n_predict,
                   "tokens to generate at most (stops earlier at end of generation)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    weft::tool::add_sampling_options(app, sampling);
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
    weft::tool::grammar_options constrain;
    weft::tool::add_grammar_options(app, constrain);
    weft::tool::add_speculative_options(app, speculative);
    weft::tool::lora_options loras;
    weft::tool::add_lora_options(app, loras);
    weft::tool::add_device_options(app, devices);
    std::string numa;
    weft::tool::add_numa_option(app, numa);
    app.add_flag("--list-devices", list_devices,
                 "print the devices weft can compute on, and exit (as `weft devices`)");
    app.add_option("--keep", n_keep,
                   "prompt tokens a context shift keeps, after the BOS (-1: the whole prompt; at most half "
                   "the context)")
        ->capture_default_str()
        ->check(CLI::Range(-1, 1 << 24));
    app.add_flag("--no-context-shift", no_context_shift,
                 "stop when the context is full instead of dropping the oldest half of the tokens after "
                 "--keep and going on");
    app.add_option("--prompt-cache", prompt_cache,
                   "state file for the prompt's KV cache: loaded when it exists (the prompt tokens it holds "
                   "are not decoded again), written after a run that could not reuse it")
        ->check(weft::tool::input_file(true));
    weft::tool::add_cache_type_options(app, cache_types);
    app.add_flag("--no-mmap", no_mmap, "read the weights into memory instead of mapping the file");
    app.add_flag("--no-repack", no_repack,
                 "keep every weight in the file mapping (no interleaved copies of q4_0, q4_K, iq4_nl ... for "
                 "faster products)");
    weft::tool::rank_options ranks;
    weft::tool::add_rank_options(app, ranks);
    weft::tool::vision_options vision;
    weft::tool::add_vision_options(app, vision);
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
    weft::tool::apply_numa_option(numa, n_threads);
    if (list_devices) {
        weft::tool::print_device_table();
        return 0;
    }
    devices.offload_device();  // an unknown device name fails before loading
    weft::tool::finish_sampling_options(sampling);
    sampling.params.grammar = weft::tool::resolve_grammar(constrain);
    const weft::sampling_params &sp = sampling.params;

    weft::model_params mp;
    mp.use_mmap = !no_mmap;
    mp.repack = !no_repack;
    auto model = devices.load(mp, [&](const weft::model_params &p) {
        return model_path.empty() ? weft::tool::load_model_or_default(model_path, p)
                                  : weft::tool::load_stage_model(model_path, p, ranks);
    });
    std::fprintf(stderr, "weft run: loaded %s in %.1f ms: %s\n", model->path().c_str(), model->load_ms(),
                 model->describe().c_str());

    weft::inference_params ip;
    ip.n_ctx = n_ctx ? n_ctx : uint32_t(std::min<int64_t>(model->hparams().n_ctx_train, 4096));
    ip.n_batch = n_batch;
    ip.n_ubatch = n_ubatch;
    ip.n_threads = n_threads;
    ip.n_threads_batch = n_threads_batch ? n_threads_batch : n_threads;
    cache_types.apply(ip);
    devices.apply(ip);
    weft::tool::report_placement(*model, ip, "run");
    loras.apply(*model, ip, "run");
    if (weft::tool::follow_rank_zero(*model, ip)) return 0;  // a rank > 0 of mpirun: its blocks only
    speculative.load_draft(*model, "run");
    weft::serving::engine_params ep;
    ep.n_slots = 1;
    ep.context = ip;
    ep.context_shift = !no_context_shift;
    ep.speculative = speculative.params;
    weft::serving::engine eng(*model, ep);
    const weft::inference_context &ctx = eng.context();

    const weft::vocab &vocab = model->vocab();
    // with images: each where the prompt marks it, or all before the prompt text
    weft::tool::image_prompt with_images = vision.encode(*model, prompt, ip.n_threads_batch, "run");
    std::vector<weft::token> tokens =
        vision.images.empty() ? vocab.tokenize(prompt, true, true) : std::move(with_images.tokens);
    if (tokens.empty()) {
        if (vocab.bos() == weft::token_null)
            throw weft::error("the prompt is empty and the vocabulary has no BOS token");
        tokens.push_back(vocab.bos());
    }

    std::fprintf(stderr, "weft run: prompt %zu tokens, context %u, sampler: %s\n", tokens.size(), ctx.n_ctx(),
                 weft::make_sampler_chain(sp, vocab)->describe().c_str());
    int32_t n_cache_loaded = 0;
    if (!prompt_cache.empty() && std::filesystem::exists(prompt_cache)) {
        eng.load_slot(0, prompt_cache);
        n_cache_loaded = eng.stats().slots[0].n_cached;
        std::fprintf(stderr, "weft run: prompt cache %s: loaded %d tokens\n", prompt_cache.c_str(),
                     n_cache_loaded);
    }
    weft::serving::request req;
    req.prompt = tokens;
    req.media = std::move(with_images.media);
    req.max_tokens = n_predict;
    req.sampling = sp;
    // the BOS always stays; -1 keeps the whole prompt
    const int32_t n_bos = vocab.bos() != weft::token_null && tokens.front() == vocab.bos() ? 1 : 0;
    req.n_keep = n_keep < 0 ? int32_t(tokens.size()) : std::min(int32_t(tokens.size()), n_keep + n_bos);
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
    if (done.n_shifts > 0)
        std::fprintf(stderr, "weft run: context shifted %d times, %d tokens dropped (kept the first %d)\n",
                     done.n_shifts, done.n_discarded, eng.shift_keep(req.n_keep));
    // A recurrent state holds all it has seen at once: it cannot drop the saved output to continue a
    // prompt that shares only part of it (no state checkpoints yet), so the prompt was decoded again.
    if (n_cache_loaded > 0 && done.n_cached == 0 && ctx.is_recurrent())
        std::fprintf(
            stderr,
            "weft run: prompt cache %s: not reused: %s is a %s model, whose saved state continues only "
            "a prompt that extends all %d saved tokens (the prompt and its output)\n",
            prompt_cache.c_str(), model->arch_name().c_str(), weft::memory_kind_name(ctx.memory().kind()),
            n_cache_loaded);
    if (!prompt_cache.empty() && size_t(done.n_cached) + 1 < tokens.size()) {
        // a shift moved the prompt's cells: what the slot holds no longer starts with the prompt
        if (done.n_shifts > 0) {
            std::fprintf(stderr, "weft run: prompt cache %s: not written (the context shifted)\n",
                         prompt_cache.c_str());
        } else {
            eng.save_slot(0, prompt_cache);
            std::fprintf(stderr, "weft run: prompt cache %s: saved %d tokens\n", prompt_cache.c_str(),
                         eng.stats().slots[0].n_cached);
        }
    }

    const weft::inference_perf p = ctx.perf();
    auto rate = [](int64_t n, double ms) { return ms > 0 ? 1000.0 * double(n) / ms : 0.0; };
    std::fprintf(stderr, "weft run: load %.1f ms\n", model->load_ms());
    std::fprintf(stderr,
                 "weft run: prompt %zu tokens (%d reused from the cache) in %.1f ms (%.2f tokens/s)\n",
                 tokens.size(), done.n_cached, done.prompt_ms, rate(int64_t(tokens.size()), done.prompt_ms));
    std::fprintf(
        stderr,
        "weft run: generated %d tokens in %.1f ms (%.2f tokens/s; single-token decode %lld calls, %.2f ms "
        "each)\n",
        n_generated, done.generate_ms, rate(n_generated > 0 ? n_generated - 1 : 0, done.generate_ms),
        (long long)p.n_eval, p.n_eval ? p.t_eval_ms / double(p.n_eval) : 0.0);
    if (done.n_drafted > 0 || speculative.params.enabled())
        std::fprintf(
            stderr,
            "weft run: speculative (%s): %d draft tokens verified, %d accepted (%.1f%%), %.2f tokens per "
            "target decode\n",
            speculative.params.draft ? "draft model" : "prompt lookup", done.n_drafted, done.n_draft_accepted,
            done.n_drafted > 0 ? 100.0 * double(done.n_draft_accepted) / double(done.n_drafted) : 0.0,
            n_generated > done.n_draft_accepted
                ? double(n_generated) / double(n_generated - done.n_draft_accepted)
                : 0.0);
    // a recurrent model keeps f32 states per sequence instead of a KV cache, a hybrid one both
    char memory[160];
    const weft::kv_cache *kv = ctx.memory().attention();
    const double kv_mib = kv ? double(kv->total_bytes()) / 1048576.0 : 0.0;
    const double states_mib = double(ctx.kv_bytes()) / 1048576.0 - kv_mib;
    if (!kv)
        std::snprintf(memory, sizeof memory, "recurrent states %.1f MiB (f32)", states_mib);
    else if (ctx.is_recurrent())
        std::snprintf(memory, sizeof memory, "KV %.1f MiB (K %s, V %s) + recurrent states %.1f MiB (f32)",
                      kv_mib, weft::type_name(kv->type_k()), weft::type_name(kv->type_v()), states_mib);
    else
        std::snprintf(memory, sizeof memory, "KV %.1f MiB (K %s, V %s)", kv_mib,
                      weft::type_name(kv->type_k()), weft::type_name(kv->type_v()));
    std::fprintf(stderr,
                 "weft run: graphs built %lld (%.2f ms), reused %lld; %s, compute %.1f MiB, threads %d/%d\n",
                 (long long)p.n_graph_builds, p.t_graph_build_ms, (long long)p.n_graph_reuses, memory,
                 double(ctx.compute_buffer_bytes()) / 1048576.0, ip.n_threads, ip.n_threads_batch);
    return 0;
}

const bool registered_run = weft::tool::register_command(
    {"run", "generate text from a prompt with a model (streamed to stdout)", &run_main});

}  // namespace
