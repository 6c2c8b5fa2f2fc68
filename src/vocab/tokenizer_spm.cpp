// src/vocab/tokenizer_spm.cpp — SentencePiece-style tokenization: score-ordered bigram merges.
#include <queue>
#include <vector>

#include "vocab/unicode.h"
#include "vocab/vocab_impl.h"

namespace weft {

namespace {

struct spm_symbol {
    int prev;
    int next;
    uint32_t start;  // byte offset in the text
    uint32_t n;      // byte length; 0 once merged into its left neighbour
};

struct spm_bigram {
    float score;
    int left;
    int right;
    uint32_t size;  // bytes of left + right when the bigram was made; stale when that changed
};

// Highest score first; on a tie the leftmost pair first.
struct spm_bigram_order {
    bool operator()(const spm_bigram &a, const spm_bigram &b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

}  // namespace

// One stretch of escaped text: every well-formed UTF-8 character starts as one symbol, an invalid
// byte as a symbol of its own; neighbouring symbols whose joined text is a token merge, best score
// first, until no pair is left.
void vocab::impl::tokenize_spm_segment(std::string_view text, std::vector<token> &out) const {
    thread_local std::vector<spm_symbol> symbols;
    thread_local std::vector<spm_bigram> storage;
    symbols.clear();
    for (size_t pos = 0; pos < text.size();) {
        const size_t len = unicode::valid_sequence_length(text, pos);
        const size_t n = len ? len : 1;
        const int index = int(symbols.size());
        symbols.push_back({index - 1, pos + n == text.size() ? -1 : index + 1, uint32_t(pos), uint32_t(n)});
        pos += n;
    }

    storage.clear();
    std::priority_queue<spm_bigram, std::vector<spm_bigram>, spm_bigram_order> queue(spm_bigram_order{},
                                                                                     std::move(storage));
    const auto try_add_bigram = [&](int left, int right) {
        if (left == -1 || right == -1) return;
        const uint32_t size = symbols[size_t(left)].n + symbols[size_t(right)].n;
        const token id = find(text.substr(symbols[size_t(left)].start, size));
        if (id == token_null) return;
        queue.push({tokens[size_t(id)].score, left, right, size});
    };
    for (int i = 1; i < int(symbols.size()); ++i) try_add_bigram(i - 1, i);

    while (!queue.empty()) {
        const spm_bigram b = queue.top();
        queue.pop();
        spm_symbol &left = symbols[size_t(b.left)];
        spm_symbol &right = symbols[size_t(b.right)];
        if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;
        left.n += right.n;
        right.n = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[size_t(right.next)].prev = b.left;
        try_add_bigram(left.prev, b.left);
        try_add_bigram(b.left, left.next);
    }

    if (symbols.empty()) return;
    for (int i = 0; i != -1; i = symbols[size_t(i)].next) {
        const spm_symbol &s = symbols[size_t(i)];
        const std::string_view piece = text.substr(s.start, s.n);
        const token id = find(piece);
        if (id != token_null) {
            out.push_back(id);
            continue;
        }
        // A symbol that is no token can only be a single character (merges only ever make tokens),
        // so the reference's re-segmentation through its merge history ends here: the bytes.
        for (const char c : piece) {
            const token b = byte_token[uint8_t(c)];
            if (b != token_null) {
                out.push_back(b);
            } else if (unk != token_null) {
                out.push_back(unk);
            }
        }
    }
}

// `text` is already escaped (spaces as U+2581, space prefix added). Merging runs over the whole
// text as one sequence, but it is cut where no merge can ever cross: before a U+2581 whose
// preceding character never precedes U+2581 inside any token. No token contains the text across
// such a cut, so no bigram spans it and the two sides never interact: the result is the same as
// one pass over everything, while the priority queues stay small (1 MB as one queue is ~5x slower).
void vocab::impl::tokenize_spm(std::string_view text, std::vector<token> &out) const {
    if (!spm_can_cut) {
        tokenize_spm_segment(text, out);
        return;
    }
    size_t segment_start = 0;
    uint32_t prev = unicode::invalid_cpt;
    constexpr uint32_t space_marker = 0x2581;
    for (size_t pos = 0; pos < text.size();) {
        const size_t at = pos;
        const uint32_t cpt = unicode::decode(text, pos);
        if (cpt == space_marker && at > segment_start && prev != space_marker &&
            (prev == unicode::invalid_cpt || !spm_before_space.count(prev))) {
            tokenize_spm_segment(text.substr(segment_start, at - segment_start), out);
            segment_start = at;
        }
        prev = cpt;
    }
    tokenize_spm_segment(text.substr(segment_start), out);
}

}  // namespace weft
