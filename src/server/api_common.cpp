// src/server/api_common.cpp — the pieces the Anthropic, Responses and Ollama routes share (see
// api_common.h).
#include "server/api_common.h"

#include <chrono>
#include <random>
#include <string_view>

#include "server/http_gate.h"

namespace weft::server {

api_kind api_of_path(const std::string &path) {
    if (path.rfind("/v1/messages", 0) == 0) return api_kind::anthropic;
    if (path.rfind("/api/", 0) == 0) return api_kind::ollama;
    return api_kind::openai;
}

namespace {

// Anthropic's error type of a status (https://docs.anthropic.com/en/api/errors).
const char *anthropic_error_type(int status) {
    switch (status) {
        case 401:
            return "authentication_error";
        case 403:
            return "permission_error";
        case 404:
            return "not_found_error";
        case 413:
            return "request_too_large";
        case 429:
            return "rate_limit_error";
        case 503:
        case 529:
            return "overloaded_error";
        default:
            return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

}  // namespace

json error_body_for(api_kind api, const std::string &message, int status) {
    switch (api) {
        case api_kind::anthropic:
            return {{"type", "error"},
                    {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}};
        case api_kind::ollama:
            return {{"error", message}};
        case api_kind::openai:
            break;
    }
    return {{"error",
             {{"message", message},
              {"type", status == 501   ? "not_supported_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error"},
              {"param", nullptr},
              {"code", nullptr}}}};
}

json json_object_body(const std::string &body) {
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded()) throw request_error("the request body is not valid JSON");
    if (!j.is_object()) throw request_error("the request body must be a JSON object, got " + json_kind(j));
    return j;
}

std::string random_letters() {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id;
    for (int i = 0; i < 24; ++i) id += digits[rng() % (sizeof digits - 1)];
    return id;
}

serving::completion wait_whole(serving::job &j) {
    j.ignore_events();
    while (!j.finished()) {
        j.wait_finished(std::chrono::milliseconds(50));
        if (!client_still_connected()) {
            j.cancel();
            throw request_error("the client went away", 499);
        }
    }
    serving::completion c = j.result();
    if (c.finish == serving::finish_reason::error) throw request_error(c.error, 500);
    return c;
}

namespace {

constexpr std::string_view call_markers[] = {"<tool_call>", "[TOOL_CALLS]", "<|python_tag|>"};

}  // namespace

reply_stream::shown reply_stream::feed(const std::string &piece) {
    fed_ += piece.size();
    reasoning_split split = thoughts_.feed(piece);
    for (reasoning_tool_call &c : split.tool_calls)
        harmony_calls_.push_back({c.name, std::move(c.arguments)});
    text_ += split.content;
    return {std::move(split.reasoning), show()};
}

std::string reply_stream::show() {
    if (!tools_) {
        std::string out = text_.substr(shown_);
        shown_ = text_.size();
        return out;
    }
    const size_t first = text_.find_first_not_of(" \t\r\n");
    // nothing but blanks yet, or a reply that is a JSON object or array (a call): hold it all
    if (first == std::string::npos || text_[first] == '{' || text_[first] == '[') return {};
    size_t limit = text_.size();
    for (std::string_view marker : call_markers) {
        const size_t at = text_.find(marker);
        if (at != std::string::npos) limit = std::min(limit, at);
        // the end of the text may be the start of a marker
        for (size_t k = std::min(marker.size() - 1, text_.size()); k > 0; --k)
            if (std::string_view(text_).substr(text_.size() - k) == marker.substr(0, k)) {
                limit = std::min(limit, text_.size() - k);
                break;
            }
    }
    if (limit <= shown_) return {};
    std::string out = text_.substr(shown_, limit - shown_);
    shown_ = limit;
    return out;
}

reply_stream::ending reply_stream::finish(const std::string &whole) {
    ending e;
    reasoning_split split =
        fed_ < whole.size() ? thoughts_.feed(std::string_view(whole).substr(fed_)) : reasoning_split{};
    fed_ = whole.size();
    reasoning_split rest = thoughts_.finish();
    split.reasoning += rest.reasoning;
    split.content += rest.content;
    for (auto *part : {&split, &rest})
        for (reasoning_tool_call &c : part->tool_calls)
            harmony_calls_.push_back({c.name, std::move(c.arguments)});
    text_ += split.content;
    e.reasoning = std::move(split.reasoning);
    parsed_reply &r = e.reply;
    if (tools_) {  // as chat completions: calls only where tools were offered
        r = parse_tool_calls(text_);
        for (tool_call &c : harmony_calls_) r.calls.push_back(std::move(c));
    }
    harmony_calls_.clear();
    if (r.calls.empty()) {
        r.content = shown_ < text_.size() ? text_.substr(shown_) : std::string();
        return e;
    }
    // parse_tool_calls trims the content; what was shown is a prefix of the text before the calls
    const std::string shown = text_.substr(0, std::min(shown_, text_.size()));
    const size_t lead = shown.find_first_not_of(" \t\r\n");
    const size_t n_shown = lead == std::string::npos ? 0 : shown.size() - lead;
    r.content = r.content.size() > n_shown ? r.content.substr(n_shown) : std::string();
    return e;
}

void stream_job(httplib::Response &res, const char *content_type, std::shared_ptr<serving::job> job,
                std::shared_ptr<stream_framing> framing) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(content_type, [job, framing](size_t, httplib::DataSink &sink) {
        auto write = [&sink](const std::string &s) {
            return s.empty() || (sink.is_writable() && sink.write(s.data(), s.size()));
        };
        auto gone = [&] {  // the client went away: the engine ends the job at its next step
            job->cancel();
            return false;
        };
        bool started = false;
        auto last_write = std::chrono::steady_clock::now();
        for (;;) {
            serving::event ev;
            if (!job->poll_event(ev)) {
                if (!client_still_connected()) return gone();
                if (std::chrono::steady_clock::now() - last_write >= std::chrono::seconds(2)) {
                    if (!write(framing->keepalive())) return gone();
                    last_write = std::chrono::steady_clock::now();
                }
                job->wait_ready(std::chrono::milliseconds(50));
                continue;
            }
            if (!started) {
                started = true;
                if (!write(framing->start())) return gone();
            }
            if (!ev.text.empty() && !write(framing->text(ev.text))) return gone();
            last_write = std::chrono::steady_clock::now();
            if (ev.final) break;
        }
        const serving::completion done = job->result();
        if (done.finish == serving::finish_reason::error)
            write(framing->failure(done.error));
        else
            write(framing->finish(done));
        sink.done();
        return true;
    });
}

std::string sse_event(const std::string &name, const json &data) {
    return "event: " + name + "\ndata: " + data.dump() + "\n\n";
}

nlohmann::ordered_json arguments_object(const std::string &arguments) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(arguments, nullptr, false);
    if (j.is_object()) return j;
    return {{"arguments", j.is_discarded() ? nlohmann::ordered_json(arguments) : j}};
}

std::string string_field_or(const json &object, const char *name, const std::string &otherwise,
                            const std::string &where) {
    const auto it = object.find(name);
    if (it == object.end() || it->is_null()) return otherwise;
    if (!it->is_string())
        throw request_error(where + "." + name + " must be a string, got " + json_kind(*it));
    return it->get<std::string>();
}

void copy_field(const json &source, const char *from, json &target, const char *to) {
    const auto it = source.find(from);
    if (it != source.end() && !it->is_null()) target[to] = *it;
}

void copy_sampling_extensions(const json &body, json &out) {
    static const char *const names[] = {
        "seed",
        "top_k",
        "min_p",
        "typical_p",
        "repeat_penalty",
        "repeat_last_n",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "grammar",
        "json_schema",
        "n_keep",
        "lora",
        "samplers",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
        "dry_sequence_breakers",
        "xtc_probability",
        "xtc_threshold",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
        "top_n_sigma",
        "dynatemp_range",
        "dynatemp_exponent",
    };
    for (const char *name : names) copy_field(body, name, out, name);
}

}  // namespace weft::server
