// src/server/image_parts.cpp — data: URIs of image_url parts decoded to the image's bytes.
#include "server/image_parts.h"

#include <array>
#include <cstdint>

#include "server/openai_request.h"

namespace weft::server {

namespace {

// RFC 4648 base64 (padding optional, whitespace skipped); false on any other character.
bool base64_decode(std::string_view in, std::string &out) {
    static const std::array<int8_t, 256> value = [] {
        std::array<int8_t, 256> v{};
        v.fill(-1);
        const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (int i = 0; i < 64; ++i) v[uint8_t(alphabet[i])] = int8_t(i);
        return v;
    }();
    out.clear();
    out.reserve(in.size() / 4 * 3);
    uint32_t acc = 0;
    int bits = 0;
    size_t i = 0;
    for (; i < in.size() && in[i] != '='; ++i) {
        const char c = in[i];
        if (c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
        const int8_t v = value[uint8_t(c)];
        if (v < 0) return false;
        acc = (acc << 6) | uint32_t(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(char((acc >> bits) & 0xff));
        }
    }
    for (; i < in.size(); ++i)
        if (in[i] != '=' && in[i] != '\n' && in[i] != '\r') return false;
    return true;
}

}  // namespace

std::string image_url_bytes(const nlohmann::json &image_url, const std::string &where) {
    // {"url": "..."} as OpenAI sends it, or the URL string itself
    const nlohmann::json *url = &image_url;
    if (image_url.is_object()) {
        const auto it = image_url.find("url");
        if (it == image_url.end()) throw request_error(where + ".image_url needs a 'url'");
        url = &*it;
    }
    if (!url->is_string())
        throw request_error(where + ".image_url.url must be a string, got " + json_kind(*url));
    const std::string &s = url->get_ref<const std::string &>();
    if (s.rfind("data:", 0) != 0)
        throw request_error(
            where +
            ": only data: URIs are accepted (\"data:image/png;base64,...\"); the server fetches "
            "no remote URL");
    const size_t comma = s.find(',');
    const std::string_view header = std::string_view(s).substr(5, comma == std::string::npos ? 0 : comma - 5);
    if (comma == std::string::npos || header.size() < 7 || header.substr(header.size() - 7) != ";base64")
        throw request_error(where + ": the data: URI must be base64 (\"data:image/...;base64,...\")");
    if (header.rfind("image/", 0) != 0 && header.rfind("application/octet-stream", 0) != 0)
        throw request_error(where + ": the data: URI's type is '" +
                            std::string(header.substr(0, header.size() - 7)) + "', not an image");
    std::string bytes;
    if (!base64_decode(std::string_view(s).substr(comma + 1), bytes))
        throw request_error(where + ": the data: URI's base64 is malformed");
    return bytes;
}

}  // namespace weft::server
