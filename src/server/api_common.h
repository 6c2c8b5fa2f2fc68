// src/server/api_common.h — what the Anthropic, OpenAI Responses and Ollama routes share: each turns
// its API's request into the OpenAI chat request weft already reads (openai_request.h) and runs it
// through the same engine; this header holds the host the routes lend them, the error shapes, the
// wait for a whole answer, one stream driver (each API supplies its own framing) and the holding
// back of tool-call text while a reply streams.
#pragma once

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/openai_request.h"
#include "server/tool_calls.h"
#include "weft/model/model.h"
#include "weft/serving/engine.h"
#include "weft/template/reasoning.h"

namespace weft::server {

// The API a route belongs to, by its path: its errors take that API's shape.
enum class api_kind { openai, anthropic, ollama };
api_kind api_of_path(const std::string &path);

// A refused request in the API's error shape: OpenAI's {"error": {"message", "type", ...}},
// Anthropic's {"type": "error", "error": {"type", "message"}}, Ollama's {"error": "..."}.
nlohmann::json error_body_for(api_kind api, const std::string &message, int status);

// What the server's routes (openai_server.cpp) lend the other APIs.
class generation_host {
  public:
    virtual ~generation_host() = default;
    // A chat request in OpenAI's shape (or a completion request: chat false), read and checked as
    // /v1/chat/completions reads it; throws request_error.
    virtual parsed_request read_openai(const json &body, bool chat) const = 0;
    // The request's one job queued (a full queue: request_error 503).
    virtual std::shared_ptr<serving::job> submit_one(const parsed_request &p) = 0;
    // The answer of /v1/embeddings to an OpenAI body (throws request_error).
    virtual json openai_embeddings(const json &body) = 0;
    virtual const model &served_model() const = 0;
    virtual const std::string &served_model_id() const = 0;
    virtual const serving::engine &served_engine() const = 0;
    virtual bool renders_tools() const = 0;  // the chat template is Jinja (tools can be offered)
    virtual bool sees_images() const = 0;    // a vision projector is loaded
    virtual bool embeds() const = 0;         // the model makes embeddings, not text
    virtual int64_t started_at() const = 0;  // the server's start, seconds since the epoch
    // The splitter of the request's reply into thoughts and answer, as the chat route splits it
    // (--reasoning-format, the template's syntax, a thought the prompt opened).
    virtual reasoning_splitter thought_splitter(const parsed_request &p) const = 0;
};

// The body as a JSON object, or request_error.
json json_object_body(const std::string &body);

// A random id of letters and digits (24 of them).
std::string random_letters();

// Waits for a job's outcome without streaming; a client that hangs up meanwhile cancels it
// (request_error 499), a job that failed is request_error 500 with its reason.
serving::completion wait_whole(serving::job &j);

// A reply as it may be shown while it streams: first split into thoughts and answer by the
// server's --reasoning-format (a reasoning_splitter for the model's template, as chat completions
// split it), then, with tools offered, the answer from where a tool call could begin (a marker, or
// a reply that opens with a JSON object or array) held back until the reply is whole, when the calls
// are parsed out of it (with gpt-oss's harmony calls the splitter found).
class reply_stream {
  public:
    reply_stream(bool tools, reasoning_splitter thoughts) : tools_(tools), thoughts_(std::move(thoughts)) {}
    struct shown {
        std::string reasoning;  // thoughts now certain
        std::string text;       // answer text that can be shown
    };
    // A piece of the reply as generated.
    shown feed(const std::string &piece);
    struct ending {
        std::string reasoning;  // the thoughts not given yet
        parsed_reply reply;     // the answer text not shown yet (without calls) and the calls
    };
    // The whole reply as generated (what was fed is a prefix of it).
    ending finish(const std::string &whole);
    bool tools() const { return tools_; }

  private:
    std::string show();

    bool tools_;
    reasoning_splitter thoughts_;
    size_t fed_ = 0;    // bytes of the generated reply fed so far
    std::string text_;  // the answer so far
    size_t shown_ = 0;
    std::vector<tool_call> harmony_calls_;
};

// A stream's bytes in one API's framing (SSE events or NDJSON lines).
class stream_framing {
  public:
    virtual ~stream_framing() = default;
    virtual std::string start() = 0;                                  // before the first piece
    virtual std::string text(const std::string &piece) = 0;           // a piece of the reply
    virtual std::string finish(const serving::completion &done) = 0;  // the end
    virtual std::string failure(const std::string &message) = 0;      // a job that failed
    virtual std::string keepalive() = 0;  // while a queued job waits ("": nothing)
};

// Streams one job in `framing`: nothing until its first event (a queued request writes only
// keepalives), then its pieces, then its end; a client that hangs up cancels the job.
void stream_job(httplib::Response &res, const char *content_type, std::shared_ptr<serving::job> job,
                std::shared_ptr<stream_framing> framing);

// One SSE event with an `event:` line (Anthropic's and the Responses API's framing).
std::string sse_event(const std::string &name, const json &data);

// A tool call's arguments as a JSON object (Anthropic's tool_use input, Ollama's arguments) in the
// model's key order: arguments that are not an object are kept under "arguments".
nlohmann::ordered_json arguments_object(const std::string &arguments);

// Type checks for field() (openai_request.h).
inline bool json_is_string(const json &j) {
    return j.is_string();
}
inline bool json_is_array(const json &j) {
    return j.is_array();
}
inline bool json_is_object(const json &j) {
    return j.is_object();
}

// An object's string field, `otherwise` when it is absent or null; request_error naming `where`
// when it is anything but a string.
std::string string_field_or(const json &object, const char *name, const std::string &otherwise,
                            const std::string &where);

// Copies an object field `from` of `source` to `to` of `target` when it is there.
void copy_field(const json &source, const char *from, json &target, const char *to);

// llama-server's sampling fields beyond an API's own (seed, min_p, grammar, json_schema, ...),
// copied as they are into the OpenAI body, where they are read and checked as chat completions
// read them.
void copy_sampling_extensions(const json &body, json &out);

}  // namespace weft::server
