// src/server/anthropic_api.h — Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens)
// over the chat machinery of the OpenAI routes: a request is turned into the OpenAI chat request it
// means (system, turns, tool_use / tool_result blocks, base64 images, stop_sequences), read and run
// as /v1/chat/completions runs it, and its outcome turned back into a message or Anthropic's event
// stream (message_start, content_block_start / _delta / _stop, message_delta, message_stop).
#pragma once

#include <httplib.h>

#include "server/api_common.h"

namespace weft::server {

// An Anthropic Messages body as the OpenAI chat body it asks for (count_tokens: /count_tokens, whose
// body has no max_tokens). Throws request_error naming the Anthropic field that is wrong.
json anthropic_to_openai_chat(const json &body, bool count_tokens);

// POST /v1/messages: the message whole, or streamed when "stream" is true.
void anthropic_messages(generation_host &host, const httplib::Request &req, httplib::Response &res);
// POST /v1/messages/count_tokens: {"input_tokens": N}, the prompt's tokens.
void anthropic_count_tokens(generation_host &host, const httplib::Request &req, httplib::Response &res);

}  // namespace weft::server
