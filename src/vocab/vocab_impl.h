// src/vocab/vocab_impl.h — the inside of weft::vocab: token tables, special tokens, tokenizer state.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "vocab/pretokenizer.h"
#include "weft/vocab/vocab.h"

namespace weft {

// Per-token attributes (the established engine's llama_token_attr bits).
enum token_attr : uint32_t {
    attr_undefined = 0,
    attr_unknown = 1u << 0,
    attr_unused = 1u << 1,
    attr_normal = 1u << 2,
    attr_control = 1u << 3,
    attr_user_defined = 1u << 4,
    attr_byte = 1u << 5,
    attr_lstrip = 1u << 7,
    attr_rstrip = 1u << 8,
};

struct vocab::impl {
    struct token_data {
        std::string text;
        float score = 0.0f;
        token_type type = token_type::normal;
        uint32_t attr = attr_normal;
    };

    // A BPE merge as seen from its two parts: its rank and the token it makes (token_null when the
    // merged text is not a token itself; such a symbol never merges again and falls back to bytes).
    struct bpe_merge {
        int32_t rank;
        token result;
    };

    std::string source;  // the file (or spec) name, for messages
    vocab_kind kind = vocab_kind::spm;
    std::string pre_name = "default";

    std::vector<token_data> tokens;
    std::unordered_map<std::string_view, token> text_to_id;  // views into tokens[].text
    size_t max_token_len = 0;

    token bos = token_null, eos = token_null, eot = token_null, eom = token_null, unk = token_null;
    token sep = token_null, pad = token_null, mask = token_null, nl = token_null;
    fim_tokens fim;
    bool add_bos = false, add_eos = false, add_sep = false;
    bool add_space_prefix = false;
    bool clean_spaces = false;
    bool ignore_merges = false;
    std::vector<token> eog;             // sorted
    std::vector<token> suppressed;      // tokenizer.ggml.suppress_tokens, sorted, unique
    std::vector<token> special_tokens;  // partitioned out of text, longest text first
    std::vector<std::string> pieces;    // token_to_piece(t, special = true), precomputed

    // BPE
    std::unordered_map<uint64_t, bpe_merge> merges;  // key: left << 32 | right
    std::unique_ptr<regex_chain> pretok;
    std::array<token, 256> byte_level_token{};          // byte → token of its alphabet character
    std::array<std::vector<token>, 256> byte_fallback;  // byte → the established fallback ids
    // SPM / WPM: byte → its <0xNN> (or single-byte) token
    std::array<token, 256> byte_token{};
    // SPM: the characters that precede U+2581 inside some token (where merging may cross a word
    // start); spm_can_cut is false when a token is not well-formed UTF-8 (then nothing is cut)
    std::unordered_set<uint32_t> spm_before_space;
    bool spm_can_cut = false;

    token find(std::string_view text) const {
        auto it = text_to_id.find(text);
        return it == text_to_id.end() ? token_null : it->second;
    }
    bool valid(token t) const { return t >= 0 && size_t(t) < tokens.size(); }

    void tokenize_spm(std::string_view text, std::vector<token> &out) const;
    void tokenize_spm_segment(std::string_view text, std::vector<token> &out) const;
    void tokenize_bpe(std::string_view text, std::vector<token> &out) const;
    void tokenize_wpm(std::string_view text, std::vector<token> &out) const;
    std::vector<token> tokenize(std::string_view text, bool add_special, bool parse_special,
                                std::span<const text_span> literal = {}) const;
    std::string render_piece(token t) const;  // the piece with special = true, no lstrip
};

}  // namespace weft
