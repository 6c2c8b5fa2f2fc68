// src/vocab/tokenizer_wpm.cpp — WordPiece (BERT): normalize, split into words, greedy longest match.
#include <algorithm>
#include <string>
#include <vector>

#include "vocab/unicode.h"
#include "vocab/vocab_impl.h"

namespace weft {

namespace {

// BERT's basic tokenizer: drop invalid bytes, NFD, drop Mn marks (accents), drop NUL and control
// characters, lower-case, split on whitespace, and make every punctuation character, ASCII symbol
// and CJK ideograph a word of its own.
std::vector<std::string> wpm_words(std::string_view text) {
    std::string valid;
    valid.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        const size_t n = unicode::valid_sequence_length(text, pos);
        if (n) valid.append(text.substr(pos, n));
        pos += n ? n : 1;
    }
    const std::string decomposed = unicode::nfd(valid);

    std::vector<std::string> words(1);
    for (size_t pos = 0; pos < decomposed.size();) {
        const uint32_t cpt = unicode::decode(decomposed, pos);
        if (unicode::is_whitespace(cpt)) {
            if (!words.back().empty()) words.emplace_back();
            continue;
        }
        if (cpt == 0 || cpt == 0xFFFD || unicode::is_control(cpt) || unicode::is_nonspacing_mark(cpt))
            continue;
        std::string lower;
        unicode::append_utf8(lower, unicode::to_lower(cpt));
        if (unicode::is_punctuation(cpt) || (cpt < 0x7F && unicode::is_symbol(cpt)) ||
            unicode::is_cjk_ideograph(cpt)) {
            if (!words.back().empty()) words.emplace_back();
            words.back() = std::move(lower);
            words.emplace_back();
        } else {
            words.back() += lower;
        }
    }
    if (words.back().empty()) words.pop_back();
    return words;
}

}  // namespace

// Vocabularies converted for this engine spell word-initial pieces with a U+2581 prefix and
// continuation pieces bare (BERT's "##" already removed), so each word is matched as "▁word".
void vocab::impl::tokenize_wpm(std::string_view text, std::vector<token> &out) const {
    for (const std::string &word : wpm_words(text)) {
        const std::string spelled = "\xE2\x96\x81" + word;
        const size_t n = spelled.size();
        const size_t first = out.size();
        for (size_t i = 0; i < n; ++i) {
            bool matched = false;
            for (size_t j = std::min(n, i + max_token_len + 1); j > i; --j) {
                const token id = find(std::string_view(spelled).substr(i, j - i));
                if (id != token_null) {
                    out.push_back(id);
                    matched = true;
                    i = j - 1;
                    break;
                }
            }
            if (!matched) {  // the whole word becomes [UNK]
                out.resize(first);
                break;
            }
        }
        if (out.size() == first && unk != token_null) out.push_back(unk);
    }
}

}  // namespace weft
