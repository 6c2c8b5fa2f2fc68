// weft/vocab/vocab.h — the vocabulary of a model and its tokenizer (SPM, BPE, WPM).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

class gguf_file;

using token = int32_t;
constexpr token token_null = -1;

enum class vocab_kind { spm, bpe, wpm };

// Token types as stored in tokenizer.ggml.token_type.
enum class token_type : int32_t {
    undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

class vocab {
public:
    // Reads tokenizer.ggml.* from f (no tensors needed); throws weft::error naming the file and
    // the problem (unknown tokenizer model, missing or malformed arrays ...).
    static std::unique_ptr<vocab> load(const gguf_file &f);
    virtual ~vocab();

    vocab_kind kind() const;
    const std::string &pre_type() const;  // tokenizer.ggml.pre ("default" when absent)
    int32_t n_tokens() const;

    // special ids, token_null when the vocabulary has none
    token bos() const;
    token eos() const;
    token eot() const;
    token unk() const;
    token pad() const;
    token sep() const;
    token nl() const;
    bool add_bos() const;
    bool add_eos() const;
    bool is_eog(token t) const;  // end of generation: EOS, EOT and the like
    bool is_control(token t) const;
    token_type type_of(token t) const;
    const std::string &text_of(token t) const;
    float score_of(token t) const;

    // Writes at most n_max ids; returns their count, or minus the needed count when n_max is too
    // small. add_special: BOS/EOS as the vocabulary asks. parse_special: control tokens written in
    // the text are matched as tokens (user-defined tokens always are).
    int32_t tokenize(std::string_view text, token *out, int32_t n_max, bool add_special,
                     bool parse_special) const;
    std::vector<token> tokenize(std::string_view text, bool add_special, bool parse_special) const;

    // The piece's bytes; returns the length, or minus the needed length when len is too small.
    // special: render control tokens as their text (otherwise they render as nothing).
    int32_t token_to_piece(token t, char *buf, int32_t len, bool special) const;
    std::string token_to_piece(token t, bool special = false) const;
    std::string detokenize(std::span<const token> tokens, bool special = false) const;

    struct impl;

private:
    explicit vocab(std::unique_ptr<impl> p);
    std::unique_ptr<impl> impl_;
};

}  // namespace weft
