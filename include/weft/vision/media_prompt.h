// weft/vision/media_prompt.h — a prompt text with image markers as tokens and placeholder positions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "weft/vocab/vocab.h"

namespace weft::vision {

// Where an image goes in a prompt (`weft run -p "... <__image__> ..."`, and where the server puts each
// image_url part of a chat message before the chat template is applied).
inline constexpr std::string_view image_marker = "<__image__>";

// Occurrences of `marker` in text.
size_t count_markers(std::string_view text, std::string_view marker = image_marker);

struct marked_prompt {
    std::vector<token> tokens;     // the text's tokens with n_image_tokens token_null placeholders per marker
    std::vector<size_t> image_at;  // where each image's placeholders start, in marker order
};

// The text cut at each marker: the pieces tokenized in order (special tokens parsed; add_special for
// the first piece only, so a BOS comes once), the i-th marker replaced by n_image_tokens[i]
// placeholders. `literal`: spans of text (byte ranges) never read as special tokens (message contents).
// Throws weft::error when the markers and n_image_tokens differ in number.
marked_prompt tokenize_with_markers(const vocab &v, std::string_view text,
                                    std::span<const int32_t> n_image_tokens, bool add_special,
                                    std::span<const text_span> literal = {},
                                    std::string_view marker = image_marker);

}  // namespace weft::vision
