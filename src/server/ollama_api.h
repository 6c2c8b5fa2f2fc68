// src/server/ollama_api.h — Ollama's API on the server's port, for the desktop apps that speak it:
// /api/chat and /api/generate (NDJSON streams, or one object with "stream": false) run through the
// chat machinery of the OpenAI routes; /api/embed (and the older /api/embeddings) through
// /v1/embeddings; /api/tags, /api/ps, /api/show and /api/version describe the one model served.
// Errors are Ollama's {"error": "..."}.
#pragma once

#include <httplib.h>

#include "server/api_common.h"

namespace weft::server {

// The Ollama API version /api/version reports: the API level these routes follow.
inline constexpr const char *ollama_api_version = "0.12.0";

// An /api/chat body (generate false) or /api/generate body (true) as the OpenAI body it asks for;
// *chat says whether that is a chat request (false: a raw completion). Throws request_error.
json ollama_to_openai(const json &body, bool generate, bool *chat);

void ollama_chat(generation_host &host, const httplib::Request &req, httplib::Response &res);
void ollama_generate(generation_host &host, const httplib::Request &req, httplib::Response &res);
void ollama_embed(generation_host &host, const httplib::Request &req, httplib::Response &res);
void ollama_embeddings(generation_host &host, const httplib::Request &req, httplib::Response &res);
void ollama_tags(generation_host &host, httplib::Response &res);
void ollama_ps(generation_host &host, httplib::Response &res);
void ollama_show(generation_host &host, const httplib::Request &req, httplib::Response &res);
void ollama_version(httplib::Response &res);

}  // namespace weft::server
