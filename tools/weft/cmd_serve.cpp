// tools/weft/cmd_serve.cpp — `weft serve`: an OpenAI-style HTTP server (completions, chat, SSE streams).
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "weft/command.h"
#include "weft/conversation.h"
#include "weft/core/error.h"
#include "weft/generation.h"
#include "weft/model/model.h"
#include "weft/runtime/chat_template.h"
#include "weft/runtime/context.h"
#include "weft/runtime/sampling.h"

namespace weft::tool {
namespace {

using json = nlohmann::json;
using steady = std::chrono::steady_clock;

struct serve_options {
    std::string model_path;
    std::string host = "127.0.0.1";
    int port = 8080;
    uint32_t n_ctx = 0;  // 0: the model's training context, at most 4096
    uint32_t n_batch = 512;
    int32_t n_threads = 0;      // 0: the hardware's, at most 4
    int32_t n_predict = 256;    // max_tokens of a request that does not say
    std::string chat_template;  // a family name or Jinja text; empty: the model's own
};

// A request the server refuses; the message goes back to the client as an OpenAI error object.
class request_error : public error {
  public:
    explicit request_error(const std::string &message, int status = 400) : error(message), status_(status) {}
    int status() const { return status_; }

  private:
    int status_;
};

json error_body(const std::string &message, int status) {
    return {{"error",
             {{"message", message},
              {"type", status >= 500 ? "server_error" : "invalid_request_error"},
              {"param", nullptr},
              {"code", nullptr}}}};
}

void send_error(httplib::Response &res, const std::string &message, int status) {
    res.status = status;
    res.set_content(error_body(message, status).dump(), "application/json");
}

// --- one line of log per request: the logger prints what the handler noted on this thread

struct request_note {
    steady::time_point start;
    bool started = false;
    std::string detail;  // "prompt 12 tokens (5 cached), 16 generated, finish length"
};
thread_local request_note this_request;

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

// --- reading the request body

// How a wrong value is named in an error: a short number or boolean itself, otherwise its type.
std::string json_kind(const json &v) {
    if (v.is_number() || v.is_boolean()) return v.dump();
    return v.type_name();
}

// The field `name` of `body`, or nullopt when it is absent or null. Throws request_error naming the
// field when it has another type than `check` accepts.
template <class Check>
std::optional<json> field(const json &body, const char *name, Check check, const char *expected) {
    const auto it = body.find(name);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!check(*it))
        throw request_error(std::string("'") + name + "' must be " + expected + ", got " + json_kind(*it));
    return *it;
}

std::optional<double> number_field(const json &body, const char *name) {
    const auto v = field(
        body, name, [](const json &j) { return j.is_number(); }, "a number");
    return v ? std::optional<double>(v->get<double>()) : std::nullopt;
}

std::optional<int64_t> integer_field(const json &body, const char *name) {
    const auto v = field(
        body, name, [](const json &j) { return j.is_number_integer(); }, "an integer");
    return v ? std::optional<int64_t>(v->get<int64_t>()) : std::nullopt;
}

std::optional<bool> bool_field(const json &body, const char *name) {
    const auto v = field(
        body, name, [](const json &j) { return j.is_boolean(); }, "true or false");
    return v ? std::optional<bool>(v->get<bool>()) : std::nullopt;
}

json parse_body(const httplib::Request &req) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw request_error("the request body is not valid JSON");
    if (!body.is_object())
        throw request_error("the request body must be a JSON object, got " + json_kind(body));
    return body;
}

// What both endpoints share: sampling, limits, stop strings, streaming.
struct generation_request {
    std::vector<token> prompt;
    int32_t max_tokens = 0;
    sampling_params sampling;
    std::vector<std::string> stop;
    bool stream = false;
};

void read_common_fields(const json &body, int32_t default_max_tokens, generation_request &g) {
    g.max_tokens = default_max_tokens;
    std::optional<int64_t> max_tokens = integer_field(body, "max_tokens");
    if (!max_tokens) max_tokens = integer_field(body, "max_completion_tokens");
    if (max_tokens) {
        if (*max_tokens < 0 || *max_tokens > (1 << 20))
            throw request_error("'max_tokens' must be in [0, 1048576], got " + std::to_string(*max_tokens));
        g.max_tokens = int32_t(*max_tokens);
    }
    sampling_params &s = g.sampling;
    if (auto t = number_field(body, "temperature")) {
        if (*t < 0) throw request_error("'temperature' must be >= 0, got " + std::to_string(*t));
        s.temp = float(*t);
    }
    if (auto v = number_field(body, "top_p")) s.top_p = float(*v);
    if (auto v = number_field(body, "min_p")) s.min_p = float(*v);
    if (auto v = integer_field(body, "top_k")) {
        if (*v < 0 || *v > INT32_MAX) throw request_error("'top_k' must be >= 0, got " + std::to_string(*v));
        s.top_k = int32_t(*v);
    }
    if (auto v = number_field(body, "presence_penalty")) s.penalty_present = float(*v);
    if (auto v = number_field(body, "frequency_penalty")) s.penalty_freq = float(*v);
    if (auto v = number_field(body, "repeat_penalty")) s.penalty_repeat = float(*v);
    if (auto seed = integer_field(body, "seed")) {
        if (*seed < -1 || *seed >= int64_t(sampler_seed_random))
            throw request_error("'seed' must be in [0, 4294967294] or -1 (random), got " +
                                std::to_string(*seed));
        if (*seed >= 0) s.seed = uint32_t(*seed);
    }
    if (auto n = integer_field(body, "n"); n && *n != 1)
        throw request_error("'n' must be 1: one choice per request, got " + std::to_string(*n));
    if (auto stream = bool_field(body, "stream")) g.stream = *stream;
    if (auto stop = field(
            body, "stop", [](const json &j) { return j.is_string() || j.is_array(); },
            "a string or an array of strings")) {
        if (stop->is_string()) {
            g.stop.push_back(stop->get<std::string>());
        } else {
            for (const json &s_item : *stop) {
                if (!s_item.is_string())
                    throw request_error(std::string("'stop' must hold strings, got ") + json_kind(s_item));
                g.stop.push_back(s_item.get<std::string>());
            }
        }
        std::erase(g.stop, std::string());
    }
}

// A message's content: a string, or OpenAI's array of parts of which the "text" ones are joined.
std::string message_content(const json &content, size_t index) {
    const std::string where = "'messages[" + std::to_string(index) + "].content'";
    if (content.is_null()) return {};
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array())
        throw request_error(where + " must be a string or an array of parts, got " + json_kind(content));
    std::string text;
    for (const json &part : content) {
        const auto type = part.is_object() ? part.find("type") : part.end();
        const auto part_text = part.is_object() ? part.find("text") : part.end();
        if (type == part.end() || *type != "text" || part_text == part.end() || !part_text->is_string())
            throw request_error(
                where + ": only parts of the form {\"type\": \"text\", \"text\": \"...\"} are supported");
        text += part_text->get<std::string>();
    }
    return text;
}

std::vector<chat_message> read_messages(const json &body) {
    const auto messages = field(
        body, "messages", [](const json &j) { return j.is_array(); }, "an array");
    if (!messages) throw request_error("'messages' is required: an array of {\"role\", \"content\"} objects");
    if (messages->empty()) throw request_error("'messages' is empty");
    std::vector<chat_message> out;
    for (size_t i = 0; i < messages->size(); ++i) {
        const json &m = (*messages)[i];
        const std::string where = "'messages[" + std::to_string(i) + "]'";
        if (!m.is_object()) throw request_error(where + " must be an object, got " + json_kind(m));
        const auto role = m.find("role");
        if (role == m.end() || !role->is_string()) throw request_error(where + " needs a string 'role'");
        const auto content = m.find("content");
        if (content == m.end()) throw request_error(where + " needs a 'content'");
        out.push_back({role->get<std::string>(), message_content(*content, i)});
    }
    return out;
}

// --- generation

struct generation_result {
    std::string text;           // valid UTF-8, stop string excluded
    std::string finish_reason;  // "stop", "length"; "cancelled" when the client went away
    size_t n_prompt = 0;
    size_t n_cached = 0;  // prompt tokens whose cache cells were kept from the previous request
    int32_t n_generated = 0;
};

// The model's one inference context, used by one request at a time. The cache keeps the tokens of
// the previous request (prompt and generated text); a new prompt decodes only what follows the
// prefix it shares with them.
class generator {
  public:
    generator(const model &m, inference_context &ctx) : model_(m), ctx_(ctx) {}

    // Decodes the prompt, samples up to max_tokens, and hands each piece of text to `emit` as soon
    // as it cannot be part of a stop string or of an unfinished UTF-8 character. `emit` returns
    // false when nobody listens any more. Throws weft::error when decoding fails.
    generation_result generate(const generation_request &g, sampler_chain &chain,
                               const std::function<bool(const std::string &)> &emit) {
        std::lock_guard<std::mutex> lock(mutex_);
        try {
            return generate_locked(g, chain, emit);
        } catch (...) {
            reset_cache();
            throw;
        }
    }

  private:
    void reset_cache() {
        ctx_.kv_clear();
        cached_.clear();
    }

    void decode_checked(std::span<const token> tokens) {
        const int rc = ctx_.decode(batch::from_tokens(tokens));
        if (rc != decode_ok)
            throw error("decode of " + std::to_string(tokens.size()) + " tokens at position " +
                        std::to_string(cached_.size()) + " failed (code " + std::to_string(rc) +
                        "): " + ctx_.last_error());
        cached_.insert(cached_.end(), tokens.begin(), tokens.end());
    }

    // Keeps the cache cells of the longest common prefix, at least one token short of the whole
    // prompt: the last prompt token is decoded again for the logits generation starts from.
    size_t reuse_prefix(const std::vector<token> &prompt) {
        const auto diverge = std::mismatch(cached_.begin(), cached_.end(), prompt.begin(), prompt.end());
        size_t keep = std::min<size_t>(size_t(diverge.first - cached_.begin()), prompt.size() - 1);
        if (keep < cached_.size()) {
            if (!ctx_.kv_seq_rm(0, llm_pos(keep), -1)) {
                reset_cache();
                return 0;
            }
            cached_.resize(keep);
        }
        return keep;
    }

    generation_result generate_locked(const generation_request &g, sampler_chain &chain,
                                      const std::function<bool(const std::string &)> &emit) {
        const vocab &v = model_.vocab();
        generation_result r;
        r.n_prompt = g.prompt.size();
        r.n_cached = reuse_prefix(g.prompt);
        const size_t chunk = std::max<size_t>(1, ctx_.n_batch());
        for (size_t begin = r.n_cached; begin < g.prompt.size(); begin += chunk)
            decode_checked(
                std::span<const token>(g.prompt).subspan(begin, std::min(chunk, g.prompt.size() - begin)));
        for (token t : g.prompt) chain.accept(t);  // penalties see the prompt

        size_t max_stop = 0;
        for (const auto &s : g.stop) max_stop = std::max(max_stop, s.size());
        std::string raw;     // the generated bytes as the tokens spell them
        size_t emitted = 0;  // bytes of raw already handed to emit
        r.finish_reason = "length";
        while (r.n_generated < g.max_tokens) {
            const token t = chain.sample(ctx_.get_logits_ith(-1), ctx_.n_vocab());
            if (v.is_eog(t)) {
                r.finish_reason = "stop";
                break;
            }
            ++r.n_generated;
            const size_t before = raw.size();
            raw += v.token_to_piece(t, false);
            if (const size_t at = find_stop(raw, g.stop, before >= max_stop ? before - max_stop + 1 : 0);
                at != std::string::npos) {
                raw.resize(at);
                r.finish_reason = "stop";
                break;
            }
            const size_t ready = utf8_complete_prefix(
                std::string_view(raw).substr(0, raw.size() - stop_prefix_overlap(raw, g.stop)));
            if (ready > emitted) {
                if (!emit(utf8_sanitize(std::string_view(raw).substr(emitted, ready - emitted)))) {
                    r.finish_reason = "cancelled";
                    break;
                }
                emitted = ready;
            }
            if (r.n_generated >= g.max_tokens || cached_.size() >= ctx_.n_ctx()) break;  // "length"
            decode_checked(std::span<const token>(&t, 1));
        }
        if (r.finish_reason != "cancelled" && emitted < raw.size())
            emit(utf8_sanitize(std::string_view(raw).substr(emitted)));
        r.text = utf8_sanitize(raw);
        return r;
    }

    const model &model_;
    inference_context &ctx_;
    std::mutex mutex_;
    std::vector<token> cached_;  // the tokens whose cells the cache holds, positions [0, size)
};

// --- the server

class server {
  public:
    server(const model &m, generator &gen, chat_template_kind kind, const serve_options &opt, uint32_t n_ctx)
        : model_(m),
          gen_(gen),
          kind_(kind),
          opt_(opt),
          n_ctx_(n_ctx),
          model_id_(m.name()),
          created_(int64_t(std::time(nullptr))) {}

    void install(httplib::Server &svr) {
        svr.set_pre_routing_handler([](const httplib::Request &, httplib::Response &) {
            this_request = {};
            this_request.start = steady::now();
            this_request.started = true;
            return httplib::Server::HandlerResponse::Unhandled;
        });
        svr.set_logger(
            [](const httplib::Request &req, const httplib::Response &res) { log_request(req, res.status); });
        // httplib calls this for every status >= 400; routes that set their own body keep it
        svr.set_error_handler(
            httplib::Server::HandlerWithResponse([](const httplib::Request &req, httplib::Response &res) {
                if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
                const std::string message =
                    res.status == 404
                        ? "unknown route: " + req.method + " " + req.path
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

        svr.Get("/health", [](const httplib::Request &, httplib::Response &res) {
            res.set_content(json{{"status", "ok"}}.dump(), "application/json");
        });
        svr.Get("/v1/models", [this](const httplib::Request &, httplib::Response &res) {
            const json list = {
                {"object", "list"},
                {"data", json::array({{{"id", model_id_},
                                       {"object", "model"},
                                       {"created", created_},
                                       {"owned_by", "weft"},
                                       {"meta", {{"n_ctx", n_ctx_}, {"describe", model_.describe()}}}}})}};
            res.set_content(list.dump(), "application/json");
        });
        svr.Post("/v1/completions", [this](const httplib::Request &req, httplib::Response &res) {
            guarded(res, [&] { completions(req, res); });
        });
        svr.Post("/v1/chat/completions", [this](const httplib::Request &req, httplib::Response &res) {
            guarded(res, [&] { chat_completions(req, res); });
        });
    }

  private:
    // Turns a refused request into its error response; any other failure into a 500.
    template <class Fn>
    void guarded(httplib::Response &res, Fn &&fn) {
        try {
            fn();
        } catch (const request_error &e) {
            this_request.detail = e.what();
            send_error(res, e.what(), e.status());
        } catch (const std::exception &e) {
            this_request.detail = e.what();
            send_error(res, e.what(), 500);
        }
    }

    std::vector<token> tokenize_prompt(const std::string &text) const {
        const vocab &v = model_.vocab();
        std::vector<token> tokens;
        try {
            tokens = v.tokenize(text, true, true);
        } catch (const error &e) {
            throw request_error(std::string("the prompt cannot be tokenized: ") + e.what());
        }
        if (tokens.empty()) {
            if (v.bos() == token_null)
                throw request_error("the prompt is empty and the model has no BOS token to start from");
            tokens.push_back(v.bos());
        }
        if (tokens.size() >= n_ctx_)
            throw request_error("the prompt has " + std::to_string(tokens.size()) +
                                " tokens but the context holds " + std::to_string(n_ctx_) +
                                " (shorten it, or restart the server with a larger -c)");
        return tokens;
    }

    static std::unique_ptr<sampler_chain> make_chain(const sampling_params &s) {
        try {
            return make_sampler_chain(s);
        } catch (const error &e) {
            throw request_error(e.what());
        }
    }

    void completions(const httplib::Request &req, httplib::Response &res) {
        const json body = parse_body(req);
        const auto prompt = field(
            body, "prompt", [](const json &j) { return j.is_string(); },
            "a string (arrays of prompts or of token ids are not supported)");
        if (!prompt) throw request_error("'prompt' is required: a string");
        generation_request g;
        read_common_fields(body, opt_.n_predict, g);
        g.prompt = tokenize_prompt(prompt->get<std::string>());
        respond(res, std::move(g), false);
    }

    void chat_completions(const httplib::Request &req, httplib::Response &res) {
        const json body = parse_body(req);
        const std::vector<chat_message> messages = read_messages(body);
        generation_request g;
        read_common_fields(body, opt_.n_predict, g);
        std::string prompt;
        try {
            prompt = apply_chat_template(kind_, messages, true);
        } catch (const error &e) {
            throw request_error(std::string("'messages': ") + e.what());
        }
        g.prompt = tokenize_prompt(prompt);
        respond(res, std::move(g), true);
    }

    json usage(const generation_result &r) const {
        return {{"prompt_tokens", r.n_prompt},
                {"completion_tokens", r.n_generated},
                {"total_tokens", r.n_prompt + size_t(r.n_generated)}};
    }

    // The envelope every response and chunk of one request shares.
    json envelope(const std::string &id, int64_t created, bool chat, bool chunk) const {
        return {{"id", id},
                {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
                {"created", created},
                {"model", model_id_}};
    }

    static json choice(bool chat, bool chunk, const std::string &text, const json &finish_reason) {
        json c = {{"index", 0}, {"finish_reason", finish_reason}};
        if (!chat) {
            c["text"] = text;
            c["logprobs"] = nullptr;
        } else if (chunk) {
            c["delta"] = text.empty() ? json::object() : json{{"content", text}};
        } else {
            c["message"] = {{"role", "assistant"}, {"content", text}};
        }
        return c;
    }

    static std::string note(const generation_result &r) {
        return "prompt " + std::to_string(r.n_prompt) + " tokens (" + std::to_string(r.n_cached) +
               " cached), " + std::to_string(r.n_generated) + " generated, finish " + r.finish_reason;
    }

    void respond(httplib::Response &res, generation_request g, bool chat) {
        auto chain = std::shared_ptr<sampler_chain>(make_chain(g.sampling));
        const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++n_requests_);
        const int64_t created = int64_t(std::time(nullptr));
        if (!g.stream) {
            const generation_result r = gen_.generate(g, *chain, [](const std::string &) { return true; });
            json out = envelope(id, created, chat, false);
            out["choices"] = json::array({choice(chat, false, r.text, r.finish_reason)});
            out["usage"] = usage(r);
            this_request.detail = note(r);
            res.set_content(out.dump(), "application/json");
            return;
        }
        // Streamed: httplib calls the provider after this handler returns, on the same thread; the
        // whole generation runs inside it, one event per piece of text.
        auto request = std::make_shared<generation_request>(std::move(g));
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream", [this, request, chain, id, created, chat](size_t, httplib::DataSink &sink) {
                auto send = [&sink](const json &event) {
                    const std::string line = "data: " + event.dump() + "\n\n";
                    return sink.is_writable() && sink.write(line.data(), line.size());
                };
                auto chunk = [&](const std::string &text, const json &finish_reason) {
                    json c = envelope(id, created, chat, true);
                    c["choices"] = json::array({choice(chat, true, text, finish_reason)});
                    return c;
                };
                if (chat) {  // the first chunk names the role, as OpenAI's do
                    json first = chunk("", nullptr);
                    first["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
                    if (!send(first)) return false;
                }
                generation_result r;
                try {
                    r = gen_.generate(*request, *chain,
                                      [&](const std::string &text) { return send(chunk(text, nullptr)); });
                } catch (const std::exception &e) {
                    this_request.detail = e.what();
                    send(error_body(e.what(), 500));
                    sink.done();
                    return true;
                }
                this_request.detail = note(r);
                if (r.finish_reason == "cancelled") return false;  // the logger still writes its line
                json last = chunk("", r.finish_reason);
                last["usage"] = usage(r);
                if (!send(last)) return false;
                const std::string done = "data: [DONE]\n\n";
                sink.write(done.data(), done.size());
                sink.done();
                return true;
            });
    }

    const model &model_;
    generator &gen_;
    chat_template_kind kind_;
    const serve_options &opt_;
    uint32_t n_ctx_;
    std::string model_id_;
    int64_t created_;
    std::atomic<uint64_t> n_requests_{0};
};

// SIGINT and SIGTERM stop the server from a thread that waits for them (a signal handler may not
// call into the server). Built before any other thread starts, so that every thread inherits the
// blocked mask and only this one receives them.
class signal_watcher {
  public:
    explicit signal_watcher(httplib::Server &svr) {
        sigemptyset(&set_);
        sigaddset(&set_, SIGINT);
        sigaddset(&set_, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set_, nullptr);
        thread_ = std::thread([this, &svr] {
            int sig = 0;
            sigwait(&set_, &sig);
            if (quitting_) return;
            std::fprintf(stderr, "weft serve: signal %d, stopping\n", sig);
            signalled_ = true;
            svr.stop();
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
        "Serves a model over HTTP with OpenAI-style endpoints:\n"
        "  GET  /health               {\"status\": \"ok\"}\n"
        "  GET  /v1/models            the loaded model\n"
        "  POST /v1/completions       {prompt, max_tokens, temperature, top_p, top_k, min_p, seed, stop, "
        "stream}\n"
        "  POST /v1/chat/completions  {messages: [{role, content}], and the same fields}\n"
        "\"stream\": true answers with Server-Sent Events, one chunk per piece of text, ending in\n"
        "\"data: [DONE]\". The model is loaded once into one context, so requests are served one at a\n"
        "time: a request waits while another generates. Each request reuses the KV cache cells of the\n"
        "prefix its prompt shares with the previous request's tokens. Bad requests get an OpenAI error\n"
        "object (HTTP 400; 404 for an unknown route). One log line per request goes to stderr;\n"
        "--port 0 picks a free port, which the \"listening on\" line names. SIGINT/SIGTERM stop it.",
        "weft serve"};
    serve_options opt;
    app.add_option("-m,--model", opt.model_path, "GGUF model file")->required()->check(CLI::ExistingFile);
    app.add_option("--host", opt.host, "address to listen on")->capture_default_str();
    app.add_option("--port", opt.port, "TCP port (0: any free one)")
        ->capture_default_str()
        ->check(CLI::Range(0, 65535));
    app.add_option("-c,--ctx-size", opt.n_ctx, "context size in tokens (0: the model's, at most 4096)")
        ->capture_default_str();
    app.add_option("-b,--batch-size", opt.n_batch, "most prompt tokens per decode call")
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 20));
    app.add_option("-t,--threads", opt.n_threads, "threads (0: the hardware's, at most 4)")
        ->capture_default_str()
        ->check(CLI::Range(0, 512));
    app.add_option(
           "--chat-template", opt.chat_template,
           "template family (chatml, llama3, llama2, mistral-v7, phi3, zephyr, gemma ...) or Jinja text, "
           "instead of the model's")
        ->capture_default_str();
    app.add_option("-n,--n-predict", opt.n_predict, "max_tokens of a request that does not give one")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    CLI11_PARSE(app, argc, argv);

    // a client that hangs up mid-stream makes the next write fail (EPIPE) instead of killing us
    std::signal(SIGPIPE, SIG_IGN);
    httplib::Server svr;
    signal_watcher watcher(svr);
    const auto model = model::load(opt.model_path);
    const tool::template_choice chosen = tool::choose_chat_template(*model, opt.chat_template);
    const chat_template_kind kind = chosen.kind;
    const std::string template_source =
        chosen.fallback.empty() ? chosen.source : "fallback: " + chosen.fallback;

    const inference_params ip = tool::conversation_params(*model, opt.n_ctx, opt.n_batch, opt.n_threads);
    inference_context ctx(*model, ip);
    std::fprintf(stderr, "weft serve: %s: %s\n", opt.model_path.c_str(), model->describe().c_str());
    std::fprintf(stderr, "weft serve: context %u tokens, %d threads, chat template %s (%s)\n", ctx.n_ctx(),
                 ip.n_threads, chat_template_name(kind), template_source.c_str());

    generator gen(*model, ctx);
    server routes(*model, gen, kind, opt, ctx.n_ctx());
    routes.install(svr);
    // httplib's default also sets SO_REUSEPORT, which lets a second server share a busy port and
    // take half its connections; a busy port must be an error instead
    svr.set_socket_options([](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });

    const int port = opt.port == 0 ? svr.bind_to_any_port(opt.host)
                                   : (svr.bind_to_port(opt.host, opt.port) ? opt.port : -1);
    if (port < 0)
        throw error("cannot listen on " + opt.host + ":" + std::to_string(opt.port) +
                    " (address in use, or not an address of this machine?)");
    if (watcher.signalled()) return 0;  // stopped while loading
    std::fprintf(stderr, "weft serve: listening on http://%s:%d\n", opt.host.c_str(), port);
    const bool clean = svr.listen_after_bind();
    std::fprintf(stderr, "weft serve: stopped\n");
    return clean ? 0 : 1;
}

[[maybe_unused]] const bool registered = register_command(
    {"serve", "serve a model over HTTP: OpenAI-style completions and chat, with streaming", &serve_main});

}  // namespace
}  // namespace weft::tool
