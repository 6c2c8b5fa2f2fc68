// weft/serving/text.h — text helpers for streamed generation: UTF-8 boundaries and stop strings.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace weft::serving {

// Bytes a UTF-8 sequence opened by `lead` spans; 0 when `lead` cannot open one (a continuation
// byte, or 0xC0, 0xC1, 0xF5..0xFF, which RFC 3629 never allows).
inline size_t utf8_sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

inline bool utf8_is_continuation(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

// Whether `c` may follow `lead` as the second byte: the narrower ranges exclude overlong forms,
// surrogates and code points above U+10FFFF.
inline bool utf8_valid_second(unsigned char lead, unsigned char c) {
    switch (lead) {
        case 0xE0:
            return c >= 0xA0 && c <= 0xBF;
        case 0xED:
            return c >= 0x80 && c <= 0x9F;
        case 0xF0:
            return c >= 0x90 && c <= 0xBF;
        case 0xF4:
            return c >= 0x80 && c <= 0x8F;
        default:
            return utf8_is_continuation(c);
    }
}

// The length of the longest prefix of `text` that does not end inside a UTF-8 sequence still
// waiting for continuation bytes. Byte-fallback tokens split characters across tokens; a streamed
// piece is cut here and the held-back bytes go out with the next token.
inline size_t utf8_complete_prefix(std::string_view text) {
    const size_t n = text.size();
    for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
        const auto c = static_cast<unsigned char>(text[n - back]);
        if (utf8_is_continuation(c)) continue;
        const size_t need = utf8_sequence_length(c);
        return need > back ? n - back : n;  // a lead whose sequence is not complete yet is held back
    }
    return n;  // only continuation bytes at the end: invalid whatever follows, nothing to wait for
}

// `text` as valid UTF-8: every byte that does not belong to a well-formed sequence becomes U+FFFD.
// Decoding runs left to right, so cutting a text at utf8_complete_prefix and sanitizing the parts
// gives the same result as sanitizing the whole.
inline std::string utf8_sanitize(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
        const auto lead = static_cast<unsigned char>(text[i]);
        const size_t need = utf8_sequence_length(lead);
        bool well_formed = need > 0 && i + need <= text.size();
        for (size_t k = 1; well_formed && k < need; ++k) {
            const auto c = static_cast<unsigned char>(text[i + k]);
            well_formed = k == 1 ? utf8_valid_second(lead, c) : utf8_is_continuation(c);
        }
        if (well_formed) {
            out.append(text.substr(i, need));
            i += need;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

// Where the first of `stops` occurs in `text` at or after `from`; npos when none does. Empty stop
// strings never match.
inline size_t find_stop(std::string_view text, const std::vector<std::string> &stops, size_t from = 0) {
    size_t first = std::string_view::npos;
    for (const auto &s : stops) {
        if (s.empty()) continue;
        const size_t at = text.find(s, std::min(from, text.size()));
        if (at < first) first = at;
    }
    return first;
}

// The length of the longest tail of `text` that is a proper prefix of one of `stops`: text that
// may turn out to open a stop string once more tokens come, so a stream must not send it yet.
inline size_t stop_prefix_overlap(std::string_view text, const std::vector<std::string> &stops) {
    size_t longest = 0;
    for (const auto &s : stops) {
        for (size_t len = std::min(text.size(), s.size() - std::min<size_t>(s.size(), 1)); len > longest;
             --len) {
            if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
                longest = len;
                break;
            }
        }
    }
    return longest;
}

}  // namespace weft::serving
