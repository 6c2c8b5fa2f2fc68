// src/server/responses_api.h — OpenAI's Responses API (POST /v1/responses) over the chat machinery
// of the OpenAI routes: input (a string or items: messages, function calls and their outputs),
// instructions, max_output_tokens, function tools and text.format become the chat request they mean;
// the outcome comes back as a response object or as the Responses event stream (response.created ...
// response.output_text.delta ... response.completed, each with a sequence_number). Nothing is stored:
// previous_response_id is refused.
#pragma once

#include <httplib.h>

#include "server/api_common.h"

namespace weft::server {

// A Responses body as the OpenAI chat body it asks for. Throws request_error naming the field.
json responses_to_openai_chat(const json &body);

// POST /v1/responses: the response whole, or streamed when "stream" is true.
void responses_create(generation_host &host, const httplib::Request &req, httplib::Response &res);

}  // namespace weft::server
