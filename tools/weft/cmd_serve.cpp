// tools/weft/cmd_serve.cpp — `weft serve`: its command line, model loading (alone or on rank 0 of a
// pipeline) and signals, over the OpenAI-style HTTP layer (weft/server/openai_server.h).
#include <pthread.h>
#include <signal.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "weft/assets.h"
#include "weft/cache_types.h"
#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/device_options.h"
#include "weft/file_arguments.h"
#include "weft/lora_options.h"
#include "weft/model/model.h"
#include "weft/numa_options.h"
#include "weft/ranks.h"
#include "weft/runtime/context.h"
#include "weft/server/openai_server.h"
#include "weft/serving/conversation.h"
#include "weft/serving/engine.h"
#include "weft/speculative_options.h"
#include "weft/vision/clip.h"

namespace weft::tool {
namespace {

struct serve_options {
    std::string model_path;
    server::server_options http;
    uint32_t n_ctx = 0;  // all slots together; 0: slots x the model's training context (at most 4096)
    uint32_t n_batch = 512;
    int32_t prompt_first = 128;
    std::string chat_template;  // a family name or Jinja text; empty: the model's own
    bool no_context_shift = false;
    cache_type_options cache_types;
    device_options devices;
    speculative_options speculative;
    lora_options loras;
    rank_options ranks;  // under mpirun: the blocks of each rank
    std::string mmproj;  // the vision projector: images in chat messages
};

// SIGINT and SIGTERM stop the server from a thread that waits for them (a signal handler may not
// call into the server). Built before any other thread starts, so that every thread inherits the
// blocked mask and only this one receives them.
class signal_watcher {
  public:
    // `before_stop` runs first (it cancels the running requests, so their connections end at once).
    signal_watcher(std::function<void()> stop, std::function<void()> before_stop) {
        sigemptyset(&set_);
        sigaddset(&set_, SIGINT);
        sigaddset(&set_, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set_, nullptr);
        thread_ = std::thread([this, stop, before_stop] {
            int sig = 0;
            sigwait(&set_, &sig);
            if (quitting_) return;
            std::fprintf(stderr, "weft serve: signal %d, stopping\n", sig);
            signalled_ = true;
            before_stop();
            stop();
        });
    }
    signal_watcher(const signal_watcher &) = delete;
    signal_watcher &operator=(const signal_watcher &) = delete;
    // Wakes the thread if no signal came, and joins it.
    ~signal_watcher() {
        quitting_ = true;
        if (!signalled_) pthread_kill(thread_.native_handle(), SIGTERM);
        thread_.join();
    }
    bool signalled() const { return signalled_; }

  private:
    sigset_t set_;
    std::atomic<bool> quitting_{false};
    std::atomic<bool> signalled_{false};
    std::thread thread_;
};

int serve_main(int argc, char **argv) {
    CLI::App app{
        "Serves a model over HTTP with OpenAI, Anthropic and Ollama endpoints (docs/serving.md: every "
        "route):\n"
        "  POST /v1/chat/completions, /v1/completions (also without /v1): streaming (SSE) or not\n"
        "  GET  /v1/models, /v1/models/{id}, /health, /metrics (Prometheus), /props, /slots\n"
        "  POST /v1/embeddings; /v1/messages, /v1/messages/count_tokens (Anthropic); /v1/responses (OpenAI)\n"
        "  Ollama's /api/chat, /api/generate, /api/embed, /api/tags, /api/show, /api/ps, /api/version\n"
        "  POST /tokenize, /detokenize;  GET / a chat page\n"
        "  the reference's POST /completion (its own shape), /infill (FIM tokens), /apply-template\n"
        "  POST /v1/rerank (also /rerank, /v1/reranking, /reranking) with --reranking and a reranker\n"
        "Requests are queued first in, first out and run in -np parallel slots; every step decodes\n"
        "the tokens of all active slots in one batch (continuous batching). A slot keeps its cache\n"
        "after a request, and a new request goes to the slot holding the longest prefix of its\n"
        "prompt. Bad requests get an OpenAI error object (400; 401 without the --api-key, 404 for an\n"
        "unknown route, 413 for a body over --max-body, 503 with Retry-After when the queue is full).\n"
        "One log line per request goes to stderr; --port 0 picks a free port, which the \"listening\n"
        "on\" line names. SIGINT/SIGTERM cancel what runs and stop the server.",
        "weft serve"};
    serve_options opt;
    app.add_option("-m,--model", opt.model_path, "GGUF model file; none: the built-in stories260K")
        ->check(weft::tool::input_file());
    app.add_option("--host", opt.http.host, "address to listen on")->capture_default_str();
    app.add_option("--port", opt.http.port, "TCP port (0: any free one)")
        ->capture_default_str()
        ->check(CLI::Range(0, 65535));
    app.add_option("--parallel", opt.http.n_slots, "parallel slots (sequences decoded together), also -np")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    app.add_option("-c,--ctx-size", opt.n_ctx,
                   "KV cache cells for all slots together, each slot getting an equal share (0: slots x the "
                   "model's context, at most 4096 each)")
        ->capture_default_str()
        ->check(CLI::Range(0u, 1u << 26));
    app.add_option("-b,--batch-size", opt.n_batch, "most tokens per decode step (all slots together)")
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 20));
    app.add_option("-t,--threads", opt.http.n_threads, "threads (0: the hardware's, at most 4)")
        ->capture_default_str()
        ->check(CLI::Range(0, 512));
    app.add_option(
           "--chat-template", opt.chat_template,
           "template family (chatml, llama3, llama2, mistral-v7, phi3, zephyr, gemma ...) or Jinja text, "
           "instead of the model's")
        ->capture_default_str();
    std::string reasoning_format_text = "auto";
    app.add_option(
           "--reasoning-format", reasoning_format_text,
           "where a chat reply's thoughts (<think>...</think>, gpt-oss's analysis channel) go: none (left "
           "in content), deepseek (reasoning_content), deepseek-legacy (reasoning_content, and content "
           "keeps the tags), auto (as deepseek)")
        ->capture_default_str()
        ->check(CLI::IsMember({"none", "deepseek", "deepseek-legacy", "auto"}));
    app.add_option("-n,--n-predict", opt.http.n_predict, "max_tokens of a request that does not give one")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_option("--max-tokens", opt.http.max_tokens_cap,
                   "most tokens one request may generate (0: no limit)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_option("--api-key", opt.http.api_key, "require 'Authorization: Bearer KEY' (401 otherwise)");
    app.add_option("--timeout", opt.http.timeout_s,
                   "seconds a client may take to send a request or read a reply")
        ->capture_default_str()
        ->check(CLI::Range(1, 86400));
    app.add_option("--max-body", opt.http.max_body, "largest request body in bytes (413 above)")
        ->capture_default_str()
        ->check(CLI::Range(size_t(1024), size_t(1) << 30));
    app.add_option(
           "--prompt-first", opt.prompt_first,
           "decode new prompts alone (the generating slots wait one step) while they total at most "
           "this many tokens, for a short time to first token (0: always decode them beside the others)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_option("--max-queue", opt.http.max_queue,
                   "requests waiting for a slot at most (503 above; 0: no limit)")
        ->capture_default_str();
    app.add_option(
           "--http-threads", opt.http.http_threads,
           "threads running requests (0: 4 x slots + 16); connections wait for a whole request in one "
           "polling thread first, so slow or idle clients hold no thread")
        ->capture_default_str()
        ->check(CLI::Range(0, 4096));
    app.add_option("--http-nice", opt.http.http_nice,
                   "nice value of the HTTP threads, 0..19; the decode threads keep the process's. Above the "
                   "process's, the HTTP work of streamed tokens and of new requests waits for a free core "
                   "instead of preempting a decode step: more tokens/s, a later first token, when clients "
                   "and server share few cores (0: no change)")
        ->capture_default_str()
        ->check(CLI::Range(0, 19));
    app.add_option("--cors", opt.http.cors, "answer CORS preflights and allow this origin ('*' for any)");
    app.add_option("--ssl-cert-file", opt.http.ssl_cert_file,
                   "serve HTTPS with this certificate (PEM; a chain allowed), with --ssl-key-file");
    app.add_option("--ssl-key-file", opt.http.ssl_key_file, "the private key (PEM) of --ssl-cert-file");
    app.add_flag("--reranking,--rerank", opt.http.reranking,
                 "answer /v1/rerank with a reranker (a bert with a classification head, pooling rank: "
                 "`weft synth --arch bert --reranker` writes one); without it those routes answer 501");
    app.add_flag(
        "--no-context-shift", opt.no_context_shift,
        "a reply stops ('length') when its slot's context is full, instead of dropping the oldest half "
        "of the tokens after the request's n_keep and going on");
    add_cache_type_options(app, opt.cache_types);
    add_device_options(app, opt.devices);
    std::string numa;
    add_numa_option(app, numa);
    add_speculative_options(app, opt.speculative);
    add_lora_options(app, opt.loras);
    add_rank_options(app, opt.ranks);
    app.add_option("--mmproj", opt.mmproj,
                   "the vision projector of a multimodal model (mmproj GGUF): chat messages may then hold "
                   "image_url parts with data: URIs")
        ->check(weft::tool::input_file());
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
    apply_numa_option(numa, opt.http.n_threads);
    opt.http.reasoning = *reasoning_format_from_name(reasoning_format_text);  // checked by IsMember
    // under mpirun, ranks > 0 serve no HTTP: they hold their blocks and follow rank 0's engine
    if (rank() > 0) {
        if (opt.model_path.empty()) throw error("under mpirun, name the model file with -m");
        const std::unique_ptr<model> stage = load_stage_model(opt.model_path, {}, opt.ranks);
        inference_params from_rank_zero;
        follow_rank_zero(*stage, from_rank_zero);
        return 0;
    }

    // a client that hangs up mid-stream makes the next write fail (EPIPE) instead of killing us
    std::signal(SIGPIPE, SIG_IGN);
    opt.http.model_id = opt.model_path.empty() ? "stories260K" : "";
    std::unique_ptr<vision::clip_model> mmproj;
    if (!opt.mmproj.empty()) {
        mmproj = vision::clip_model::load(opt.mmproj);
        opt.http.mmproj = mmproj.get();
        std::fprintf(stderr, "weft serve: mmproj %s: %s\n", opt.mmproj.c_str(), mmproj->describe().c_str());
    }
    server::openai_server svr(opt.http);
    signal_watcher watcher([&svr] { svr.stop(); }, [&svr] { svr.cancel_all(); });
    const int port = svr.listen();
    // listening while the model loads: /health says "loading model", other routes 503
    svr.start();
    std::fprintf(stderr, "weft serve: listening on %s://%s:%d\n",
                 opt.http.ssl_cert_file.empty() ? "http" : "https", opt.http.host.c_str(), port);

    std::unique_ptr<model> loaded;
    std::unique_ptr<serving::engine> eng;
    try {
        loaded = opt.devices.load(model_params{}, [&](const model_params &p) {
            return n_ranks() > 1 ? load_stage_model(opt.model_path, p, opt.ranks)
                                 : load_model_or_default(opt.model_path, p);
        });
        if (n_ranks() > 1 && loaded->hparams().encoder)
            throw error(opt.model_path + ": an embedding model is not served across ranks");
        if (opt.http.reranking && !loaded->hparams().ranks())
            throw error(loaded->path() +
                        ": --reranking needs a reranker (a bert with a classification head, "
                        "<arch>.pooling_type 4); this model is not one");
        if (mmproj) mmproj->check_text_model(*loaded);
        const serving::template_choice chosen = serving::choose_chat_template(*loaded, opt.chat_template);
        const std::string template_source =
            chosen.fallback.empty() ? chosen.source : "fallback: " + chosen.fallback;
        uint32_t n_ctx_slot = 0;
        if (opt.n_ctx > 0) n_ctx_slot = opt.n_ctx / uint32_t(opt.http.n_slots);
        serving::engine_params ep;
        ep.n_slots = opt.http.n_slots;
        ep.max_queue = opt.http.max_queue;
        ep.prompt_first_tokens = opt.prompt_first;
        ep.context_shift = !opt.no_context_shift;
        ep.context = serving::conversation_params(*loaded, n_ctx_slot, opt.n_batch, opt.http.n_threads);
        ep.context.n_ctx = opt.n_ctx > 0 ? opt.n_ctx : ep.context.n_ctx * uint32_t(opt.http.n_slots);
        ep.context.n_batch = std::min(opt.n_batch, ep.context.n_ctx);
        ep.context.n_ubatch = std::min<uint32_t>(512, ep.context.n_batch);
        opt.cache_types.apply(ep.context);
        opt.devices.apply(ep.context);
        report_placement(*loaded, ep.context, "serve");
        opt.loras.apply(*loaded, ep.context, "serve");
        opt.speculative.load_draft(*loaded, "serve");
        ep.speculative = opt.speculative.params;
        follow_rank_zero(*loaded, ep.context);  // rank 0 (or alone): the engine's context drives the ranks
        eng = std::make_unique<serving::engine>(*loaded, ep);
        std::fprintf(stderr, "weft serve: %s: %s\n", loaded->path().c_str(), loaded->describe().c_str());
        std::fprintf(stderr,
                     "weft serve: %d slots of %u tokens (context %u), %d threads, chat template %s (%s)\n",
                     eng->n_slots(), eng->n_ctx_slot(), eng->n_ctx(), ep.context.n_threads,
                     chosen.name().c_str(), template_source.c_str());
        std::fprintf(stderr, "weft serve: KV cache K %s, V %s\n", type_name(ep.context.type_k),
                     type_name(ep.context.type_v));
        eng->start();
        svr.set_ready(*loaded, *eng, chosen, template_source);
    } catch (...) {
        svr.stop();
        svr.wait();
        throw;
    }
    svr.wait();   // until SIGINT/SIGTERM stops the server
    eng->stop();  // whatever still runs ends as cancelled
    std::fprintf(stderr, "weft serve: stopped\n");
    return 0;
}

[[maybe_unused]] const bool registered_serve = register_command(
    {"serve", "serve a model over HTTP: OpenAI, Anthropic and Ollama APIs, streaming, a chat page",
     &serve_main});

}  // namespace
}  // namespace weft::tool
