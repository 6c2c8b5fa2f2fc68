// src/server/anthropic_api.cpp — Anthropic's Messages API over the OpenAI chat machinery (see
// anthropic_api.h).
#include "server/anthropic_api.h"

#include <string>
#include <utility>

namespace weft::server {
namespace {

// A block's "type", or request_error naming where it is.
std::string anthropic_block_type(const json &block, const std::string &where) {
    if (!block.is_object()) throw request_error(where + " must be an object, got " + json_kind(block));
    const auto type = field(block, "type", json_is_string, "a string");
    if (!type) throw request_error(where + " needs a 'type'");
    return type->get<std::string>();
}

std::string anthropic_block_text(const json &block, const std::string &where) {
    const auto text = field(block, "text", json_is_string, "a string");
    if (!text) throw request_error(where + " (text) needs a string 'text'");
    return text->get<std::string>();
}

// An image block's source as OpenAI's image_url part: base64 data as a data: URI; a URL as it is
// (which the image reader refuses with its reason: the server fetches nothing).
json anthropic_image_part(const json &block, const std::string &where) {
    const auto source = field(block, "source", json_is_object, "an object");
    if (!source) throw request_error(where + " (image) needs a 'source'");
    const std::string kind = string_field_or(*source, "type", "", where + ".source");
    std::string url;
    if (kind == "base64") {
        const auto media = field(*source, "media_type", json_is_string, "a string");
        const auto data = field(*source, "data", json_is_string, "a string");
        if (!media || !data)
            throw request_error(where + ".source (base64) needs 'media_type' and 'data' strings");
        url = "data:" + media->get<std::string>() + ";base64," + data->get<std::string>();
    } else if (kind == "url") {
        const auto u = field(*source, "url", json_is_string, "a string");
        if (!u) throw request_error(where + ".source (url) needs a string 'url'");
        url = u->get<std::string>();
    } else {
        throw request_error(where + ".source: type '" + kind + "' is not supported ('base64' and 'url' are)");
    }
    return {{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

// A tool_result block's content as text (a string, or text blocks joined).
std::string anthropic_tool_result_text(const json &block, const std::string &where) {
    const auto content = block.find("content");
    if (content == block.end() || content->is_null()) return {};
    if (content->is_string()) return content->get<std::string>();
    if (!content->is_array())
        throw request_error(where + ".content must be a string or an array of blocks, got " +
                            json_kind(*content));
    std::string text;
    for (size_t i = 0; i < content->size(); ++i) {
        const std::string at = where + ".content[" + std::to_string(i) + "]";
        const std::string type = anthropic_block_type((*content)[i], at);
        if (type != "text")
            throw request_error(at + ": a tool result's '" + type + "' block is not supported (text is)");
        text += anthropic_block_text((*content)[i], at);
    }
    return text;
}

// One Anthropic message as OpenAI messages: tool results become "tool" messages (before the turn's
// other content), tool_use blocks the assistant's tool_calls, text and images the content.
void anthropic_turn(const json &m, size_t index, json &out) {
    const std::string where = "'messages[" + std::to_string(index) + "]'";
    if (!m.is_object()) throw request_error(where + " must be an object, got " + json_kind(m));
    const auto role = field(m, "role", json_is_string, "a string");
    if (!role || (*role != "user" && *role != "assistant"))
        throw request_error(where + " needs a 'role' of \"user\" or \"assistant\"");
    const auto content = m.find("content");
    if (content == m.end() || !(content->is_string() || content->is_array()))
        throw request_error(where + " needs a 'content': a string or an array of blocks");
    if (content->is_string()) {
        out.push_back({{"role", *role}, {"content", *content}});
        return;
    }
    json parts = json::array(), calls = json::array();
    std::string text;
    bool images = false;
    for (size_t i = 0; i < content->size(); ++i) {
        const json &block = (*content)[i];
        const std::string at = "'messages[" + std::to_string(index) + "].content[" + std::to_string(i) + "]'";
        const std::string type = anthropic_block_type(block, at);
        if (type == "text") {
            const std::string t = anthropic_block_text(block, at);
            text += t;
            parts.push_back({{"type", "text"}, {"text", t}});
        } else if (type == "image") {
            if (*role != "user") throw request_error(at + ": images are taken in user turns only");
            parts.push_back(anthropic_image_part(block, at));
            images = true;
        } else if (type == "tool_use") {
            if (*role != "assistant") throw request_error(at + ": tool_use blocks belong to assistant turns");
            const auto id = field(block, "id", json_is_string, "a string");
            const auto name = field(block, "name", json_is_string, "a string");
            const auto input = field(block, "input", json_is_object, "an object");
            if (!id || !name) throw request_error(at + " (tool_use) needs 'id' and 'name' strings");
            calls.push_back(
                {{"id", *id},
                 {"type", "function"},
                 {"function", {{"name", *name}, {"arguments", input ? input->dump() : std::string("{}")}}}});
        } else if (type == "tool_result") {
            if (*role != "user") throw request_error(at + ": tool_result blocks belong to user turns");
            const auto id = field(block, "tool_use_id", json_is_string, "a string");
            if (!id) throw request_error(at + " (tool_result) needs a string 'tool_use_id'");
            out.push_back({{"role", "tool"},
                           {"tool_call_id", *id},
                           {"content", anthropic_tool_result_text(block, at)}});
        } else if (type == "thinking" || type == "redacted_thinking") {
            // earlier reasoning is not shown to the model again (as templates drop it)
        } else {
            throw request_error(at + ": blocks of type '" + type +
                                "' are not supported (text, image, tool_use, tool_result and thinking are)");
        }
    }
    if (parts.empty() && calls.empty()) return;  // only tool results (or thinking)
    json message = {{"role", *role}, {"content", images ? parts : json(text)}};
    if (!calls.empty()) message["tool_calls"] = calls;
    out.push_back(std::move(message));
}

// Anthropic's tool list as OpenAI's function tools.
json anthropic_tools(const json &tools) {
    json out = json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const json &t = tools[i];
        const std::string at = "'tools[" + std::to_string(i) + "]'";
        if (!t.is_object()) throw request_error(at + " must be an object, got " + json_kind(t));
        const auto type = field(t, "type", json_is_string, "a string");
        if (type && *type != "custom")
            throw request_error(at + ": server tools ('" + type->get<std::string>() +
                                "') are not supported; tools with a name and an input_schema are");
        const auto name = field(t, "name", json_is_string, "a string");
        if (!name) throw request_error(at + " needs a string 'name'");
        const auto schema = field(t, "input_schema", json_is_object, "an object");
        json function = {{"name", *name}, {"parameters", schema ? *schema : json::object()}};
        copy_field(t, "description", function, "description");
        out.push_back({{"type", "function"}, {"function", function}});
    }
    return out;
}

// tool_choice {"type": "auto" | "any" | "tool" | "none"} as OpenAI's.
json anthropic_tool_choice(const json &choice) {
    const auto type = field(choice, "type", json_is_string, "a string");
    const std::string kind = type ? type->get<std::string>() : "";
    if (kind == "auto" || kind == "none") return kind;
    if (kind == "any") return "required";
    if (kind == "tool") {
        const auto name = field(choice, "name", json_is_string, "a string");
        if (!name) throw request_error("'tool_choice' of type 'tool' needs a 'name'");
        return {{"type", "function"}, {"function", {{"name", *name}}}};
    }
    throw request_error("'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"");
}

// thinking {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}: whether the template
// is asked to think (enable_thinking). The budget is checked but not enforced: generation stops
// at max_tokens only.
bool anthropic_thinking(const json &thinking) {
    const std::string type = string_field_or(thinking, "type", "", "'thinking'");
    if (type == "disabled") return false;
    if (type != "enabled") throw request_error("'thinking.type' must be \"enabled\" or \"disabled\"");
    const auto budget = integer_field(thinking, "budget_tokens");
    if (!budget) throw request_error("'thinking' of type 'enabled' needs an integer 'budget_tokens'");
    if (*budget < 1)
        throw request_error("'thinking.budget_tokens' must be at least 1, got " + std::to_string(*budget));
    return true;
}

// --- the answer

const char *anthropic_stop_reason(const serving::completion &c, bool tool_calls) {
    if (tool_calls) return "tool_use";
    if (c.finish == serving::finish_reason::length) return "max_tokens";
    if (!c.stop_word.empty()) return "stop_sequence";
    return "end_turn";
}

json anthropic_stop_sequence(const serving::completion &c) {
    return c.stop_word.empty() ? json(nullptr) : json(c.stop_word);
}

nlohmann::ordered_json anthropic_tool_use(const tool_call &call) {
    return {{"type", "tool_use"},
            {"id", "toolu_" + random_letters()},
            {"name", call.name},
            {"input", arguments_object(call.arguments)}};
}

json anthropic_envelope(const std::string &id, const std::string &model_id) {
    return {{"id", id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model_id},
            {"content", json::array()},
            {"stop_reason", nullptr},
            {"stop_sequence", nullptr}};
}

json anthropic_usage(size_t input_tokens, size_t output_tokens) {
    return {{"input_tokens", input_tokens}, {"output_tokens", output_tokens}};
}

// The event stream of one message: its blocks in order, each opened, filled by deltas and closed:
// the thoughts (where the server split some out: a "thinking" block of thinking_delta events), the
// text, then each tool call.
class anthropic_stream : public stream_framing {
  public:
    anthropic_stream(std::string id, std::string model_id, size_t input_tokens, reply_stream reply)
        : id_(std::move(id)),
          model_id_(std::move(model_id)),
          input_tokens_(input_tokens),
          reply_(std::move(reply)) {}

    std::string start() override {
        json message = anthropic_envelope(id_, model_id_);
        message["usage"] = anthropic_usage(input_tokens_, 0);
        return sse_event("message_start", {{"type", "message_start"}, {"message", message}}) +
               sse_event("ping", {{"type", "ping"}});
    }
    std::string text(const std::string &piece) override {
        const reply_stream::shown s = reply_.feed(piece);
        return delta(block::thinking, s.reasoning) + delta(block::text, s.text);
    }
    std::string finish(const serving::completion &done) override {
        const reply_stream::ending e = reply_.finish(done.text);
        const parsed_reply &r = e.reply;
        std::string out = delta(block::thinking, e.reasoning) + delta(block::text, r.content);
        if (!text_seen_ && r.calls.empty()) out += open(block::text);  // a message has a text block
        out += close();
        for (const tool_call &call : r.calls) {
            nlohmann::ordered_json b = anthropic_tool_use(call);
            const std::string input = b["input"].dump();
            b["input"] = nlohmann::ordered_json::object();
            out += sse_event("content_block_start",
                             {{"type", "content_block_start"}, {"index", index_}, {"content_block", b}});
            out += sse_event("content_block_delta",
                             {{"type", "content_block_delta"},
                              {"index", index_},
                              {"delta", {{"type", "input_json_delta"}, {"partial_json", input}}}});
            open_ = block::tool_use;
            out += close();
        }
        out += sse_event("message_delta", {{"type", "message_delta"},
                                           {"delta",
                                            {{"stop_reason", anthropic_stop_reason(done, !r.calls.empty())},
                                             {"stop_sequence", anthropic_stop_sequence(done)}}},
                                           {"usage", {{"output_tokens", done.tokens.size()}}}});
        return out + sse_event("message_stop", {{"type", "message_stop"}});
    }
    std::string failure(const std::string &message) override {
        return sse_event("error", error_body_for(api_kind::anthropic, message, 500));
    }
    std::string keepalive() override { return ": waiting\n\n"; }

  private:
    enum class block { none, thinking, text, tool_use };

    std::string open(block kind) {
        std::string out = close();
        open_ = kind;
        if (kind == block::text) text_seen_ = true;
        const json content = kind == block::thinking
                                 ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                 : json{{"type", "text"}, {"text", ""}};
        return out +
               sse_event("content_block_start",
                         {{"type", "content_block_start"}, {"index", index_}, {"content_block", content}});
    }
    // A piece of a thinking or text block (opened first when another is open, or none).
    std::string delta(block kind, const std::string &piece) {
        if (piece.empty()) return {};
        std::string out = open_ == kind ? std::string() : open(kind);
        const json d = kind == block::thinking ? json{{"type", "thinking_delta"}, {"thinking", piece}}
                                               : json{{"type", "text_delta"}, {"text", piece}};
        return out + sse_event("content_block_delta",
                               {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
    }
    std::string close() {
        if (open_ == block::none) return {};
        open_ = block::none;
        return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_++}});
    }

    std::string id_, model_id_;
    size_t input_tokens_;
    reply_stream reply_;
    block open_ = block::none;
    bool text_seen_ = false;
    int index_ = 0;
};

}  // namespace

json anthropic_to_openai_chat(const json &body, bool count_tokens) {
    json out = json::object();
    copy_sampling_extensions(body, out);
    const auto max_tokens = integer_field(body, "max_tokens");
    if (!count_tokens) {
        if (!max_tokens) throw request_error("'max_tokens' is required: the most tokens to generate");
        if (*max_tokens < 1)
            throw request_error("'max_tokens' must be at least 1, got " + std::to_string(*max_tokens));
        out["max_tokens"] = *max_tokens;
    }
    for (const char *name : {"temperature", "top_p"})
        if (auto v = number_field(body, name)) out[name] = *v;
    if (auto v = integer_field(body, "top_k")) out["top_k"] = *v;
    if (auto v = bool_field(body, "stream")) out["stream"] = *v;
    if (auto stops = field(body, "stop_sequences", json_is_array, "an array of strings")) {
        for (const json &s : *stops)
            if (!s.is_string())
                throw request_error("'stop_sequences' must hold strings, got " + json_kind(s));
        out["stop"] = *stops;
    }
    json messages = json::array();
    if (auto system = field(
            body, "system", [](const json &j) { return j.is_string() || j.is_array(); },
            "a string or an array of text blocks")) {
        std::string text;
        if (system->is_string()) {
            text = system->get<std::string>();
        } else {
            for (size_t i = 0; i < system->size(); ++i) {
                const std::string at = "'system[" + std::to_string(i) + "]'";
                if (anthropic_block_type((*system)[i], at) != "text")
                    throw request_error(at + ": the system prompt takes text blocks only");
                if (!text.empty()) text += "\n";
                text += anthropic_block_text((*system)[i], at);
            }
        }
        messages.push_back({{"role", "system"}, {"content", text}});
    }
    const auto turns = field(body, "messages", json_is_array, "an array");
    if (!turns || turns->empty())
        throw request_error("'messages' is required: a non-empty array of {\"role\", \"content\"} turns");
    for (size_t i = 0; i < turns->size(); ++i) anthropic_turn((*turns)[i], i, messages);
    out["messages"] = messages;
    if (auto tools = field(body, "tools", json_is_array, "an array"); tools && !tools->empty())
        out["tools"] = anthropic_tools(*tools);
    if (auto choice = field(body, "tool_choice", json_is_object, "an object"))
        out["tool_choice"] = anthropic_tool_choice(*choice);
    if (auto thinking = field(body, "thinking", json_is_object, "an object"))
        out["chat_template_kwargs"] = {{"enable_thinking", anthropic_thinking(*thinking)}};
    return out;
}

void anthropic_messages(generation_host &host, const httplib::Request &req, httplib::Response &res) {
    const json body = json_object_body(req.body);
    const parsed_request p = host.read_openai(anthropic_to_openai_chat(body, false), true);
    const std::string id = "msg_" + random_letters();
    const size_t input_tokens = p.prompts.at(0).size();
    std::shared_ptr<serving::job> job = host.submit_one(p);
    if (p.stream) {
        stream_job(res, "text/event-stream", job,
                   std::make_shared<anthropic_stream>(id, host.served_model_id(), input_tokens,
                                                      reply_stream(p.tools, host.thought_splitter(p))));
        return;
    }
    const serving::completion done = wait_whole(*job);
    reply_stream reply(p.tools, host.thought_splitter(p));
    const reply_stream::ending e = reply.finish(done.text);
    const parsed_reply &r = e.reply;
    nlohmann::ordered_json message =
        anthropic_envelope(id, host.served_model_id());  // keeps the input's order
    if (!e.reasoning.empty())
        message["content"].push_back({{"type", "thinking"}, {"thinking", e.reasoning}, {"signature", ""}});
    if (!r.content.empty() || r.calls.empty())
        message["content"].push_back({{"type", "text"}, {"text", r.content}});
    for (const tool_call &call : r.calls) message["content"].push_back(anthropic_tool_use(call));
    message["stop_reason"] = anthropic_stop_reason(done, !r.calls.empty());
    message["stop_sequence"] = anthropic_stop_sequence(done);
    message["usage"] = anthropic_usage(input_tokens, done.tokens.size());
    res.set_content(message.dump(), "application/json");
}

void anthropic_count_tokens(generation_host &host, const httplib::Request &req, httplib::Response &res) {
    const json body = json_object_body(req.body);
    json chat = anthropic_to_openai_chat(body, true);
    chat["max_tokens"] = 1;
    const parsed_request p = host.read_openai(chat, true);
    res.set_content(json{{"input_tokens", p.prompts.at(0).size()}}.dump(), "application/json");
}

}  // namespace weft::server
