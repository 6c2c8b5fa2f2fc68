// src/serving/speculative.cpp — the checks of speculative decoding and prompt lookup (the draft
// model's side is drafter.cpp; verification is the engine's step).
#include "weft/serving/speculative.h"

#include <algorithm>

#include "weft/core/error.h"

namespace weft::serving {

void check_speculative_params(const speculative_params &p) {
    if (p.n_max < 0 || p.n_max > 256)
        throw error("--draft-max is " + std::to_string(p.n_max) + ", must be in [0, 256]");
    if (p.n_min < 0 || p.n_min > p.n_max)
        throw error("--draft-min is " + std::to_string(p.n_min) + ", must be in [0, --draft-max " +
                    std::to_string(p.n_max) + "]");
    if (!(p.p_min >= 0.0f && p.p_min <= 1.0f))
        throw error("--draft-p-min is " + std::to_string(p.p_min) + ", must be in [0, 1]");
    if (p.lookup_ngram < 0 || p.lookup_ngram > 64)
        throw error("--lookup-ngram is " + std::to_string(p.lookup_ngram) + ", must be in [0, 64]");
}

void check_draft_vocab(const vocab &target, const vocab &draft, const std::string &draft_name) {
    auto refuse = [&](const std::string &what) {
        throw error("draft model " + draft_name + ": its vocabulary differs from the target's (" + what +
                    "); speculative decoding needs the same tokens");
    };
    if (draft.kind() != target.kind()) refuse("another tokenizer kind");
    if (draft.n_tokens() != target.n_tokens())
        refuse(std::to_string(draft.n_tokens()) + " tokens, the target has " +
               std::to_string(target.n_tokens()));
    if (draft.bos() != target.bos() || draft.eos() != target.eos() || draft.eot() != target.eot())
        refuse("other BOS/EOS/EOT ids");
    for (token t = 0; t < target.n_tokens(); ++t)
        if (draft.token_to_piece(t, true) != target.token_to_piece(t, true))
            refuse("token " + std::to_string(t) + " is '" + draft.token_to_piece(t, true) +
                   "' in the draft, '" + target.token_to_piece(t, true) + "' in the target");
}

std::vector<token> lookup_draft(std::span<const token> history, int32_t n, int32_t n_max) {
    const size_t len = history.size();
    if (n <= 0 || n_max <= 0 || len <= size_t(n)) return {};
    const auto tail = history.subspan(len - size_t(n));
    // the latest start i < len - n whose n tokens equal the tail, followed by at least one token
    for (size_t i = len - size_t(n); i-- > 0;) {
        if (!std::equal(tail.begin(), tail.end(), history.begin() + std::ptrdiff_t(i))) continue;
        const size_t from = i + size_t(n);
        const size_t count = std::min(size_t(n_max), len - from);
        return {history.begin() + std::ptrdiff_t(from), history.begin() + std::ptrdiff_t(from + count)};
    }
    return {};
}

}  // namespace weft::serving
