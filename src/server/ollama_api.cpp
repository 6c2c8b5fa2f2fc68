// src/server/ollama_api.cpp — Ollama's API over the OpenAI routes' machinery (see ollama_api.h).
#include "server/ollama_api.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <utility>

#include "weft/core/type.h"

namespace weft::server {
namespace {

// Ollama's timestamps: RFC 3339 in UTC with nanoseconds.
std::string ollama_timestamp(std::chrono::system_clock::time_point t) {
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm utc{};
    gmtime_r(&secs, &utc);
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() % 1000000000;
    char buf[64];
    const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
    std::snprintf(buf + n, sizeof buf - n, ".%09lldZ", static_cast<long long>(ns));
    return buf;
}

std::string now_stamp() {
    return ollama_timestamp(std::chrono::system_clock::now());
}

// Ollama names carry a tag ("name:tag"); the served model is "<id>:latest" unless its id has one.
std::string ollama_name(const generation_host &host) {
    const std::string &id = host.served_model_id();
    return id.find(':') == std::string::npos ? id + ":latest" : id;
}

// "260K", "1.1B": the parameter count as Ollama shows it.
std::string parameter_size(int64_t n) {
    char buf[32];
    if (n >= 1000000000)
        std::snprintf(buf, sizeof buf, "%.1fB", double(n) / 1e9);
    else if (n >= 1000000)
        std::snprintf(buf, sizeof buf, "%.1fM", double(n) / 1e6);
    else
        std::snprintf(buf, sizeof buf, "%.0fK", double(n) / 1e3);
    return buf;
}

// A stable identifier of the served file (FNV-1a of its path and size; not a content hash).
std::string model_digest(const model &m) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : m.path() + ":" + std::to_string(m.n_weight_bytes()))
        h = (h ^ c) * 1099511628211ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

json ollama_details(const model &m) {
    std::string quantization = "unknown";
    const auto &layers = m.weights().layers;
    if (!layers.empty() && layers[0].ffn_down) quantization = type_name(layers[0].ffn_down->type);
    return {{"parent_model", ""},
            {"format", "gguf"},
            {"family", m.arch_name()},
            {"families", json::array({m.arch_name()})},
            {"parameter_size", parameter_size(m.n_params())},
            {"quantization_level", quantization}};
}

std::string started_stamp(const generation_host &host) {
    return ollama_timestamp(std::chrono::system_clock::from_time_t(std::time_t(host.started_at())));
}

// --- requests

// options {...} as the OpenAI fields they mean; options about loading (num_ctx, num_gpu, ...) are
// the server's and are ignored here.
void ollama_options(const json &body, json &out) {
    const auto options = field(
        body, "options", [](const json &j) { return j.is_object(); }, "an object");
    if (!options) return;
    static const std::pair<const char *, const char *> same[] = {
        {"temperature", "temperature"},
        {"top_p", "top_p"},
        {"top_k", "top_k"},
        {"min_p", "min_p"},
        {"typical_p", "typical_p"},
        {"repeat_penalty", "repeat_penalty"},
        {"repeat_last_n", "repeat_last_n"},
        {"presence_penalty", "presence_penalty"},
        {"frequency_penalty", "frequency_penalty"},
        {"seed", "seed"},
        {"stop", "stop"},
        {"mirostat", "mirostat"},
        {"mirostat_tau", "mirostat_tau"},
        {"mirostat_eta", "mirostat_eta"},
        {"num_keep", "n_keep"},
    };
    for (const auto &[from, to] : same) copy_field(*options, from, out, to);
    // negative (-1: no limit, -2: fill the context): the server's own limit (--n-predict)
    if (auto n = integer_field(*options, "num_predict"); n && *n >= 0) out["max_tokens"] = *n;
}

// "format": "json" or a JSON schema, as response_format.
void ollama_format(const json &body, json &out) {
    const auto format = body.find("format");
    if (format == body.end() || format->is_null() ||
        (format->is_string() && format->get<std::string>().empty()))
        return;
    if (format->is_string() && *format == "json")
        out["response_format"] = {{"type", "json_object"}};
    else if (format->is_object())
        out["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", *format}}}};
    else
        throw request_error("'format' must be \"json\" or a JSON schema object, got " + json_kind(*format));
}

// Base64 images (Ollama sends no media type) as image_url parts after the text.
json ollama_content_with_images(const std::string &text, const json &images, const std::string &where) {
    json parts = json::array({{{"type", "text"}, {"text", text}}});
    for (size_t i = 0; i < images.size(); ++i) {
        if (!images[i].is_string())
            throw request_error(where + "[" + std::to_string(i) + "] must be a base64 string, got " +
                                json_kind(images[i]));
        parts.push_back(
            {{"type", "image_url"},
             {"image_url",
              {{"url", "data:application/octet-stream;base64," + images[i].get<std::string>()}}}});
    }
    return parts;
}

json ollama_message(const json &m, size_t index) {
    const std::string where = "'messages[" + std::to_string(index) + "]'";
    if (!m.is_object()) throw request_error(where + " must be an object, got " + json_kind(m));
    const auto role = field(m, "role", json_is_string, "a string");
    static const char *roles[] = {"system", "user", "assistant", "tool"};
    if (!role || std::find(std::begin(roles), std::end(roles), role->get<std::string>()) == std::end(roles))
        throw request_error(where + " needs a 'role' of system, user, assistant or tool");
    const auto content = field(m, "content", json_is_string, "a string");
    const std::string text = content ? content->get<std::string>() : std::string();
    json out = {{"role", *role}, {"content", text}};
    if (auto images = field(m, "images", json_is_array, "an array of base64 strings");
        images && !images->empty())
        out["content"] = ollama_content_with_images(text, *images, where + ".images");
    if (auto calls = field(m, "tool_calls", json_is_array, "an array"); calls && !calls->empty()) {
        json converted = json::array();
        for (size_t i = 0; i < calls->size(); ++i) {
            const json &c = (*calls)[i];
            const std::string at = where + ".tool_calls[" + std::to_string(i) + "]";
            const auto function = c.is_object() ? c.find("function") : c.end();
            if (function == c.end() || !function->is_object() || !function->contains("name") ||
                !(*function)["name"].is_string())
                throw request_error(at + " needs 'function': {\"name\", \"arguments\"}");
            const json args = function->value("arguments", json::object());
            converted.push_back(
                {{"id", "call_" + std::to_string(index) + "_" + std::to_string(i)},
                 {"type", "function"},
                 {"function",
                  {{"name", (*function)["name"]},
                   {"arguments", args.is_string() ? args.get<std::string>() : args.dump()}}}});
        }
        out["tool_calls"] = converted;
    }
    copy_field(m, "tool_name", out, "name");
    return out;
}

// The end of a reply: Ollama's counts and durations (nanoseconds).
json ollama_final_fields(const serving::completion &done, std::chrono::steady_clock::time_point start) {
    const auto total = std::chrono::steady_clock::now() - start;
    return {{"done", true},
            {"done_reason", done.finish == serving::finish_reason::length ? "length" : "stop"},
            {"total_duration", std::chrono::duration_cast<std::chrono::nanoseconds>(total).count()},
            {"load_duration", 0},
            {"prompt_eval_count", done.n_prompt},
            {"prompt_eval_duration", int64_t(done.prompt_ms * 1e6)},
            {"eval_count", done.tokens.size()},
            {"eval_duration", int64_t(done.generate_ms * 1e6)}};
}

nlohmann::ordered_json ollama_tool_calls(const parsed_reply &r) {
    nlohmann::ordered_json calls = nlohmann::ordered_json::array();
    for (const tool_call &c : r.calls)
        calls.push_back({{"function", {{"name", c.name}, {"arguments", arguments_object(c.arguments)}}}});
    return calls;
}

// One line of a reply: {"model", "created_at", "message": {...} | "response": "...", "done"}.
// (ordered: the calls' arguments keep the model's key order)
// The thoughts, where the server split some out (--reasoning-format), go in "thinking" beside them.
nlohmann::ordered_json ollama_reply_line(const std::string &name, bool generate, const std::string &text,
                                         const nlohmann::ordered_json &calls = nullptr,
                                         const std::string &thinking = {}) {
    nlohmann::ordered_json line = {{"model", name}, {"created_at", now_stamp()}};
    if (generate) {
        line["response"] = text;
        if (!thinking.empty()) line["thinking"] = thinking;
    } else {
        line["message"] = {{"role", "assistant"}, {"content", text}};
        if (!thinking.empty()) line["message"]["thinking"] = thinking;
        if (!calls.is_null() && !calls.empty()) line["message"]["tool_calls"] = calls;
    }
    line["done"] = false;
    return line;
}

class ollama_stream : public stream_framing {
  public:
    ollama_stream(std::string name, bool generate, reply_stream reply)
        : name_(std::move(name)),
          generate_(generate),
          reply_(std::move(reply)),
          start_(std::chrono::steady_clock::now()) {}

    std::string start() override { return {}; }
    std::string text(const std::string &piece) override { return line(reply_.feed(piece)); }
    std::string finish(const serving::completion &done) override {
        const reply_stream::ending e = reply_.finish(done.text);
        const parsed_reply &r = e.reply;
        std::string out;
        if (!r.content.empty() || !r.calls.empty() || !e.reasoning.empty())
            out = ollama_reply_line(name_, generate_, r.content, ollama_tool_calls(r), e.reasoning).dump() +
                  "\n";
        nlohmann::ordered_json last = ollama_reply_line(name_, generate_, "");
        last.update(nlohmann::ordered_json(ollama_final_fields(done, start_)));
        return out + last.dump() + "\n";
    }
    std::string failure(const std::string &message) override {
        return error_body_for(api_kind::ollama, message, 500).dump() + "\n";
    }
    std::string keepalive() override { return {}; }

  private:
    std::string line(const reply_stream::shown &piece) {
        if (piece.text.empty() && piece.reasoning.empty()) return {};
        return ollama_reply_line(name_, generate_, piece.text, nullptr, piece.reasoning).dump() + "\n";
    }

    std::string name_;
    bool generate_;
    reply_stream reply_;
    std::chrono::steady_clock::time_point start_;
};

void ollama_run(generation_host &host, const httplib::Request &req, httplib::Response &res, bool generate) {
    const auto start = std::chrono::steady_clock::now();
    const json body = json_object_body(req.body);
    field(body, "model", json_is_string, "a string");
    field(
        body, "think", [](const json &j) { return j.is_boolean() || j.is_string(); },
        "true, false, \"high\", \"medium\" or \"low\"");
    bool chat = true;
    json openai = ollama_to_openai(body, generate, &chat);
    const bool stream = bool_field(body, "stream").value_or(true);
    const std::string name = ollama_name(host);
    // nothing to say: Ollama's answer to a request that only loads the model
    const bool nothing = chat ? openai["messages"].empty() : openai["prompt"].get<std::string>().empty();
    if (nothing) {
        nlohmann::ordered_json line = ollama_reply_line(name, generate, "");
        line["done"] = true;
        line["done_reason"] = "load";
        res.set_content(line.dump() + (stream ? "\n" : ""),
                        stream ? "application/x-ndjson" : "application/json");
        return;
    }
    openai["stream"] = stream;
    const parsed_request p = host.read_openai(openai, chat);
    std::shared_ptr<serving::job> job = host.submit_one(p);
    if (stream) {
        stream_job(
            res, "application/x-ndjson", job,
            std::make_shared<ollama_stream>(name, generate, reply_stream(p.tools, host.thought_splitter(p))));
        return;
    }
    const serving::completion done = wait_whole(*job);
    reply_stream reply(p.tools, host.thought_splitter(p));
    const reply_stream::ending e = reply.finish(done.text);
    const parsed_reply &r = e.reply;
    nlohmann::ordered_json out =
        ollama_reply_line(name, generate, r.content, ollama_tool_calls(r), e.reasoning);
    out.update(nlohmann::ordered_json(ollama_final_fields(done, start)));
    res.set_content(out.dump(), "application/json");
}

// The inputs' vectors through /v1/embeddings (unit length, as Ollama's are).
json ollama_vectors(generation_host &host, const json &input, int64_t *n_tokens) {
    const json answer = host.openai_embeddings({{"input", input}});
    json vectors = json::array();
    for (const json &item : answer["data"]) vectors.push_back(item["embedding"]);
    *n_tokens = answer["usage"]["prompt_tokens"].get<int64_t>();
    return vectors;
}

json ollama_model_entry(const generation_host &host) {
    const model &m = host.served_model();
    const std::string name = ollama_name(host);
    return {{"name", name},
            {"model", name},
            {"modified_at", started_stamp(host)},
            {"size", m.n_weight_bytes()},
            {"digest", model_digest(m)},
            {"details", ollama_details(m)}};
}

}  // namespace

namespace {

// "think": true / false turns the template's thinking on or off (enable_thinking); "high", "medium"
// or "low" (gpt-oss) turns it on with that reasoning_effort.
void ollama_think(const json &body, json &out) {
    const auto think = body.find("think");
    if (think == body.end() || think->is_null()) return;
    if (think->is_boolean()) {
        out["chat_template_kwargs"] = {{"enable_thinking", think->get<bool>()}};
        return;
    }
    const std::string effort = think->is_string() ? think->get<std::string>() : std::string();
    if (effort != "high" && effort != "medium" && effort != "low")
        throw request_error("'think' must be true, false, \"high\", \"medium\" or \"low\"");
    out["chat_template_kwargs"] = {{"enable_thinking", true}, {"reasoning_effort", effort}};
}

}  // namespace

json ollama_to_openai(const json &body, bool generate, bool *chat) {
    json out = json::object();
    copy_sampling_extensions(body, out);  // llama-server's fields (grammar, ...) at the top level
    ollama_options(body, out);
    ollama_format(body, out);
    ollama_think(body, out);
    if (!generate) {
        *chat = true;
        const auto messages = field(body, "messages", json_is_array, "an array");
        json converted = json::array();
        if (messages)
            for (size_t i = 0; i < messages->size(); ++i)
                converted.push_back(ollama_message((*messages)[i], i));
        out["messages"] = converted;
        if (auto tools = field(body, "tools", json_is_array, "an array"); tools && !tools->empty())
            out["tools"] = *tools;
        return out;
    }
    if (auto suffix = field(body, "suffix", json_is_string, "a string");
        suffix && !suffix->get<std::string>().empty())
        throw request_error("'suffix' (fill in the middle) is not supported by this server");
    if (auto context = field(body, "context", json_is_array, "an array"); context && !context->empty())
        throw request_error("'context' is not supported: send the conversation to /api/chat instead");
    if (auto tmpl = field(body, "template", json_is_string, "a string");
        tmpl && !tmpl->get<std::string>().empty())
        throw request_error("'template' is not supported: the model's own chat template is used (or 'raw')");
    const auto prompt = field(body, "prompt", json_is_string, "a string");
    const std::string text = prompt ? prompt->get<std::string>() : std::string();
    const auto images = field(body, "images", json_is_array, "an array of base64 strings");
    if (bool_field(body, "raw").value_or(false)) {
        if (images && !images->empty()) throw request_error("'images' are not taken with 'raw': true");
        *chat = false;
        out["prompt"] = text;
        return out;
    }
    *chat = true;
    json messages = json::array();
    if (text.empty() && (!images || images->empty())) {
        out["messages"] = messages;  // a request that only loads the model
        return out;
    }
    if (auto system = field(body, "system", json_is_string, "a string"))
        messages.push_back({{"role", "system"}, {"content", *system}});
    messages.push_back(
        {{"role", "user"},
         {"content",
          images && !images->empty() ? ollama_content_with_images(text, *images, "'images'") : json(text)}});
    out["messages"] = messages;
    return out;
}

void ollama_chat(generation_host &host, const httplib::Request &req, httplib::Response &res) {
    ollama_run(host, req, res, false);
}

void ollama_generate(generation_host &host, const httplib::Request &req, httplib::Response &res) {
    ollama_run(host, req, res, true);
}

void ollama_embed(generation_host &host, const httplib::Request &req, httplib::Response &res) {
    const auto start = std::chrono::steady_clock::now();
    const json body = json_object_body(req.body);
    const auto input = field(
        body, "input", [](const json &j) { return j.is_string() || j.is_array(); },
        "a string or an array of strings");
    if (!input) throw request_error("'input' is required: a string or an array of strings");
    if (input->is_array())
        for (const json &s : *input)
            if (!s.is_string()) throw request_error("'input' must hold strings, got " + json_kind(s));
    if (field(
            body, "dimensions", [](const json &j) { return j.is_number_integer(); }, "an integer"))
        throw request_error("'dimensions' is not supported: the model's vectors are returned whole");
    int64_t n_tokens = 0;
    json vectors = ollama_vectors(host, *input, &n_tokens);
    const auto total = std::chrono::steady_clock::now() - start;
    res.set_content(
        json{{"model", ollama_name(host)},
             {"embeddings", std::move(vectors)},
             {"total_duration", std::chrono::duration_cast<std::chrono::nanoseconds>(total).count()},
             {"load_duration", 0},
             {"prompt_eval_count", n_tokens}}
            .dump(),
        "application/json");
}

void ollama_embeddings(generation_host &host, const httplib::Request &req, httplib::Response &res) {
    const json body = json_object_body(req.body);
    const auto prompt = field(body, "prompt", json_is_string, "a string");
    if (!prompt) throw request_error("'prompt' is required: a string");
    int64_t n_tokens = 0;
    json vectors = ollama_vectors(host, *prompt, &n_tokens);
    res.set_content(json{{"embedding", vectors.at(0)}}.dump(), "application/json");
}

void ollama_tags(generation_host &host, httplib::Response &res) {
    res.set_content(json{{"models", json::array({ollama_model_entry(host)})}}.dump(), "application/json");
}

void ollama_ps(generation_host &host, httplib::Response &res) {
    json entry = ollama_model_entry(host);
    entry.erase("modified_at");
    entry["expires_at"] = "2318-01-01T00:00:00Z";  // the model stays loaded while the server runs
    entry["size_vram"] = 0;
    entry["context_length"] = host.served_engine().n_ctx_slot();
    res.set_content(json{{"models", json::array({entry})}}.dump(), "application/json");
}

void ollama_show(generation_host &host, const httplib::Request &req, httplib::Response &res) {
    const json body = json_object_body(req.body);
    const auto name = field(body, "model", json_is_string, "a string");
    const auto old_name = field(body, "name", json_is_string, "a string");
    if (!name && !old_name) throw request_error("'model' is required: the model's name");
    const model &m = host.served_model();
    const model_hparams &hp = m.hparams();
    json capabilities = json::array();
    if (host.embeds()) {
        capabilities.push_back("embedding");
    } else {
        capabilities.push_back("completion");
        if (host.renders_tools()) capabilities.push_back("tools");
        if (host.sees_images()) capabilities.push_back("vision");
    }
    const std::string &arch = m.arch_name();
    res.set_content(json{{"license", ""},
                         {"modelfile", "# served by weft\nFROM " + m.path() + "\n"},
                         {"parameters", ""},
                         {"template", ""},
                         {"details", ollama_details(m)},
                         {"model_info",
                          {{"general.architecture", arch},
                           {"general.parameter_count", m.n_params()},
                           {arch + ".context_length", hp.n_ctx_train},
                           {arch + ".embedding_length", hp.n_embd},
                           {arch + ".block_count", hp.n_layer}}},
                         {"capabilities", capabilities},
                         {"modified_at", started_stamp(host)}}
                        .dump(),
                    "application/json");
}

void ollama_version(httplib::Response &res) {
    res.set_content(json{{"version", ollama_api_version}}.dump(), "application/json");
}

}  // namespace weft::server
