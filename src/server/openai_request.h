// src/server/openai_request.h — reading an OpenAI-style request body (/v1/completions,
// /v1/chat/completions) into what the serving engine runs: every field checked, a wrong one a
// request_error naming it (a 400 with OpenAI's error object), before anything is queued.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/serving/conversation.h"
#include "weft/serving/engine.h"
#include "weft/template/chat_template.h"

namespace weft::vision {
class clip_model;
}  // namespace weft::vision

namespace weft::server {

using json = nlohmann::json;
using serving::template_choice;

// A request the server refuses; the message goes back to the client as an OpenAI error object.
class request_error : public error {
  public:
    explicit request_error(const std::string &message, int status = 400) : error(message), status_(status) {}
    int status() const { return status_; }

  private:
    int status_;
};

// --- fields of a request body

// How a wrong value is named in an error: a short number or boolean itself, otherwise its type.
std::string json_kind(const json &v);

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

std::optional<double> number_field(const json &body, const char *name);
// An integer JSON value as int64; one beyond int64 (an unsigned 2^63 or more) is out of range
// (400), never wrapped to a negative number.
int64_t integer_value(const json &j, const std::string &what);
std::optional<int64_t> integer_field(const json &body, const char *name);
// A token id from a request: an integer in [0, n_vocab).
token token_value(const json &j, const std::string &what, int32_t n_vocab);
std::optional<bool> bool_field(const json &body, const char *name);

// llama-server's LoRA list, [{"id": 0, "scale": 0.5}, ...], as one scale per loaded adapter: the
// adapters not listed get 0. `what` names the field in errors (an unknown id, a scale that is not a
// number, an id given twice).
std::vector<float> read_lora_scales(const json &list, size_t n_adapters, const std::string &what);

// A message's content: a string, or OpenAI's array of parts of which the "text" ones are joined.
// images: where the bytes of "image_url" parts go, each leaving vision::image_marker in the text;
// null: such a part is a 400 (a server without --mmproj).
std::string message_content(const json &content, size_t index, std::vector<std::string> *images = nullptr);
// 'messages': role and content of each (images as message_content takes them).
std::vector<chat_message> read_messages(const json &body, std::vector<std::string> *images = nullptr);

// The most choices (prompts x n) one request may ask for: each is a job in the engine's queue (256
// places by default), so one request must not take it alone.
constexpr size_t max_choices_per_request = 128;

// Images: at most this many in one request, and this many decoded and encoded at once in a server
// (the rest wait their turn), so that images cost the server a bounded amount of memory.
constexpr size_t max_images_per_request = 8;
constexpr size_t max_images_at_once = 2;

// Everything one OpenAI request asks for, read and checked before anything is queued.
struct parsed_request {
    bool chat = false;
    std::vector<std::vector<token>> prompts;  // one or more (completions accept an array)
    std::vector<serving::embd_chunk> media;   // chat: the images' embedding rows in prompts[0]
    int32_t n = 1;                            // choices per prompt
    serving::request base;                    // every field but the prompt
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool logprobs = false;
    int32_t top_logprobs = 0;
    bool echo = false;                      // completions: the prompt text before the completion
    std::vector<size_t> prompt_text_bytes;  // completions: each prompt's length as text
    bool tools = false;                     // chat with tools: replies are searched for tool calls
};

// Reads completion and chat requests against one model and chat template.
class openai_request_reader {
  public:
    // n_predict: max_tokens of a request that does not say; max_tokens_cap: the most one may ask
    // for (0: no limit). The model and template must outlive the reader.
    // n_lora: the LoRA adapters loaded (a request's "lora" field picks their scales).
    // mmproj: the vision projector that encodes images of chat messages (null: images are a 400);
    // n_threads: its threads.
    // n_ctx_slot: a slot's context (a chat whose text and images cannot fit is refused before its
    // images are decoded; 0: not checked here).
    openai_request_reader(const model &m, const template_choice &tmpl, int32_t n_predict,
                          int32_t max_tokens_cap, size_t n_lora = 0,
                          const vision::clip_model *mmproj = nullptr, int n_threads = 0,
                          int64_t n_ctx_slot = 0);
    ~openai_request_reader();
    openai_request_reader(const openai_request_reader &) = delete;
    openai_request_reader &operator=(const openai_request_reader &) = delete;

    // The request, checked; throws request_error naming the first field that is wrong.
    parsed_request parse(const json &body, bool chat) const;
    // The prompt text a chat body renders to (POST /apply-template): its messages and tools with
    // the chat template, add_generation_prompt (default true) and chat_template_kwargs as the
    // reference takes them, objects in the order sent; throws request_error.
    std::string render_prompt(const std::string &body_text) const;

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace weft::server
