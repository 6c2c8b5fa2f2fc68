// src/server/responses_api.cpp — OpenAI's Responses API over the chat machinery (see
// responses_api.h).
#include "server/responses_api.h"

#include <algorithm>
#include <ctime>
#include <string>
#include <utility>

namespace weft::server {
namespace {

// A message item's content as chat content: a string, or parts (input_text / output_text / refusal
// as text, input_image with a data: URI as an image_url part).
json responses_content(const json &content, const std::string &where) {
    if (content.is_string()) return content;
    if (!content.is_array())
        throw request_error(where + ".content must be a string or an array of parts, got " +
                            json_kind(content));
    json parts = json::array();
    for (size_t i = 0; i < content.size(); ++i) {
        const json &part = content[i];
        const std::string at = where + ".content[" + std::to_string(i) + "]";
        if (!part.is_object()) throw request_error(at + " must be an object, got " + json_kind(part));
        const std::string type = string_field_or(part, "type", "", at);
        if (type == "input_text" || type == "output_text" || type == "text") {
            const auto text = field(part, "text", json_is_string, "a string");
            if (!text) throw request_error(at + " needs a string 'text'");
            parts.push_back({{"type", "text"}, {"text", *text}});
        } else if (type == "refusal") {
            const auto text = field(part, "refusal", json_is_string, "a string");
            if (!text) throw request_error(at + " needs a string 'refusal'");
            parts.push_back({{"type", "text"}, {"text", *text}});
        } else if (type == "input_image") {
            const auto url = field(part, "image_url", json_is_string, "a string");
            if (!url)
                throw request_error(
                    at + ": an input_image needs 'image_url' (a data: URI; file_id is not supported)");
            parts.push_back({{"type", "image_url"}, {"image_url", {{"url", *url}}}});
        } else {
            throw request_error(at + ": parts of type '" + type +
                                "' are not supported (input_text, output_text, refusal and input_image are)");
        }
    }
    return parts;
}

// The last message if it is the assistant's (function calls of one turn join it), else a new one.
json &responses_assistant_turn(json &messages) {
    if (messages.empty() || messages.back().value("role", "") != "assistant")
        messages.push_back({{"role", "assistant"}, {"content", ""}});
    return messages.back();
}

void responses_item(const json &item, size_t index, json &messages) {
    const std::string where = "'input[" + std::to_string(index) + "]'";
    if (!item.is_object()) throw request_error(where + " must be an object, got " + json_kind(item));
    const std::string type = string_field_or(item, "type", item.contains("role") ? "message" : "", where);
    if (type == "message") {
        const auto role = field(item, "role", json_is_string, "a string");
        static const char *roles[] = {"user", "assistant", "system", "developer"};
        if (!role ||
            std::find(std::begin(roles), std::end(roles), role->get<std::string>()) == std::end(roles))
            throw request_error(where + " needs a 'role' of user, assistant, system or developer");
        const auto content = item.find("content");
        if (content == item.end()) throw request_error(where + " needs a 'content'");
        messages.push_back({{"role", *role == "developer" ? json("system") : *role},
                            {"content", responses_content(*content, where)}});
    } else if (type == "function_call") {
        const auto call_id = field(item, "call_id", json_is_string, "a string");
        const auto name = field(item, "name", json_is_string, "a string");
        const auto arguments = field(item, "arguments", json_is_string, "a string");
        if (!call_id || !name || !arguments)
            throw request_error(where + " (function_call) needs 'call_id', 'name' and 'arguments' strings");
        json &turn = responses_assistant_turn(messages);
        if (!turn.contains("tool_calls")) turn["tool_calls"] = json::array();
        turn["tool_calls"].push_back({{"id", *call_id},
                                      {"type", "function"},
                                      {"function", {{"name", *name}, {"arguments", *arguments}}}});
    } else if (type == "function_call_output") {
        const auto call_id = field(item, "call_id", json_is_string, "a string");
        const auto output = field(item, "output", json_is_string, "a string");
        if (!call_id || !output)
            throw request_error(where + " (function_call_output) needs 'call_id' and 'output' strings");
        messages.push_back({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", *output}});
    } else if (type == "reasoning") {
        // earlier reasoning is not shown to the model again
    } else {
        throw request_error(where + ": items of type '" + type +
                            "' are not supported (message, function_call, function_call_output and "
                            "reasoning are)");
    }
}

json responses_tools(const json &tools) {
    json out = json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const json &t = tools[i];
        const std::string at = "'tools[" + std::to_string(i) + "]'";
        if (!t.is_object()) throw request_error(at + " must be an object, got " + json_kind(t));
        const std::string type = string_field_or(t, "type", "", at);
        if (type != "function")
            throw request_error(at + ": tools of type '" + type + "' are not supported (function tools are)");
        const auto name = field(t, "name", json_is_string, "a string");
        if (!name) throw request_error(at + " needs a string 'name'");
        json function = {{"name", *name}};
        copy_field(t, "description", function, "description");
        copy_field(t, "parameters", function, "parameters");
        out.push_back({{"type", "function"}, {"function", function}});
    }
    return out;
}

// text.format as response_format.
json responses_text_format(const json &text) {
    const auto format = field(
        text, "format", [](const json &j) { return j.is_object(); }, "an object");
    if (!format) return nullptr;
    const std::string type = string_field_or(*format, "type", "", "'text.format'");
    if (type == "text") return nullptr;
    if (type == "json_object") return {{"type", "json_object"}};
    if (type == "json_schema") {
        const auto schema = field(
            *format, "schema", [](const json &j) { return j.is_object(); }, "an object");
        if (!schema) throw request_error("'text.format' of type 'json_schema' needs a 'schema' object");
        return {{"type", "json_schema"}, {"json_schema", {{"schema", *schema}}}};
    }
    throw request_error("'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
}

// --- the answer

struct response_shape {
    std::string id;
    std::string model_id;
    int64_t created_at = 0;
    json request;  // the fields a response echoes (instructions, max_output_tokens, tools, ...)
};

json response_object(const response_shape &s, const char *status) {
    json r = {{"id", s.id},
              {"object", "response"},
              {"created_at", s.created_at},
              {"status", status},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"model", s.model_id},
              {"output", json::array()},
              {"parallel_tool_calls", true},
              {"previous_response_id", nullptr},
              {"store", false},
              {"metadata", json::object()},
              {"text", {{"format", {{"type", "text"}}}}},
              {"tool_choice", "auto"},
              {"tools", json::array()},
              {"instructions", nullptr},
              {"max_output_tokens", nullptr},
              {"temperature", nullptr},
              {"top_p", nullptr},
              {"usage", nullptr}};
    for (const char *name : {"instructions", "max_output_tokens", "temperature", "top_p", "tools",
                             "tool_choice", "text", "metadata"})
        copy_field(s.request, name, r, name);
    return r;
}

json message_item(const std::string &id, const std::string &text, const char *status) {
    json content = json::array();
    if (std::string(status) == "completed")
        content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", json::array()}});
    return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

// The thoughts the server split out of a reply (--reasoning-format), as a reasoning item.
json reasoning_item(const std::string &id, const std::string &text, const char *status) {
    json content = json::array();
    if (std::string(status) == "completed") content.push_back({{"type", "reasoning_text"}, {"text", text}});
    return {{"type", "reasoning"},
            {"id", id},
            {"status", status},
            {"summary", json::array()},
            {"content", content}};
}

json function_call_item(const tool_call &call, const std::string &id, const std::string &call_id,
                        const std::string &arguments, const char *status) {
    return {{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", call.name},
            {"arguments", arguments},  {"status", status}};
}

json responses_usage(size_t input_tokens, const serving::completion &done) {
    return {{"input_tokens", input_tokens},
            {"input_tokens_details", {{"cached_tokens", done.n_cached}}},
            {"output_tokens", done.tokens.size()},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", input_tokens + done.tokens.size()}};
}

// The final response: its status ("incomplete" when max_output_tokens ended it), output and usage.
json responses_final(const response_shape &s, size_t input_tokens, const serving::completion &done,
                     const json &output) {
    const bool incomplete = done.finish == serving::finish_reason::length;
    json r = response_object(s, incomplete ? "incomplete" : "completed");
    if (incomplete) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    r["output"] = output;
    r["usage"] = responses_usage(input_tokens, done);
    return r;
}

// The events of one response: a reasoning item while the thoughts come (response.reasoning_text
// deltas), then the message (response.output_text deltas), then each function call, each item
// added, filled and done in turn at the next output index.
class responses_stream : public stream_framing {
  public:
    responses_stream(response_shape shape, size_t input_tokens, reply_stream reply)
        : shape_(std::move(shape)), input_tokens_(input_tokens), reply_(std::move(reply)) {}

    std::string start() override {
        const json r = response_object(shape_, "in_progress");
        std::string out = event("response.created", {{"response", r}});
        return out + event("response.in_progress", {{"response", r}});
    }
    std::string text(const std::string &piece) override {
        const reply_stream::shown s = reply_.feed(piece);
        return delta(item::reasoning, s.reasoning) + delta(item::message, s.text);
    }
    std::string finish(const serving::completion &done) override {
        const reply_stream::ending e = reply_.finish(done.text);
        const parsed_reply &r = e.reply;
        std::string out = delta(item::reasoning, e.reasoning) + delta(item::message, r.content);
        if (!message_seen_ && r.calls.empty()) out += open(item::message);  // a response has a message
        out += close();
        for (const tool_call &call : r.calls) {
            const size_t index = output_.size();
            const std::string id = "fc_" + random_letters(), call_id = "call_" + random_letters();
            out += event("response.output_item.added",
                         {{"output_index", index},
                          {"item", function_call_item(call, id, call_id, "", "in_progress")}});
            out += event("response.function_call_arguments.delta",
                         {{"item_id", id}, {"output_index", index}, {"delta", call.arguments}});
            out += event("response.function_call_arguments.done", {{"item_id", id},
                                                                   {"output_index", index},
                                                                   {"name", call.name},
                                                                   {"arguments", call.arguments}});
            const json done_item = function_call_item(call, id, call_id, call.arguments, "completed");
            out += event("response.output_item.done", {{"output_index", index}, {"item", done_item}});
            output_.push_back(done_item);
        }
        const json response = responses_final(shape_, input_tokens_, done, output_);
        const std::string name = "response." + response["status"].get<std::string>();
        return out + event(name, {{"response", response}});
    }
    std::string failure(const std::string &message) override {
        json r = response_object(shape_, "failed");
        r["error"] = {{"code", "server_error"}, {"message", message}};
        return event("response.failed", {{"response", r}});
    }
    std::string keepalive() override { return ": waiting\n\n"; }

  private:
    enum class item { none, reasoning, message };

    std::string event(const std::string &type, json data) {
        data["type"] = type;
        data["sequence_number"] = sequence_++;
        return sse_event(type, data);
    }
    // The fields that say where a piece of the open item goes.
    json at() const { return {{"item_id", id_}, {"output_index", output_.size()}, {"content_index", 0}}; }
    std::string open(item kind) {
        std::string out = close();
        open_ = kind;
        text_.clear();
        if (kind == item::reasoning) {
            id_ = "rs_" + random_letters();
            return out +
                   event("response.output_item.added", {{"output_index", output_.size()},
                                                        {"item", reasoning_item(id_, "", "in_progress")}});
        }
        message_seen_ = true;
        id_ = "msg_" + random_letters();
        out += event("response.output_item.added",
                     {{"output_index", output_.size()}, {"item", message_item(id_, "", "in_progress")}});
        json added = at();
        added["part"] = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
        return out + event("response.content_part.added", added);
    }
    std::string delta(item kind, const std::string &piece) {
        if (piece.empty()) return {};
        std::string out = open_ == kind ? std::string() : open(kind);
        text_ += piece;
        json d = at();
        d["delta"] = piece;
        if (kind == item::reasoning) return out + event("response.reasoning_text.delta", d);
        d["logprobs"] = json::array();
        return out + event("response.output_text.delta", d);
    }
    std::string close() {
        if (open_ == item::none) return {};
        const item kind = open_;
        open_ = item::none;
        std::string out;
        json d = at();
        d["text"] = text_;
        json done_item;
        if (kind == item::reasoning) {
            out += event("response.reasoning_text.done", d);
            done_item = reasoning_item(id_, text_, "completed");
        } else {
            d["logprobs"] = json::array();
            out += event("response.output_text.done", d);
            json part = at();
            part.erase("text");
            part["part"] = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}};
            out += event("response.content_part.done", part);
            done_item = message_item(id_, text_, "completed");
        }
        out += event("response.output_item.done", {{"output_index", output_.size()}, {"item", done_item}});
        output_.push_back(done_item);
        return out;
    }

    response_shape shape_;
    size_t input_tokens_;
    reply_stream reply_;
    item open_ = item::none;
    std::string id_;    // the open item's
    std::string text_;  // the open item's text so far
    bool message_seen_ = false;
    json output_ = json::array();  // the items done
    int64_t sequence_ = 0;
};

}  // namespace

json responses_to_openai_chat(const json &body) {
    json out = json::object();
    copy_sampling_extensions(body, out);
    if (field(body, "previous_response_id", json_is_string, "a string"))
        throw request_error(
            "'previous_response_id' is not supported: this server stores no responses; send the whole "
            "conversation in 'input'");
    if (auto n = integer_field(body, "max_output_tokens")) {
        if (*n < 1) throw request_error("'max_output_tokens' must be at least 1, got " + std::to_string(*n));
        out["max_tokens"] = *n;
    }
    for (const char *name : {"temperature", "top_p"})
        if (auto v = number_field(body, name)) out[name] = *v;
    if (auto v = bool_field(body, "stream")) out["stream"] = *v;
    json messages = json::array();
    if (auto instructions = field(body, "instructions", json_is_string, "a string"))
        messages.push_back({{"role", "system"}, {"content", *instructions}});
    const auto input = field(
        body, "input", [](const json &j) { return j.is_string() || j.is_array(); },
        "a string or an array of items");
    if (!input) throw request_error("'input' is required: a string or an array of items");
    if (input->is_string()) {
        messages.push_back({{"role", "user"}, {"content", *input}});
    } else {
        if (input->empty()) throw request_error("'input' is an empty array");
        for (size_t i = 0; i < input->size(); ++i) responses_item((*input)[i], i, messages);
    }
    out["messages"] = messages;
    if (auto tools = field(
            body, "tools", [](const json &j) { return j.is_array(); }, "an array");
        tools && !tools->empty())
        out["tools"] = responses_tools(*tools);
    if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
        if (choice->is_string() && (*choice == "auto" || *choice == "none" || *choice == "required")) {
            out["tool_choice"] = *choice;
        } else if (choice->is_object() && choice->value("type", json()) == "function" &&
                   choice->contains("name") && (*choice)["name"].is_string()) {
            out["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*choice)["name"]}}}};
        } else {
            throw request_error(
                "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                "\"name\"}");
        }
    }
    if (auto reasoning = field(body, "reasoning", json_is_object, "an object")) {
        // reasoning.effort: "none" asks the template not to think; another effort asks it to, with
        // that reasoning_effort (gpt-oss's low / medium / high)
        const std::string effort = string_field_or(*reasoning, "effort", "", "'reasoning'");
        if (effort == "none")
            out["chat_template_kwargs"] = {{"enable_thinking", false}};
        else if (!effort.empty())
            out["chat_template_kwargs"] = {{"enable_thinking", true}, {"reasoning_effort", effort}};
    }
    if (auto text = field(
            body, "text", [](const json &j) { return j.is_object(); }, "an object")) {
        const json format = responses_text_format(*text);
        if (!format.is_null()) out["response_format"] = format;
    }
    return out;
}

void responses_create(generation_host &host, const httplib::Request &req, httplib::Response &res) {
    const json body = json_object_body(req.body);
    const parsed_request p = host.read_openai(responses_to_openai_chat(body), true);
    response_shape shape{"resp_" + random_letters(), host.served_model_id(), int64_t(std::time(nullptr)),
                         body};
    const size_t input_tokens = p.prompts.at(0).size();
    std::shared_ptr<serving::job> job = host.submit_one(p);
    if (p.stream) {
        stream_job(res, "text/event-stream", job,
                   std::make_shared<responses_stream>(shape, input_tokens,
                                                      reply_stream(p.tools, host.thought_splitter(p))));
        return;
    }
    const serving::completion done = wait_whole(*job);
    reply_stream reply(p.tools, host.thought_splitter(p));
    const reply_stream::ending e = reply.finish(done.text);
    const parsed_reply &r = e.reply;
    json output = json::array();
    if (!e.reasoning.empty())
        output.push_back(reasoning_item("rs_" + random_letters(), e.reasoning, "completed"));
    if (!r.content.empty() || r.calls.empty())
        output.push_back(message_item("msg_" + random_letters(), r.content, "completed"));
    for (const tool_call &call : r.calls)
        output.push_back(function_call_item(call, "fc_" + random_letters(), "call_" + random_letters(),
                                            call.arguments, "completed"));
    res.set_content(responses_final(shape, input_tokens, done, output).dump(), "application/json");
}

}  // namespace weft::server
