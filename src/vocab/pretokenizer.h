// src/vocab/pretokenizer.h — the regex chains that split text into words before byte-level BPE.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

// What a tokenizer.ggml.pre name selects.
struct pretokenizer_config {
    std::vector<std::string> regexes;  // applied in order, each splitting the previous pieces
    bool clean_spaces = true;          // detokenize removes " ," " ." " 's" ... as HF's cleanup does
    bool ignore_merges = false;        // a word that is already a token is emitted whole (llama3)
    bool default_add_bos = false;      // BOS by default (tokenizer.ggml.add_bos_token still overrides)
};

// The configuration for `pre` ("default" for the empty name). Returns false for an unknown name.
bool pretokenizer_lookup(const std::string &pre, pretokenizer_config &out);

// A compiled regex chain (PCRE2, UTF + UCP, JIT when available). Thread-safe: split() keeps its
// match state on the stack of the caller.
class regex_chain {
  public:
    explicit regex_chain(const std::vector<std::string> &regexes);
    ~regex_chain();
    regex_chain(const regex_chain &) = delete;
    regex_chain &operator=(const regex_chain &) = delete;

    // Splits text into consecutive pieces covering it exactly. Each regex runs over each piece of
    // the previous step on its own (its ends are the subject's ends, so lookarounds and `$` stop
    // there); matches and the unmatched gaps between them both become pieces. Bytes that are not
    // well-formed UTF-8 never match and so end up in gap pieces of their own.
    std::vector<std::string_view> split(std::string_view text) const;

  private:
    struct compiled;
    std::vector<std::unique_ptr<compiled>> compiled_;
};

}  // namespace weft
