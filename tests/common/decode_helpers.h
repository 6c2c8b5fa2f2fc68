// tests/common/decode_helpers.h — small helpers the decoding and serving suites share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/model/model.h"
#include "weft/vocab/vocab.h"

namespace weft::test {

// n token ids in [0, n_vocab), a fixed pattern that `salt` varies: (53 i + 7 + 31 salt) mod n_vocab.
inline std::vector<token> spread_tokens(size_t n, int32_t n_vocab, uint32_t salt) {
    std::vector<token> t;
    for (size_t i = 0; i < n; ++i) t.push_back(token((i * 53 + 7 + salt * 31) % uint32_t(n_vocab)));
    return t;
}

// Every registered architecture that decodes (all but the encoder bert).
inline std::vector<std::string> decoder_architectures() {
    std::vector<std::string> names = supported_architectures();
    std::erase(names, "bert");
    return names;
}

// The ids of what a completion generated (anything with a `tokens` list of {id, ...}).
template <class Completion>
std::vector<token> generated_ids(const Completion &c) {
    std::vector<token> ids;
    for (const auto &g : c.tokens) ids.push_back(g.id);
    return ids;
}

}  // namespace weft::test
