// src/vocab/tokenizer_bpe.cpp — byte-level BPE: regex pre-tokenization, then ranked merges per word.
#include <queue>
#include <vector>

#include "vocab/unicode.h"
#include "vocab/vocab_impl.h"

namespace weft {

namespace {

struct bpe_symbol {
    int prev;
    int next;
    uint32_t start;  // byte offset in the word (raw bytes, before the byte-level mapping)
    uint32_t n;      // raw bytes; 0 once merged into its left neighbour
    token id;        // the token this symbol spells, token_null when it spells none
};

struct bpe_bigram {
    int32_t rank;
    int left;
    int right;
    token left_id;  // what the two symbols were when the bigram was made; stale when they changed
    token right_id;
};

// Lowest rank first; on a tie the leftmost pair first.
struct bpe_bigram_order {
    bool operator()(const bpe_bigram &a, const bpe_bigram &b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

uint64_t merge_key(token left, token right) {
    return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
}

}  // namespace

// Each pre-tokenized word is spelled in the byte-level alphabet, one symbol per byte; merges apply
// lowest rank first. Working on token ids is exact because every merge names two tokens (checked
// at load) and a token's text determines its id.
void vocab::impl::tokenize_bpe(std::string_view text, std::vector<token> &out) const {
    std::vector<bpe_symbol> symbols;
    std::vector<bpe_bigram> storage;
    std::string encoded;
    for (const std::string_view word : pretok->split(text)) {
        if (ignore_merges) {
            encoded.clear();
            for (const char c : word) encoded += unicode::byte_to_utf8(uint8_t(c));
            const token whole = find(encoded);
            if (whole != token_null) {
                out.push_back(whole);
                continue;
            }
        }
        symbols.clear();
        for (size_t i = 0; i < word.size(); ++i) {
            const int index = int(i);
            symbols.push_back({index - 1, i + 1 == word.size() ? -1 : index + 1, uint32_t(i), 1,
                               byte_level_token[uint8_t(word[i])]});
        }
        storage.clear();
        std::priority_queue<bpe_bigram, std::vector<bpe_bigram>, bpe_bigram_order> queue(bpe_bigram_order{},
                                                                                         std::move(storage));
        const auto add_bigram = [&](int left, int right) {
            if (left == -1 || right == -1) return;
            const token l = symbols[size_t(left)].id, r = symbols[size_t(right)].id;
            if (l == token_null || r == token_null) return;
            const auto it = merges.find(merge_key(l, r));
            if (it == merges.end()) return;
            queue.push({it->second.rank, left, right, l, r});
        };
        for (int i = 1; i < int(symbols.size()); ++i) add_bigram(i - 1, i);

        while (!queue.empty()) {
            const bpe_bigram b = queue.top();
            queue.pop();
            bpe_symbol &left = symbols[size_t(b.left)];
            bpe_symbol &right = symbols[size_t(b.right)];
            if (left.n == 0 || right.n == 0 || left.id != b.left_id || right.id != b.right_id) continue;
            left.id = merges.at(merge_key(b.left_id, b.right_id)).result;
            left.n += right.n;
            right.n = 0;
            left.next = right.next;
            if (right.next >= 0) symbols[size_t(right.next)].prev = b.left;
            add_bigram(left.prev, b.left);
            add_bigram(b.left, left.next);
        }

        for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[size_t(i)].next) {
            const bpe_symbol &s = symbols[size_t(i)];
            if (s.id != token_null) {
                out.push_back(s.id);
                continue;
            }
            for (uint32_t k = 0; k < s.n; ++k) {
                const auto &ids = byte_fallback[uint8_t(word[s.start + k])];
                out.insert(out.end(), ids.begin(), ids.end());
            }
        }
    }
}

}  // namespace weft
