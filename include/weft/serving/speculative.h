// weft/serving/speculative.h — speculative decoding: a cheap drafter proposes the next tokens of a
// slot, the target model decodes them all in one batch, and the slot keeps the longest prefix its
// own sampler would have produced anyway.
//
// Drafters: a draft model (a smaller model with the target's vocabulary, decoding greedily until
// its best token is less likely than p_min) or prompt lookup (the tokens that followed the latest
// earlier occurrence of the last n tokens; no second model).
//
// Verification samples every verified row with the slot's own sampler chain, in order, exactly as
// plain decoding would, and keeps a draft token only when the sampled token equals it. Because the
// drafts are deterministic (a greedy draft model, a lookup), this is the standard accept/reject rule
// with a one-hot draft distribution q: a draft token d is accepted with probability p(d), and on a
// rejection the token comes from p with d removed — so the output distribution is the target's.
// With weft's batch-invariant kernels each row's logits are the bits a one-token decode gives, so
// the output is even token for token what decoding without a draft gives, greedy or seeded.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "weft/model/model.h"

namespace weft::serving {

struct speculative_params {
    const model *draft = nullptr;  // a draft model sharing the target's vocabulary; null: none
    int32_t n_max = 16;            // draft tokens per step at most (--draft-max)
    int32_t n_min = 0;             // fewer proposed tokens are not verified (--draft-min)
    float p_min = 0.8f;            // the draft model stops at a token less likely than this (--draft-p-min)
    int32_t lookup_ngram = 0;      // > 0 (without a draft model): prompt lookup with n-grams this long

    bool enabled() const { return (draft != nullptr || lookup_ngram > 0) && n_max > 0; }
};

// Throws weft::error when the speculative parameters are out of range (names the flag).
void check_speculative_params(const speculative_params &p);

// Throws weft::error, naming the first difference, unless the draft model's vocabulary is the
// target's: same tokenizer kind, size, special tokens and the same text for every token.
void check_draft_vocab(const vocab &target, const vocab &draft, const std::string &draft_name);

// Prompt lookup: the tokens (at most n_max) that followed the latest earlier occurrence of the last
// n tokens of `history`; empty when there is none.
std::vector<token> lookup_draft(std::span<const token> history, int32_t n, int32_t n_max);

}  // namespace weft::serving
