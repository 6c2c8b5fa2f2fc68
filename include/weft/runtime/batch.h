// weft/runtime/batch.h — one decode call's input: tokens or embeddings, positions, sequences, outputs.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "weft/vocab/vocab.h"

namespace weft {

using seq_id = int32_t;
using llm_pos = int32_t;

// A batch of n tokens. Every per-token vector is either empty (the context fills it in) or has
// exactly n entries:
//   pos     empty: each sequence continues at its seq_pos_max + 1, counting up
//   seq_ids empty: every token belongs to sequence 0
//   output  empty: only the last token produces logits
// Exactly one of `tokens` and `embd` is non-empty; embd holds n * n_embd floats, token-major,
// with n given by n_embd_tokens.
struct batch {
    std::vector<token> tokens;
    std::vector<float> embd;
    int32_t n_embd_tokens = 0;  // n for an embedding batch
    std::vector<llm_pos> pos;
    std::vector<std::vector<seq_id>> seq_ids;
    std::vector<int8_t> output;

    // Tokens only: positions, sequence 0 and the last-token output are filled in by decode.
    static batch from_tokens(std::span<const token> toks);
    static batch from_tokens(std::initializer_list<token> toks) {
        return from_tokens(std::span<const token>(toks.begin(), toks.size()));
    }
    // Embeddings of n tokens (n * n_embd floats); the rest is filled in as for tokens.
    static batch from_embeddings(std::span<const float> e, int32_t n);
    // Appends one fully described token.
    void add(token t, llm_pos p, std::initializer_list<seq_id> seqs, bool wants_output);
    void add(token t, llm_pos p, std::span<const seq_id> seqs, bool wants_output);
    void clear();

    int32_t n_tokens() const { return tokens.empty() ? n_embd_tokens : int32_t(tokens.size()); }
};

}  // namespace weft
