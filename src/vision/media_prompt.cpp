// src/vision/media_prompt.cpp — prompt texts cut at image markers: tokens around placeholder rows.
#include "weft/vision/media_prompt.h"

#include <algorithm>
#include <string>

#include "weft/core/error.h"

namespace weft::vision {

size_t count_markers(std::string_view text, std::string_view marker) {
    size_t n = 0;
    for (size_t at = text.find(marker); at != std::string_view::npos;
         at = text.find(marker, at + marker.size()))
        ++n;
    return n;
}

marked_prompt tokenize_with_markers(const vocab &v, std::string_view text,
                                    std::span<const int32_t> n_image_tokens, bool add_special,
                                    std::span<const text_span> literal, std::string_view marker) {
    const size_t n_markers = count_markers(text, marker);
    if (n_markers != n_image_tokens.size())
        throw error("the prompt has " + std::to_string(n_markers) + " image markers " + std::string(marker) +
                    " for " + std::to_string(n_image_tokens.size()) + " images");
    marked_prompt out;
    size_t begin = 0;
    for (size_t i = 0; i <= n_markers; ++i) {
        const size_t end = i < n_markers ? text.find(marker, begin) : text.size();
        // the literal spans inside [begin, end), relative to begin
        std::vector<text_span> spans;
        for (const text_span &s : literal) {
            const size_t a = std::max(s.offset, begin), b = std::min(s.offset + s.length, end);
            if (a < b) spans.push_back({a - begin, b - a});
        }
        const std::vector<token> piece =
            v.tokenize(text.substr(begin, end - begin), add_special && i == 0, true, spans);
        out.tokens.insert(out.tokens.end(), piece.begin(), piece.end());
        if (i < n_markers) {
            out.image_at.push_back(out.tokens.size());
            out.tokens.insert(out.tokens.end(), size_t(n_image_tokens[i]), token_null);
        }
        begin = end + marker.size();
    }
    return out;
}

}  // namespace weft::vision
