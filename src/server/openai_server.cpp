// src/server/openai_server.cpp — the routes of the OpenAI-style server over the serving engine
// (completions, chat, SSE streams, embeddings, tokenize, health, metrics, props, slots, the chat
// page); request bodies are read by openai_request.h, whole requests admitted by http_gate.h. The
// Anthropic, Responses and Ollama routes (anthropic_api.h, responses_api.h, ollama_api.h) run
// through the same reading and engine, lent to them as a generation_host (api_common.h).
#include "weft/server/openai_server.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/anthropic_api.h"
#include "server/api_common.h"
#include "server/chat_page.h"
#include "server/http_gate.h"
#include "server/native_api.h"
#include "server/ollama_api.h"
#include "server/openai_request.h"
#include "server/rerank_api.h"
#include "server/responses_api.h"
#include "server/tool_calls.h"
#include "weft/core/error.h"
#include "weft/grammar/grammar.h"
#include "weft/grammar/json_schema.h"
#include "weft/runtime/context.h"
#include "weft/runtime/embeddings.h"
#include "weft/sampling/sampling.h"
#include "weft/serving/text.h"
#include "weft/template/chat_template.h"
#include "weft/template/reasoning.h"

namespace weft::server {
namespace {

using steady = std::chrono::steady_clock;

// --- one line of log per request: the logger prints what the handler noted on this thread

struct request_note {
    steady::time_point start;
    bool started = false;
    std::string detail;               // "prompt 12 tokens (5 cached), 16 generated, finish length"
    api_kind api = api_kind::openai;  // the API of the route: the shape of its errors
};
thread_local request_note this_request;

// A refused request in the error shape of its route's API (OpenAI's, Anthropic's or Ollama's).
void send_error(httplib::Response &res, const std::string &message, int status) {
    res.status = status;
    res.set_content(error_body_for(this_request.api, message, status).dump(), "application/json");
}

void log_request(const httplib::Request &req, int status) {
    const double ms =
        this_request.started
            ? std::chrono::duration<double, std::milli>(steady::now() - this_request.start).count()
            : 0.0;
    std::fprintf(stderr, "weft serve: %s %s %s -> %d in %.1f ms%s%s\n", req.remote_addr.c_str(),
                 req.method.c_str(), req.path.c_str(), status, ms, this_request.detail.empty() ? "" : ": ",
                 this_request.detail.c_str());
    this_request = {};
}

// The body as a JSON object (the fields are read by openai_request_reader).
json parse_body(const httplib::Request &req) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw request_error("the request body is not valid JSON");
    if (!body.is_object())
        throw request_error("the request body must be a JSON object, got " + json_kind(body));
    return body;
}

// Whether an Authorization header carries `key` as its Bearer token: the scheme is matched without
// regard to case (RFC 9110 says it is case-insensitive: "bearer KEY" is as good as "Bearer KEY"),
// the token byte for byte and whole (a token with anything after it, a NUL included, is another
// token), in time that does not depend on where the first difference is.
bool bearer_token_matches(const std::string &authorization, const std::string &key) {
    static constexpr std::string_view scheme = "bearer";
    if (authorization.size() <= scheme.size() || authorization[scheme.size()] != ' ') return false;
    for (size_t i = 0; i < scheme.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return false;
    size_t at = scheme.size();
    while (at < authorization.size() && authorization[at] == ' ') ++at;
    const std::string_view token = std::string_view(authorization).substr(at);
    unsigned char difference = token.size() == key.size() ? 0 : 1;
    for (size_t i = 0; i < key.size(); ++i)
        difference |= static_cast<unsigned char>(key[i] ^ (i < token.size() ? token[i] : ~key[i]));
    return difference == 0;
}

// --- the server

// The server's metrics beyond the engine's.
struct http_counters {
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> errors{0};
    std::atomic<uint64_t> rejected_busy{0};
};

class routes : public native_host {
  public:
    explicit routes(const server_options &opt) : opt_(opt), created_(int64_t(std::time(nullptr))) {}

    // Called once the model is loaded; until then every route but /health answers 503.
    void set_ready(const model &m, serving::engine &eng, serving::template_choice tmpl,
                   std::string template_source) {
        model_ = &m;
        engine_ = &eng;
        template_ = std::move(tmpl);
        reader_ = std::make_unique<openai_request_reader>(
            m, template_, opt_.n_predict, opt_.max_tokens_cap, eng.context().loras().size(), opt_.mmproj,
            opt_.n_threads > 0 ? opt_.n_threads : 2, int64_t(eng.n_ctx_slot()));
        template_source_ = std::move(template_source);
        model_id_ = opt_.model_id.empty() ? m.name() : opt_.model_id;
        if (m.hparams().encoder) {  // an embedding model answers /v1/embeddings with its own context
            inference_params ip;
            ip.n_ctx = uint32_t(m.hparams().n_ctx_train);
            ip.n_batch = ip.n_ubatch = ip.n_ctx;
            ip.n_threads = ip.n_threads_batch = opt_.n_threads > 0 ? opt_.n_threads : 0;
            if (m.hparams().ranks()) ip.n_seq_max = rerank_max_sequences;  // a request's documents batched
            embed_ctx_ = std::make_unique<inference_context>(m, ip);
        }
        rerank_ = std::make_unique<rerank_service>(m, embed_ctx_.get(), embed_mutex_, opt_.reranking);
        ready_ = true;
    }

    void install(httplib::Server &svr) {
        svr.set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
            this_request = {};
            this_request.start = steady::now();
            this_request.started = true;
            this_request.api = api_of_path(req.path);
            ++counters_.requests;
            if (!opt_.cors.empty()) {
                res.set_header("Access-Control-Allow-Origin", opt_.cors);
                res.set_header("Access-Control-Allow-Headers",
                               "Authorization, Content-Type, x-api-key, anthropic-version");
                res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
                if (req.method == "OPTIONS") {
                    res.status = 204;
                    return httplib::Server::HandlerResponse::Handled;
                }
            }
            // Range is for files: on these routes it would only let one request multiply its answer
            // (many overlapping ranges), so it is ignored. The request object is the server's own
            // (not const), handed to us as const.
            const_cast<httplib::Request &>(req).ranges.clear();
            if (req.path == "/health" || req.path == "/") return httplib::Server::HandlerResponse::Unhandled;
            if (!opt_.api_key.empty() && !key_matches(req)) {
                res.set_header("WWW-Authenticate", "Bearer");
                send_error(
                    res, "invalid or missing API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')",
                    401);
                return httplib::Server::HandlerResponse::Handled;
            }
            if (!ready_) {
                res.set_header("Retry-After", "1");
                send_error(res, "the model is still loading", 503);
                return httplib::Server::HandlerResponse::Handled;
            }
            return httplib::Server::HandlerResponse::Unhandled;
        });
        svr.set_logger([this](const httplib::Request &req, const httplib::Response &res) {
            if (res.status >= 400) ++counters_.errors;
            log_request(req, res.status);
        });
        // httplib calls this for every status >= 400; routes that set their own body keep it
        svr.set_error_handler(
            httplib::Server::HandlerWithResponse([](const httplib::Request &req, httplib::Response &res) {
                if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
                const std::string message =
                    res.status == 404 ? "unknown route: " + req.method + " " + req.path
                    : res.status == 413
                        ? "the request body is larger than the server accepts (--max-body)"
                        : "the request could not be handled (HTTP " + std::to_string(res.status) + ")";
                send_error(res, message, res.status);
                return httplib::Server::HandlerResponse::Handled;
            }));
        svr.set_exception_handler(
            [](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
                std::string message = "internal error";
                try {
                    if (ep) std::rethrow_exception(ep);
                } catch (const std::exception &e) {
                    message = std::string("internal error: ") + e.what();
                } catch (...) {
                }
                send_error(res, message, 500);
            });

        svr.Get("/", [](const httplib::Request &, httplib::Response &res) {
            res.set_content(std::string(chat_page()), "text/html; charset=utf-8");
        });
        svr.Get("/health", [this](const httplib::Request &req, httplib::Response &res) { health(req, res); });
        auto models = [this](const httplib::Request &, httplib::Response &res) {
            res.set_content(json{{"object", "list"}, {"data", json::array({model_object()})}}.dump(),
                            "application/json");
        };
        svr.Get("/v1/models", models);
        svr.Get("/models", models);
        auto one_model = [this](const httplib::Request &req, httplib::Response &res) {
            const std::string wanted = req.matches.size() > 1 ? req.matches[1].str() : std::string();
            if (wanted != model_id_) {
                send_error(res,
                           "the model '" + wanted + "' does not exist (this server has '" + model_id_ + "')",
                           404);
                return;
            }
            res.set_content(model_object().dump(), "application/json");
        };
        svr.Get(R"(/v1/models/(.+))", one_model);
        svr.Get(R"(/models/(.+))", one_model);
        for (const char *path : {"/v1/completions", "/completions"})
            svr.Post(path, [this](const httplib::Request &req, httplib::Response &res) {
                guarded(res, [&] { generate(req, res, false); });
            });
        for (const char *path : {"/v1/chat/completions", "/chat/completions"})
            svr.Post(path, [this](const httplib::Request &req, httplib::Response &res) {
                guarded(res, [&] { generate(req, res, true); });
            });
        for (const char *path : {"/v1/embeddings", "/embeddings"})
            svr.Post(path, [this](const httplib::Request &req, httplib::Response &res) {
                guarded(res, [&] { embeddings(req, res); });
            });
        for (const char *path : {"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"})
            svr.Post(path, [this](const httplib::Request &req, httplib::Response &res) {
                guarded(res, [&] {
                    res.set_content(rerank_->answer(json_object_body(req.body), model_id_).dump(),
                                    "application/json");
                });
            });
        svr.Post("/tokenize", [this](const httplib::Request &req, httplib::Response &res) {
            guarded(res, [&] { tokenize(req, res); });
        });
        svr.Post("/detokenize", [this](const httplib::Request &req, httplib::Response &res) {
            guarded(res, [&] { detokenize(req, res); });
        });
        svr.Get("/lora-adapters",
                [this](const httplib::Request &, httplib::Response &res) { lora_adapters(res); });
        svr.Post("/lora-adapters", [this](const httplib::Request &req, httplib::Response &res) {
            guarded(res, [&] { set_lora_adapters(req, res); });
        });
        svr.Get("/props", [this](const httplib::Request &, httplib::Response &res) { props(res); });
        svr.Get("/slots", [this](const httplib::Request &, httplib::Response &res) { slots(res); });
        svr.Get("/metrics", [this](const httplib::Request &, httplib::Response &res) { metrics(res); });
        install_other_apis(svr);
    }

    // On SIGINT/SIGTERM: running and queued requests end now, as cancelled, and so does the grammar
    // work of requests still being read (a large schema's conversion does not hold the shutdown).
    void cancel_all() {
        cancel_grammar_work();
        if (ready_) engine_->stop();
    }

  private:
    // The API key as a Bearer token, or as Anthropic's clients send it (x-api-key), each header once.
    bool key_matches(const httplib::Request &req) const {
        if (req.get_header_value_count("Authorization") == 1)
            return bearer_token_matches(req.get_header_value("Authorization"), opt_.api_key);
        return req.get_header_value_count("x-api-key") == 1 &&
               bearer_token_matches("Bearer " + req.get_header_value("x-api-key"), opt_.api_key);
    }

    // Anthropic's Messages, OpenAI's Responses and Ollama's routes (their errors take their shapes
    // by the path: api_of_path).
    void install_other_apis(httplib::Server &svr) {
        using handler = void (*)(generation_host &, const httplib::Request &, httplib::Response &);
        const std::pair<const char *, handler> posts[] = {
            {"/v1/messages", anthropic_messages}, {"/v1/messages/count_tokens", anthropic_count_tokens},
            {"/v1/responses", responses_create},  {"/responses", responses_create},
            {"/api/chat", ollama_chat},           {"/api/generate", ollama_generate},
            {"/api/embed", ollama_embed},         {"/api/embeddings", ollama_embeddings},
            {"/api/show", ollama_show},
        };
        for (const auto &[path, fn] : posts)
            svr.Post(path, [this, fn](const httplib::Request &req, httplib::Response &res) {
                guarded(res, [&] { fn(*this, req, res); });
            });
        svr.Get("/api/tags",
                [this](const httplib::Request &, httplib::Response &res) { ollama_tags(*this, res); });
        svr.Get("/api/ps",
                [this](const httplib::Request &, httplib::Response &res) { ollama_ps(*this, res); });
        svr.Get("/api/version",
                [](const httplib::Request &, httplib::Response &res) { ollama_version(res); });
        // the reference's own routes (native_api.h)
        using native_handler = void (*)(native_host &, const httplib::Request &, httplib::Response &);
        const std::pair<const char *, native_handler> native[] = {
            {"/completion", native_completion},
            {"/infill", native_infill},
            {"/apply-template", native_apply_template},
        };
        for (const auto &[path, fn] : native)
            svr.Post(path, [this, fn](const httplib::Request &req, httplib::Response &res) {
                guarded(res, [&] { fn(*this, req, res); });
            });
    }

    // --- what the other APIs borrow (generation_host)

    parsed_request read_openai(const json &body, bool chat) const override {
        if (embed_ctx_) throw request_error("the model '" + model_id_ + "' produces embeddings, not text");
        return reader_->parse(body, chat);
    }
    std::shared_ptr<serving::job> submit_one(const parsed_request &p) override { return submit_all(p).at(0); }
    const model &served_model() const override { return *model_; }
    const std::string &served_model_id() const override { return model_id_; }
    const serving::engine &served_engine() const override { return *engine_; }
    bool renders_tools() const override { return !template_.jinja.empty(); }
    bool sees_images() const override { return opt_.mmproj != nullptr; }
    bool embeds() const override { return embed_ctx_ != nullptr; }
    int64_t started_at() const override { return created_; }
    reasoning_splitter thought_splitter(const parsed_request &p) const override {
        return reasoning_splitter(reply_style(p, 0), p.chat ? opt_.reasoning : reasoning_format::none);
    }
    std::string chat_prompt_text(const std::string &body_text) const override {
        return reader_->render_prompt(body_text);
    }
    std::vector<std::shared_ptr<serving::job>> submit_jobs(const parsed_request &p) override {
        return submit_all(p);
    }
    int32_t default_n_predict() const override { return opt_.n_predict; }

    void embeddings(const httplib::Request &req, httplib::Response &res) {
        res.set_content(openai_embeddings(parse_body(req)).dump(), "application/json");
    }

    // POST /v1/embeddings: "input" a string, an array of strings, an array of token ids or an array
    // of such arrays; one vector per input, pooled as the model says and scaled to unit length (as
    // OpenAI's are); "encoding_format" "float" (default) or "base64" (little-endian float32).
    json openai_embeddings(const json &body) override {
        if (!embed_ctx_)
            throw request_error("the model '" + model_id_ +
                                "' does not produce embeddings (it generates text; embedding models: bert)");
        const auto input = body.find("input");
        if (input == body.end()) throw request_error("'input' is required");
        std::vector<std::vector<token>> inputs;
        auto tokens_of = [&](const json &item) -> std::vector<token> {
            if (item.is_string()) return model_->vocab().tokenize(item.get<std::string>(), true, true);
            if (item.is_array() &&
                std::all_of(item.begin(), item.end(), [](const json &t) { return t.is_number_integer(); })) {
                std::vector<token> ids;
                for (const json &t : item)
                    ids.push_back(token_value(t, "'input' token ids", model_->vocab().n_tokens()));
                return ids;
            }
            throw request_error(
                "'input' must be a string, an array of strings, or token ids (arrays of integers)");
        };
        if (input->is_array() && !input->empty() && !input->front().is_number_integer()) {
            for (const json &item : *input) inputs.push_back(tokens_of(item));
        } else {
            inputs.push_back(tokens_of(*input));
        }
        if (inputs.empty()) throw request_error("'input' is an empty array");
        const std::string format = body.value("encoding_format", std::string("float"));
        if (format != "float" && format != "base64")
            throw request_error("'encoding_format' must be \"float\" or \"base64\", got \"" + format + "\"");
        const pooling_kind pooling = pooling_kind(model_->hparams().pooling_type);
        if (pooling == pooling_kind::none)
            throw request_error("the model's pooling is 'none': it has no one vector per input");
        if (pooling == pooling_kind::rank)
            throw request_error("the model '" + model_id_ +
                                "' is a reranker: it scores documents (/v1/rerank), "
                                "it does not embed");
        json data = json::array();
        int64_t n_tokens = 0;
        for (size_t i = 0; i < inputs.size(); ++i) {
            const std::vector<token> &t = inputs[i];
            if (t.empty()) throw request_error("input " + std::to_string(i) + " has no tokens");
            if (int64_t(t.size()) > int64_t(embed_ctx_->n_ctx()))
                throw request_error("input " + std::to_string(i) + " has " + std::to_string(t.size()) +
                                    " tokens; the model takes at most " +
                                    std::to_string(embed_ctx_->n_ctx()));
            std::vector<float> v;
            {
                std::lock_guard<std::mutex> lock(embed_mutex_);
                v = compute_embeddings(*embed_ctx_, t, pooling, true).pooled;
            }
            n_tokens += int64_t(t.size());
            json item = {{"object", "embedding"}, {"index", i}};
            if (format == "base64")
                item["embedding"] = base64_of(v.data(), v.size() * sizeof(float));
            else
                item["embedding"] = v;
            data.push_back(std::move(item));
        }
        return {{"object", "list"},
                {"data", std::move(data)},
                {"model", model_id_},
                {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
    }

    static std::string base64_of(const void *data, size_t n) {
        static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const auto *p = static_cast<const unsigned char *>(data);
        std::string out;
        out.reserve((n + 2) / 3 * 4);
        for (size_t i = 0; i < n; i += 3) {
            const uint32_t b =
                uint32_t(p[i]) << 16 | (i + 1 < n ? uint32_t(p[i + 1]) << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
            out += digits[b >> 18 & 63];
            out += digits[b >> 12 & 63];
            out += i + 1 < n ? digits[b >> 6 & 63] : '=';
            out += i + 2 < n ? digits[b & 63] : '=';
        }
        return out;
    }

    // Turns a refused request into its error response; any other failure into a 500.
    template <class Fn>
    void guarded(httplib::Response &res, Fn &&fn) {
        try {
            fn();
        } catch (const request_error &e) {
            this_request.detail = e.what();
            if (e.status() == 503) res.set_header("Retry-After", "1");
            send_error(res, e.what(), e.status());
        } catch (const std::exception &e) {
            this_request.detail = e.what();
            send_error(res, e.what(), 500);
        }
    }

    json model_object() const {
        return {{"id", model_id_},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "weft"},
                {"meta",
                 {{"n_ctx", engine_ ? engine_->n_ctx() : 0},
                  {"n_ctx_slot", engine_ ? engine_->n_ctx_slot() : 0},
                  {"describe", model_ ? model_->describe() : ""}}}};
    }

    // ok while a slot is free or the queue takes requests; "loading" before the model is ready;
    // with ?fail_on_no_slot=1, 503 when every slot is busy.
    void health(const httplib::Request &req, httplib::Response &res) {
        if (!ready_) {
            res.status = 503;
            res.set_content(json{{"status", "loading model"}}.dump(), "application/json");
            return;
        }
        const serving::engine_stats st = engine_->stats();
        const int idle = st.n_slots - st.busy_slots;
        json body = {{"status", "ok"},
                     {"slots_idle", idle},
                     {"slots_processing", st.busy_slots},
                     {"queued", st.queued}};
        if (idle == 0 && req.has_param("fail_on_no_slot") && req.get_param_value("fail_on_no_slot") != "0") {
            body["status"] = "no slot available";
            res.status = 503;
        }
        res.set_content(body.dump(), "application/json");
    }

    // A reply's tool calls as OpenAI's message fields (null when there are none).
    static json tool_calls_json(const parsed_reply &r, bool with_index) {
        json calls = json::array();
        for (size_t i = 0; i < r.calls.size(); ++i) {
            json c = {{"id", "call_" + random_id()},
                      {"type", "function"},
                      {"function", {{"name", r.calls[i].name}, {"arguments", r.calls[i].arguments}}}};
            if (with_index) c["index"] = i;
            calls.push_back(std::move(c));
        }
        return calls;
    }

    // The jobs of one request: choice index k = prompt * n + j.
    std::vector<std::shared_ptr<serving::job>> submit_all(const parsed_request &p) {
        std::vector<std::shared_ptr<serving::job>> jobs;
        try {
            for (size_t i = 0; i < p.prompts.size(); ++i)
                for (int32_t j = 0; j < p.n; ++j) {
                    serving::request r = p.base;
                    r.prompt = p.prompts[i];
                    if (i == 0) r.media = p.media;
                    if (r.n_keep < 0) r.n_keep = int32_t(r.prompt.size());
                    const uint32_t k = uint32_t(i) * uint32_t(p.n) + uint32_t(j);
                    if (r.sampling.seed != sampler_seed_random) r.sampling.seed += k;
                    jobs.push_back(engine_->submit(std::move(r)));
                }
        } catch (const serving::queue_full &e) {
            for (auto &j : jobs) j->cancel();
            ++counters_.rejected_busy;
            throw request_error(std::string("the server is busy: ") + e.what() + "; retry later", 503);
        } catch (const error &e) {
            for (auto &j : jobs) j->cancel();
            throw request_error(e.what());
        }
        return jobs;
    }

    json envelope(const std::string &id, int64_t created, bool chat, bool chunk) const {
        return {{"id", id},
                {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
                {"created", created},
                {"model", model_id_},
                {"system_fingerprint", "weft"}};
    }

    // Log-probabilities of some tokens in OpenAI's shape for chat (content list, each entry also
    // with the token's "id", which clients ignore) or completions.
    json logprobs_json(const std::vector<serving::generated_token> &tokens, bool chat,
                       size_t text_offset) const {
        const vocab &v = model_->vocab();
        if (chat) return {{"content", token_probabilities_json(v, tokens)}};
        json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
        for (const auto &g : tokens) {
            const std::string piece = v.token_to_piece(g.id, false);
            toks.push_back(serving::utf8_sanitize(piece));
            lps.push_back(g.logprob);
            json top = json::object();
            for (const auto &t : g.top)
                top[serving::utf8_sanitize(v.token_to_piece(t.id, false))] = t.logprob;
            tops.push_back(top);
            offsets.push_back(text_offset);
            text_offset += piece.size();
        }
        return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
    }

    // Completions' text_offset counts from the start of the prompt (OpenAI's legacy API): the
    // first generated token of choice k sits at the length of its prompt's text (in bytes).
    size_t prompt_offset(const parsed_request &p, size_t k) const {
        return p.prompt_text_bytes[k / size_t(p.n)];
    }

    static std::string note(const std::vector<serving::completion> &done) {
        std::string out;
        for (const auto &c : done) {
            if (!out.empty()) out += "; ";
            out += "prompt " + std::to_string(c.n_prompt) + " tokens (" + std::to_string(c.n_cached) +
                   " cached), " + std::to_string(c.tokens.size()) + " generated, finish " +
                   serving::finish_reason_name(c.finish) + ", slot " + std::to_string(c.slot);
        }
        return out;
    }

    json usage(const parsed_request &p, const std::vector<serving::completion> &done) const {
        size_t prompt_tokens = 0, completion_tokens = 0;
        for (const auto &t : p.prompts) prompt_tokens += t.size();
        for (const auto &c : done) completion_tokens += c.tokens.size();
        return {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}};
    }

    // llama-server's "timings" of a response: prompt and generation times, and with speculative
    // decoding the draft tokens verified and accepted.
    static json timings(const std::vector<serving::completion> &done) {
        double prompt_ms = 0.0, predicted_ms = 0.0;
        int64_t prompt_n = 0, predicted_n = 0, draft_n = 0, draft_accepted = 0;
        for (const auto &c : done) {
            prompt_n += c.n_prompt - c.n_cached;
            prompt_ms += c.prompt_ms;
            predicted_n += int64_t(c.tokens.size());
            predicted_ms += c.generate_ms;
            draft_n += c.n_drafted;
            draft_accepted += c.n_draft_accepted;
        }
        json t = {
            {"prompt_n", prompt_n},
            {"prompt_ms", prompt_ms},
            {"predicted_n", predicted_n},
            {"predicted_ms", predicted_ms},
            {"predicted_per_second", predicted_ms > 0 ? 1000.0 * double(predicted_n) / predicted_ms : 0.0}};
        if (draft_n > 0) {
            t["draft_n"] = draft_n;
            t["draft_n_accepted"] = draft_accepted;
            t["draft_acceptance_rate"] = double(draft_accepted) / double(draft_n);
        }
        return t;
    }

    void generate(const httplib::Request &req, httplib::Response &res, bool chat) {
        if (embed_ctx_)
            throw request_error("the model '" + model_id_ +
                                "' produces embeddings, not text: use /v1/embeddings");
        const json body = parse_body(req);
        auto p = std::make_shared<parsed_request>(reader_->parse(body, chat));
        auto jobs = std::make_shared<std::vector<std::shared_ptr<serving::job>>>(submit_all(*p));
        const std::string id = (chat ? "chatcmpl-" : "cmpl-") + random_id();
        const int64_t created = int64_t(std::time(nullptr));
        if (p->stream)
            stream(res, p, jobs, id, created);
        else
            whole(res, p, jobs, id, created);
    }

    // How choice k's reply writes its thoughts: the template's syntax, and whether its prompt (the
    // generation prompt included) opened the thought.
    reasoning_style reply_style(const parsed_request &p, size_t k) const {
        const std::string &tmpl = template_.jinja.empty() ? template_.name() : template_.jinja;
        const std::vector<token> &prompt = p.prompts[k / size_t(p.n)];
        const size_t tail = std::min<size_t>(prompt.size(), 16);
        return reasoning_style_of(
            tmpl, model_->vocab().detokenize(std::span(prompt).subspan(prompt.size() - tail), true));
    }

    // Not streamed: the answer is one JSON object once every choice is done, with the status of its
    // outcome (a choice that failed, e.g. on NaN logits, makes it a 500 with the reason, never a 200).
    // The wait writes nothing; a client that goes away meanwhile is seen by its hang-up (every 50 ms)
    // and cancels the jobs.
    void whole(httplib::Response &res, std::shared_ptr<parsed_request> p,
               std::shared_ptr<std::vector<std::shared_ptr<serving::job>>> jobs, const std::string &id,
               int64_t created) {
        // only the outcome is read, so the jobs' events are not queued and this thread is not woken
        // per token
        for (auto &j : *jobs) j->ignore_events();
        for (auto &j : *jobs)
            while (!j->finished()) {
                j->wait_finished(std::chrono::milliseconds(50));
                if (!client_still_connected()) {
                    for (auto &other : *jobs) other->cancel();
                    this_request.detail = "the client went away";
                    send_error(res, "the client went away", 499);
                    return;
                }
            }
        std::vector<serving::completion> done;
        for (auto &j : *jobs) done.push_back(j->result());
        this_request.detail = note(done);
        for (const serving::completion &c : done)
            if (c.finish == serving::finish_reason::error) {
                send_error(res, c.error, 500);
                return;
            }
        json out = envelope(id, created, p->chat, false);
        out["choices"] = json::array();
        for (size_t k = 0; k < done.size(); ++k) {
            const serving::completion &c = done[k];
            std::string text = c.text;
            if (p->echo) text = model_->vocab().detokenize(p->prompts[k / size_t(p->n)]) + text;
            json choice = {{"index", k}, {"finish_reason", serving::finish_reason_name(c.finish)}};
            if (p->chat) {
                const reasoning_split split = split_reasoning(text, reply_style(*p, k), opt_.reasoning);
                choice["message"] = {{"role", "assistant"}, {"content", split.content}};
                if (!split.reasoning.empty()) choice["message"]["reasoning_content"] = split.reasoning;
                if (p->tools) {
                    parsed_reply reply = parse_tool_calls(split.content);
                    for (const reasoning_tool_call &c : split.tool_calls)
                        reply.calls.push_back({c.name, c.arguments});
                    if (!reply.calls.empty()) {
                        choice["message"]["content"] =
                            reply.content.empty() ? json(nullptr) : json(reply.content);
                        choice["message"]["tool_calls"] = tool_calls_json(reply, false);
                        choice["finish_reason"] = "tool_calls";
                    }
                }
                choice["logprobs"] = p->logprobs ? logprobs_json(c.tokens, true, 0) : json(nullptr);
            } else {
                choice["text"] = text;
                choice["logprobs"] =
                    p->logprobs ? logprobs_json(c.tokens, false, prompt_offset(*p, k)) : json(nullptr);
            }
            out["choices"].push_back(choice);
        }
        out["usage"] = usage(*p, done);
        out["timings"] = timings(done);
        res.set_content(out.dump(), "application/json");
    }

    // Streamed: Server-Sent Events, one chunk per piece of text of each choice, nothing before the
    // first piece (a queued request sends only SSE comments, which clients ignore, to notice a
    // client that went away), then a final chunk per choice with its finish reason, the usage
    // chunk when asked for, and "data: [DONE]".
    void stream(httplib::Response &res, std::shared_ptr<parsed_request> p,
                std::shared_ptr<std::vector<std::shared_ptr<serving::job>>> jobs, const std::string &id,
                int64_t created) {
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream", [this, p, jobs, id, created](size_t, httplib::DataSink &sink) {
                auto write = [&sink](const std::string &s) {
                    return sink.is_writable() && sink.write(s.data(), s.size());
                };
                auto send = [&](const json &event) { return write("data: " + event.dump() + "\n\n"); };
                auto cancel_all = [&] {
                    for (auto &j : *jobs) j->cancel();
                    std::vector<serving::completion> done;
                    serving::event ignored;
                    for (auto &j : *jobs) {  // the engine ends them at its next step
                        const auto until = steady::now() + std::chrono::seconds(2);
                        while (!j->finished() && steady::now() < until)
                            j->wait_event(ignored, std::chrono::milliseconds(20));
                        done.push_back(j->result());
                    }
                    this_request.detail = "client went away: " + note(done);
                    return false;
                };
                std::vector<bool> role_sent(jobs->size(), false), done_flags(jobs->size(), false);
                std::vector<reasoning_splitter> splitters;  // chat: each choice's reply split as it comes
                std::vector<reasoning_split> replies;       // and what of it went out, together
                if (p->chat)
                    for (size_t k = 0; k < jobs->size(); ++k) {
                        splitters.emplace_back(reply_style(*p, k), opt_.reasoning);
                        replies.emplace_back();
                    }
                std::vector<size_t> offsets(jobs->size(), 0);
                if (!p->chat && p->logprobs)
                    for (size_t k = 0; k < offsets.size(); ++k) offsets[k] = prompt_offset(*p, k);
                size_t n_done = 0;
                auto last_write = steady::now();
                while (n_done < jobs->size()) {
                    bool any = false;
                    for (size_t k = 0; k < jobs->size(); ++k) {
                        if (done_flags[k]) continue;
                        serving::event ev;
                        while ((*jobs)[k]->poll_event(ev)) {
                            any = true;
                            json c = envelope(id, created, p->chat, true);
                            json choice = {{"index", k}, {"finish_reason", nullptr}};
                            if (ev.final) {
                                const serving::completion r = (*jobs)[k]->result();
                                if (r.finish == serving::finish_reason::error) {
                                    // the error object as an event, then the usual end, so a
                                    // client waiting for [DONE] is not left hanging
                                    for (auto &other : *jobs) other->cancel();
                                    send(error_body_for(api_kind::openai, r.error, 500));
                                    write("data: [DONE]\n\n");
                                    this_request.detail = r.error;
                                    sink.done();
                                    return true;
                                }
                                choice["finish_reason"] = serving::finish_reason_name(r.finish);
                                done_flags[k] = true;
                                ++n_done;
                            }
                            if (p->chat) {
                                json delta = json::object();
                                if (!role_sent[k]) delta["role"] = "assistant";
                                role_sent[k] = true;
                                reasoning_split piece = splitters[k].feed(ev.text);
                                if (ev.final) {
                                    reasoning_split rest = splitters[k].finish();
                                    piece.reasoning += rest.reasoning;
                                    piece.content += rest.content;
                                    for (auto &c2 : rest.tool_calls)
                                        piece.tool_calls.push_back(std::move(c2));
                                }
                                replies[k].content += piece.content;
                                for (auto &c2 : piece.tool_calls)
                                    replies[k].tool_calls.push_back(std::move(c2));
                                if (!piece.reasoning.empty()) delta["reasoning_content"] = piece.reasoning;
                                if (!piece.content.empty()) delta["content"] = piece.content;
                                // text the splitter holds back (a tag begun) says nothing yet
                                if (delta.empty() && !ev.final && !p->logprobs) continue;
                                if (ev.final && p->tools) {  // the calls, once the reply is whole
                                    parsed_reply reply = parse_tool_calls(replies[k].content);
                                    for (const reasoning_tool_call &c2 : replies[k].tool_calls)
                                        reply.calls.push_back({c2.name, c2.arguments});
                                    if (!reply.calls.empty()) {
                                        delta["tool_calls"] = tool_calls_json(reply, true);
                                        choice["finish_reason"] = "tool_calls";
                                    }
                                }
                                choice["delta"] = delta;
                                choice["logprobs"] =
                                    p->logprobs ? logprobs_json(ev.tokens, true, 0) : json(nullptr);
                            } else {
                                choice["text"] = ev.text;
                                choice["logprobs"] =
                                    p->logprobs ? logprobs_json(ev.tokens, false, offsets[k]) : json(nullptr);
                            }
                            offsets[k] += ev.text.size();
                            c["choices"] = json::array({choice});
                            if (p->include_usage) c["usage"] = nullptr;
                            if (!send(c)) return cancel_all();
                            last_write = steady::now();
                            if (ev.final) break;
                        }
                    }
                    if (any) continue;
                    if (steady::now() - last_write >= std::chrono::seconds(2)) {
                        if (!write(": waiting\n\n")) return cancel_all();
                        last_write = steady::now();
                    }
                    // wait for the next event of the first unfinished choice
                    for (size_t k = 0; k < jobs->size(); ++k)
                        if (!done_flags[k]) {
                            (*jobs)[k]->wait_ready(std::chrono::milliseconds(50));
                            break;
                        }
                }
                std::vector<serving::completion> done;
                for (auto &j : *jobs) done.push_back(j->result());
                this_request.detail = note(done);
                if (p->include_usage) {
                    json u = envelope(id, created, p->chat, true);
                    u["choices"] = json::array();
                    u["usage"] = usage(*p, done);
                    u["timings"] = timings(done);
                    if (!send(u)) return false;
                }
                write("data: [DONE]\n\n");
                sink.done();
                return true;
            });
    }

    void tokenize(const httplib::Request &req, httplib::Response &res) {
        const json body = parse_body(req);
        const auto content = field(
            body, "content", [](const json &j) { return j.is_string(); }, "a string");
        if (!content) throw request_error("'content' is required: a string");
        const bool add_special = bool_field(body, "add_special").value_or(false);
        const bool parse_special = bool_field(body, "parse_special").value_or(true);
        const bool with_pieces = bool_field(body, "with_pieces").value_or(false);
        std::vector<token> tokens;
        try {
            tokens = model_->vocab().tokenize(content->get<std::string>(), add_special, parse_special);
        } catch (const error &e) {
            throw request_error(std::string("the content cannot be tokenized: ") + e.what());
        }
        json out = json::array();
        for (token t : tokens) {
            if (with_pieces)
                out.push_back(
                    {{"id", t}, {"piece", serving::utf8_sanitize(model_->vocab().token_to_piece(t, true))}});
            else
                out.push_back(t);
        }
        res.set_content(json{{"tokens", out}}.dump(), "application/json");
    }

    void detokenize(const httplib::Request &req, httplib::Response &res) {
        const json body = parse_body(req);
        const auto tokens = field(
            body, "tokens", [](const json &j) { return j.is_array(); }, "an array of token ids");
        if (!tokens) throw request_error("'tokens' is required: an array of token ids");
        std::vector<token> ids;
        const int32_t n_vocab = model_->vocab().n_tokens();
        for (const json &t : *tokens) ids.push_back(token_value(t, "'tokens' token ids", n_vocab));
        res.set_content(
            json{{"content", serving::utf8_sanitize(model_->vocab().detokenize(ids, false))}}.dump(),
            "application/json");
    }

    // GET /lora-adapters: the adapters loaded at startup (--lora, --lora-scaled) with the scales of
    // requests that give no "lora" list, as llama-server lists them.
    void lora_adapters(httplib::Response &res) {
        const std::vector<float> scales = engine_->lora_scales();
        const std::vector<lora_use> &loaded = engine_->context().loras();
        json out = json::array();
        for (size_t i = 0; i < loaded.size(); ++i)
            out.push_back({{"id", i}, {"path", loaded[i].adapter->path()}, {"scale", scales[i]}});
        res.set_content(out.dump(), "application/json");
    }

    // POST /lora-adapters [{"id": 0, "scale": 0.5}, ...]: those scales for the requests from now on
    // (an adapter not listed: 0).
    void set_lora_adapters(const httplib::Request &req, httplib::Response &res) {
        const json body = json::parse(req.body, nullptr, false);
        if (body.is_discarded()) throw request_error("the request body is not valid JSON");
        engine_->set_lora_scales(read_lora_scales(body, engine_->context().loras().size(), "body"));
        lora_adapters(res);
    }

    static json sampler_names(const std::vector<sampler_type> &types) {
        json names = json::array();
        for (sampler_type t : types) names.push_back(sampler_type_name(t));
        return names;
    }

    void props(httplib::Response &res) {
        const sampling_params d;
        res.set_content(json{{"model_path", model_->path()},
                             {"model", model_id_},
                             {"n_slots", engine_->n_slots()},
                             {"n_ctx", engine_->n_ctx()},
                             {"n_ctx_slot", engine_->n_ctx_slot()},
                             {"chat_template", template_.name()},
                             {"chat_template_source", template_source_},
                             {"max_queue", opt_.max_queue},
                             // what the chat page may attach (the reference's field)
                             {"modalities", {{"vision", opt_.mmproj != nullptr}, {"audio", false}}},
                             // the defaults of every field the chat page's settings send
                             {"default_generation_settings",
                              {{"max_tokens", opt_.n_predict},
                               {"temperature", d.temp},
                               {"dynatemp_range", d.dynatemp_range},
                               {"dynatemp_exponent", d.dynatemp_exponent},
                               {"top_k", d.top_k},
                               {"top_p", d.top_p},
                               {"min_p", d.min_p},
                               {"typical_p", d.typical_p},
                               {"top_n_sigma", d.top_n_sigma},
                               {"xtc_probability", d.xtc_probability},
                               {"xtc_threshold", d.xtc_threshold},
                               {"repeat_penalty", d.penalty_repeat},
                               {"repeat_last_n", d.penalty_last_n},
                               {"presence_penalty", d.penalty_present},
                               {"frequency_penalty", d.penalty_freq},
                               {"dry_multiplier", d.dry_multiplier},
                               {"dry_base", d.dry_base},
                               {"dry_allowed_length", d.dry_allowed_length},
                               {"dry_penalty_last_n", d.dry_penalty_last_n},
                               {"dry_sequence_breakers", d.dry_sequence_breakers},
                               {"mirostat", d.mirostat},
                               {"mirostat_tau", d.mirostat_tau},
                               {"mirostat_eta", d.mirostat_eta},
                               {"samplers", sampler_names(d.samplers)}}}}
                            .dump(),
                        "application/json");
    }

    void slots(httplib::Response &res) {
        const serving::engine_stats st = engine_->stats();
        json out = json::array();
        for (const auto &s : st.slots)
            out.push_back({{"id", s.id},
                           {"state", s.busy ? "processing" : "idle"},
                           {"n_ctx", engine_->n_ctx_slot()},
                           {"n_cached", s.n_cached},
                           {"n_prompt", s.n_prompt},
                           {"n_generated", s.n_generated}});
        res.set_content(out.dump(), "application/json");
    }

    void metrics(httplib::Response &res) {
        const serving::engine_stats st = engine_->stats();
        std::string m;
        auto metric = [&m](const char *name, const char *type, const char *help, double value) {
            m += std::string("# HELP weft_") + name + " " + help + "\n# TYPE weft_" + name + " " + type +
                 "\nweft_" + name + " " + json(value).dump() + "\n";
        };
        metric("http_requests_total", "counter", "HTTP requests received", double(counters_.requests.load()));
        metric("http_errors_total", "counter", "HTTP responses with a status >= 400",
               double(counters_.errors.load()));
        metric("requests_rejected_busy_total", "counter",
               "requests refused with 503 because the queue was full",
               double(counters_.rejected_busy.load()));
        metric("generation_requests_total", "counter", "generation jobs submitted",
               double(st.requests_submitted));
        metric("generation_requests_finished_total", "counter", "generation jobs finished",
               double(st.requests_finished));
        metric("prompt_tokens_total", "counter", "prompt tokens decoded (cached ones not counted)",
               double(st.prompt_tokens));
        metric("generated_tokens_total", "counter", "tokens generated", double(st.generated_tokens));
        metric("draft_tokens_total", "counter", "speculative decoding: draft tokens verified",
               double(st.draft_tokens));
        metric("draft_accepted_total", "counter", "speculative decoding: draft tokens accepted",
               double(st.draft_accepted));
        metric("draft_acceptance_rate", "gauge", "speculative decoding: accepted / verified draft tokens",
               st.draft_tokens > 0 ? double(st.draft_accepted) / double(st.draft_tokens) : 0.0);
        metric("decode_steps_total", "counter", "batches decoded", double(st.steps));
        metric("decode_seconds_total", "counter", "time spent decoding batches", st.decode_ms / 1000.0);
        metric("sample_seconds_total", "counter",
               "time after decoding: sampling, stop strings and streaming events to the requests",
               st.sample_ms / 1000.0);
        metric(
            "tokens_per_second", "gauge", "prompt and generated tokens per second of decoding",
            st.decode_ms > 0 ? double(st.prompt_tokens + st.generated_tokens) * 1000.0 / st.decode_ms : 0.0);
        metric("graph_builds_total", "counter", "decode steps that built a new graph (the rest reused one)",
               double(st.graph_builds));
        metric("graph_build_seconds_total", "counter", "time building graphs (part of decoding)",
               st.graph_build_ms / 1000.0);
        metric("queue_length", "gauge", "requests waiting for a slot", double(st.queued));
        metric("busy_slots", "gauge", "slots generating or processing a prompt", double(st.busy_slots));
        metric("slots", "gauge", "slots", double(st.n_slots));
        metric("kv_cells_used", "gauge", "KV cache cells in use", double(st.kv_cells_used));
        metric("kv_cells", "gauge", "KV cache cells", double(st.kv_cells));
        res.set_content(m, "text/plain; version=0.0.4");
    }

    static std::string random_id() {
        static thread_local std::mt19937_64 rng(std::random_device{}());
        static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        std::string id;
        for (int i = 0; i < 24; ++i) id += digits[rng() % (sizeof digits - 1)];
        return id;
    }

    const server_options &opt_;
    std::atomic<bool> ready_{false};
    const model *model_ = nullptr;
    serving::engine *engine_ = nullptr;
    serving::template_choice template_;
    std::unique_ptr<openai_request_reader> reader_;  // reads requests against the model and template_
    std::string template_source_;
    std::string model_id_ = "loading";
    int64_t created_;
    http_counters counters_;
    std::unique_ptr<inference_context> embed_ctx_;  // an embedding model's context, one request at a time
    std::mutex embed_mutex_;
    std::unique_ptr<rerank_service> rerank_;  // /v1/rerank (501 unless a reranker runs with --reranking)
};

}  // namespace

struct openai_server::impl {
    explicit impl(server_options o) : opt(std::move(o)), gate(limits_of(opt)), handlers(opt) {}

    static gate_limits limits_of(const server_options &o) {
        gate_limits limits;
        limits.io_timeout = std::chrono::seconds(o.timeout_s);
        limits.head_timeout = std::min(limits.head_timeout, limits.io_timeout);
        return limits;
    }

    server_options opt;
    gated_server gate;
    routes handlers;
    std::thread http;
};

openai_server::openai_server(server_options opt) : impl_(std::make_unique<impl>(std::move(opt))) {
    impl_->handlers.install(impl_->gate);
    impl_->gate.set_payload_max_length(impl_->opt.max_body);
}

openai_server::~openai_server() {
    stop();
    wait();
}

int openai_server::listen() {
    if (!impl_->opt.ssl_cert_file.empty() || !impl_->opt.ssl_key_file.empty())
        impl_->gate.use_tls(impl_->opt.ssl_cert_file, impl_->opt.ssl_key_file);
    return impl_->gate.bind_and_listen(impl_->opt.host, impl_->opt.port);
}

void openai_server::start() {
    const size_t n_workers = impl_->opt.http_threads > 0 ? size_t(impl_->opt.http_threads)
                                                         : size_t(4 * std::max(1, impl_->opt.n_slots) + 16);
    impl_->http = std::thread([this, n_workers] { impl_->gate.run(n_workers, impl_->opt.http_nice); });
}

void openai_server::set_ready(const model &m, serving::engine &eng, serving::template_choice tmpl,
                              std::string template_source) {
    impl_->handlers.set_ready(m, eng, std::move(tmpl), std::move(template_source));
}

void openai_server::cancel_all() {
    impl_->handlers.cancel_all();
}

void openai_server::stop() {
    impl_->gate.stop_serving();
}

void openai_server::wait() {
    if (impl_->http.joinable()) impl_->http.join();
}

}  // namespace weft::server
