// src/runtime/batch.cpp — building batches from token lists or token by token.
#include "weft/runtime/batch.h"

namespace weft {

batch batch::from_tokens(std::span<const token> toks) {
    batch b;
    b.tokens.assign(toks.begin(), toks.end());
    return b;
}

batch batch::from_embeddings(std::span<const float> e, int32_t n) {
    batch b;
    b.embd.assign(e.begin(), e.end());
    b.n_embd_tokens = n;
    return b;
}

void batch::add(token t, llm_pos p, std::initializer_list<seq_id> seqs, bool wants_output) {
    add(t, p, std::span<const seq_id>(seqs.begin(), seqs.size()), wants_output);
}

void batch::add(token t, llm_pos p, std::span<const seq_id> seqs, bool wants_output) {
    tokens.push_back(t);
    pos.push_back(p);
    seq_ids.emplace_back(seqs.begin(), seqs.end());
    output.push_back(wants_output ? 1 : 0);
}

void batch::clear() {
    tokens.clear();
    embd.clear();
    n_embd_tokens = 0;
    pos.clear();
    seq_ids.clear();
    output.clear();
}

}  // namespace weft
