// src/server/image_parts.h — images in chat messages: OpenAI's image_url parts with data: URIs.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace weft::server {

// The bytes of an image_url part's URL: a data: URI ("data:image/png;base64,...") decoded. Throws
// request_error (400) naming `where` for a remote URL (the server fetches nothing), a URI that is not
// base64 image data, or bad base64.
std::string image_url_bytes(const nlohmann::json &image_url, const std::string &where);

}  // namespace weft::server
