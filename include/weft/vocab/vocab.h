// weft/vocab/vocab.h — the vocabulary of a model and its tokenizer (SPM, BPE, WPM).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6,
};

// Everything a vocabulary is made of, as the tokenizer.ggml.* metadata holds it. vocab::load fills
// one from a GGUF file; tests and synthetic models may build one directly.
struct vocab_spec {
    std::string model;                // tokenizer.ggml.model: "llama" (SPM), "gpt2" (BPE), "bert" (WPM)
    std::optional<std::string> pre;   // tokenizer.ggml.pre (BPE only); absent: "default", with a warning
    std::string name;                 // general.name (a few families get per-token attributes by name)
    std::vector<std::string> tokens;  // tokenizer.ggml.tokens
    std::vector<float> scores;        // tokenizer.ggml.scores: empty (all 0) or one per token
    std::vector<token_type> types;    // tokenizer.ggml.token_type: empty (all normal) or one per token
    std::vector<std::string> merges;  // tokenizer.ggml.merges: "left right", by rank (BPE)
    // special ids; absent: the tokenizer type's default (SPM: bos 1, eos 2, unk 0; BPE: bos = eos = 11;
    // WPM: bos = [CLS] 101, unk 100, sep 102, pad 0, mask 103). An id out of range keeps the default.
    std::optional<int64_t> bos, eos, eot, eom, unk, sep, pad, mask;
    // fill-in-the-middle (tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id; the older
    // prefix/suffix/middle_token_id too); absent: found by their text as the reference finds them
    std::optional<int64_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    std::optional<bool> add_bos, add_eos, add_sep, add_space_prefix;
    // tokenizer.ggml.suppress_tokens (Gemma 4 writes it): ids that sampling never picks; each must be
    // a token of the vocabulary
    std::vector<int64_t> suppress;
};

// Tokenization follows the established engine (llama.cpp's llama-vocab) token for token:
//  - SPM: a space prefix (add_space_prefix, and again after each special token), spaces escaped as
//    U+2581, score-ordered bigram merges over UTF-8 characters, characters that form no token as
//    <0xNN> byte tokens (or the single-byte token, or unk when neither exists).
//  - BPE: the regex chain of tokenizer.ggml.pre, GPT-2 byte-level alphabet, ranked merges.
//  - WPM: NFD, accent (Mn) stripping, lower-casing, splitting on whitespace / punctuation / CJK,
//    then greedy longest match over "▁word" ([UNK] for a word that cannot be matched).
// Text that is not well-formed UTF-8 never fails and never crashes:
//  - SPM: each invalid byte is a symbol of its own and becomes its <0xNN> byte token;
//  - BPE: each invalid byte is kept as that raw byte (its byte-level token), so it round-trips;
//  - WPM: invalid bytes are dropped (as the reference drops U+FFFD).
// (The established engine turns invalid bytes into U+FFFD for BPE/WPM, and for SPM takes a broken
// sequence's lead byte together with the bytes after it; for well-formed text all agree.)
// Special tokens: control, unknown and user-defined tokens are cut out of the text before the
// tokenizer runs, longest text first; control/unknown ones only with parse_special. Tokens whose
// text is one of <|eot_id|> <|im_end|> <|end|> <end_of_turn> <|endoftext|> <|eom_id|> <EOT> ...
// become control tokens and, with EOS/EOT/EOM, end generation (is_eog). Phi-3 vocabularies
// (general.name) eat the whitespace after special tokens, as the reference does.
// Fill-in-the-middle tokens (token_null where the vocabulary has none). A model infills when it has
// pre, suf and mid: [rep]project [sep]file ... [pre]prefix[suf]suffix[mid] is the prompt it
// completes (the reference's repo-level pattern). pad, rep and sep end generation.
struct fim_tokens {
    token pre = token_null, suf = token_null, mid = token_null;
    token pad = token_null, rep = token_null, sep = token_null;
    bool can_infill() const { return pre != token_null && suf != token_null && mid != token_null; }
};

// A byte range of a text.
struct text_span {
    size_t offset = 0, length = 0;
};

class vocab {
  public:
    // Reads tokenizer.ggml.* from f (no tensors needed); throws weft::error naming the file and
    // the problem: an unknown tokenizer model or pre-tokenizer (tokenizer.ggml.pre absent is not an
    // error: "default", with a warning), tokens / merges missing or not string arrays, scores or
    // token types not one per token, a merge that is not "left right" or names a string that is not
    // a token (the established engine accepts those silently; they only make garbage).
    static std::unique_ptr<vocab> load(const gguf_file &f);
    // Same from a spec; `source` names it in error messages.
    static std::unique_ptr<vocab> create(const vocab_spec &spec, const std::string &source = "<vocab>");
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
    token mask() const;
    const fim_tokens &fim() const;
    bool add_bos() const;
    bool add_eos() const;
    bool add_sep() const;                          // WPM: [SEP] at the end when add_special
    bool add_space_prefix() const;                 // SPM: a space before the text
    bool is_eog(token t) const;                    // end of generation: EOS, EOT and the like
    const std::vector<token> &eog_tokens() const;  // ascending
    // tokenizer.ggml.suppress_tokens, ascending, each once: make_sampler_chain gives them a -inf bias
    const std::vector<token> &suppressed_tokens() const;
    bool is_control(token t) const;
    token_type type_of(token t) const;
    const std::string &text_of(token t) const;
    float score_of(token t) const;
    // the id of a token by its exact text, token_null when none
    token find(std::string_view text) const;

    // Writes at most n_max ids; returns their count, or minus the needed count when n_max is too
    // small. add_special: BOS/EOS as the vocabulary asks. parse_special: control tokens written in
    // the text are matched as tokens (user-defined tokens always are).
    int32_t tokenize(std::string_view text, token *out, int32_t n_max, bool add_special,
                     bool parse_special) const;
    std::vector<token> tokenize(std::string_view text, bool add_special, bool parse_special) const;
    // The same, but control tokens written inside the `literal` byte ranges of text stay text
    // (a chat's message contents: what a user typed must never become a control token, while the
    // template's own markers around it do).
    std::vector<token> tokenize(std::string_view text, bool add_special, bool parse_special,
                                std::span<const text_span> literal) const;

    // The piece's bytes; returns the length, or minus the needed length when len is too small.
    // special: render control tokens as their text (otherwise they render as nothing).
    // SPM/WPM: U+2581 becomes a space, <0xNN> the byte; BPE: the byte-level alphabet is decoded.
    // A token id out of range renders as nothing.
    int32_t token_to_piece(token t, char *buf, int32_t len, bool special) const;
    std::string token_to_piece(token t, bool special = false) const;
    // The pieces joined, as the established engine's detokenize: SPM drops the space prefix of the
    // first piece; vocabularies with clean-up (most BPE, WPM) remove the space before . , ! ? and
    // before 's 'm 're 've.
    std::string detokenize(std::span<const token> tokens, bool special = false) const;

    struct impl;

  private:
    explicit vocab(std::unique_ptr<impl> p);
    std::unique_ptr<impl> impl_;
};

}  // namespace weft
