// src/grammar/grammar_sampler.cpp — the grammar sampler: the vocabulary's pieces in a byte trie, walked
// once per step with the automaton so that a prefix the grammar rejects rules out every token that
// starts with it; the allowed set per automaton state is remembered.
#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "grammar/grammar_automaton.h"
#include "weft/core/error.h"

namespace weft {

// Every token's piece, and the pieces as a trie: node 0 is the root (the empty prefix); a node's
// children are linked through next_sibling; the tokens whose piece ends at a node are
// ids[token_begin, token_end).
class grammar_vocab_index {
  public:
    struct node {
        uint32_t first_child = 0, next_sibling = 0;  // 0: none (the root is nobody's child)
        uint32_t token_begin = 0, token_end = 0;
        uint8_t byte = 0;
    };
    std::vector<std::string> pieces;  // by token id
    std::vector<node> nodes;
    std::vector<token> ids;

    const vocab *source;
    explicit grammar_vocab_index(const vocab &v) : source(&v) {
        const int32_t n = v.n_tokens();
        pieces.resize(size_t(n));
        for (token t = 0; t < n; ++t) pieces[size_t(t)] = v.token_to_piece(t, false);
        ids.resize(size_t(n));
        std::iota(ids.begin(), ids.end(), 0);
        std::erase_if(ids, [&](token t) { return pieces[size_t(t)].empty(); });
        // sorted, pieces sharing a prefix are neighbours: each new piece leaves the previous one's
        // path where they part, and a node's children arrive in byte order
        std::stable_sort(ids.begin(), ids.end(),
                         [&](token a, token b) { return pieces[size_t(a)] < pieces[size_t(b)]; });
        nodes.emplace_back();
        std::vector<uint32_t> path = {0};  // the previous piece's nodes, root first
        std::vector<uint32_t> last_child = {0};
        std::string_view previous;
        for (size_t i = 0; i < ids.size(); ++i) {
            const std::string_view piece = pieces[size_t(ids[i])];
            size_t common = 0;
            while (common < piece.size() && common < previous.size() && piece[common] == previous[common])
                ++common;
            path.resize(common + 1);
            last_child.resize(common + 1);
            for (size_t d = common; d < piece.size(); ++d) {
                const uint32_t child = uint32_t(nodes.size());
                nodes.emplace_back();
                nodes.back().byte = uint8_t(piece[d]);
                node &parent = nodes[path.back()];
                if (last_child.back() == 0)
                    parent.first_child = child;
                else
                    nodes[last_child.back()].next_sibling = child;
                last_child.back() = child;
                path.push_back(child);
                last_child.push_back(0);
            }
            node &end = nodes[path.back()];
            if (end.token_end == end.token_begin) end.token_begin = uint32_t(i);
            end.token_end = uint32_t(i + 1);
            previous = piece;
        }
    }
};

std::shared_ptr<const grammar_vocab_index> make_grammar_vocab_index(const vocab &v) {
    return std::make_shared<const grammar_vocab_index>(v);
}

namespace {

class grammar_sampler final : public sampler {
  public:
    grammar_sampler(const vocab &v, std::shared_ptr<const grammar> g,
                    std::shared_ptr<const grammar_vocab_index> index)
        : vocab_(&v), trie_(std::move(index)), automaton_(std::move(g)), state_(automaton_.start()) {
        if (trie_ && trie_->source != vocab_)
            throw error("grammar sampler: the vocabulary index is of another vocabulary");
    }

    const char *name() const override { return "grammar"; }

    void accept(token t) override {
        if (vocab_->is_eog(t)) return;
        bound_cache();
        const std::string &piece = trie().pieces.at(size_t(t));
        if (piece.empty() || !automaton_.feed(state_, pending_, piece.data(), piece.size()))
            throw error("grammar: token " + std::to_string(t) + " " + quoted(piece) +
                        " cannot continue the text the grammar allows");
    }

    void apply(token_data_array &cur) override {
        bound_cache();
        const bool eog_allowed = pending_ == 0 && automaton_.can_end(state_);
        const size_t before = cur.data.size();
        if (cur.data.size() <= few_candidates) {
            // a handful: walk each one's piece rather than the whole trie
            std::erase_if(cur.data, [&](const token_data &c) { return !allowed_alone(c.id, eog_allowed); });
        } else {
            const std::vector<uint64_t> &mask = allowed_mask();
            std::erase_if(cur.data, [&](const token_data &c) {
                if (vocab_->is_eog(c.id)) return !eog_allowed;
                const auto id = size_t(c.id);
                return c.id < 0 || id / 64 >= mask.size() || !(mask[id / 64] >> (id % 64) & 1);
            });
        }
        if (cur.data.empty() && before > 0)
            throw error(std::string("grammar: no candidate token can continue the text here") +
                        (eog_allowed ? "" : " (and the grammar cannot end yet)"));
        cur.selected = -1;
    }

    void reset() override {
        state_ = automaton_.start();
        pending_ = 0;
    }

    std::unique_ptr<sampler> clone() const override {
        auto copy = std::make_unique<grammar_sampler>(*vocab_, automaton_.source(), trie_);
        copy->state_ = copy->automaton_.adopt(automaton_, state_);
        copy->pending_ = pending_;
        return copy;
    }

  private:
    static constexpr size_t few_candidates = 32;
    // states the automaton may hold before it is rebuilt around the current one, and masks kept
    static constexpr size_t max_states = 4096;
    static constexpr size_t max_masks = 64;

    const grammar_vocab_index &trie() {
        // built on first use when none was given: a chain made only to validate a request never pays
        if (!trie_) trie_ = make_grammar_vocab_index(*vocab_);
        return *trie_;
    }

    void bound_cache() {
        if (automaton_.size() <= max_states) return;
        state_ = automaton_.compact(state_);
        masks_.clear();
    }

    bool allowed_alone(token t, bool eog_allowed) {
        if (vocab_->is_eog(t)) return eog_allowed;
        if (t < 0 || t >= vocab_->n_tokens()) return false;
        const std::string &piece = trie().pieces[size_t(t)];
        int32_t s = state_;
        uint32_t p = pending_;
        return !piece.empty() && automaton_.feed(s, p, piece.data(), piece.size());
    }

    // One bit per token id: its piece can continue the text from the current state. A depth-first
    // walk of the trie that stops below any prefix the grammar rejects.
    const std::vector<uint64_t> &allowed_mask() {
        const grammar_vocab_index &tr = trie();
        const bool cacheable = pending_ == 0;
        if (cacheable)
            if (auto it = masks_.find(state_); it != masks_.end()) return it->second;
        std::vector<uint64_t> mask((tr.pieces.size() + 63) / 64, 0);
        struct frame {
            uint32_t node;
            int32_t state;
            uint32_t pending;
        };
        std::vector<frame> todo = {{0, state_, pending_}};
        while (!todo.empty()) {
            const frame f = todo.back();
            todo.pop_back();
            for (uint32_t c = tr.nodes[f.node].first_child; c != 0; c = tr.nodes[c].next_sibling) {
                const grammar_vocab_index::node &n = tr.nodes[c];
                uint32_t pending = f.pending;
                const int32_t s = automaton_.step(f.state, pending, n.byte);
                if (s == grammar_automaton::dead) continue;
                for (uint32_t i = n.token_begin; i < n.token_end; ++i) {
                    const auto id = size_t(tr.ids[i]);
                    mask[id / 64] |= uint64_t(1) << (id % 64);
                }
                if (n.first_child != 0) todo.push_back({c, s, pending});
            }
        }
        if (!cacheable) {
            scratch_ = std::move(mask);
            return scratch_;
        }
        if (masks_.size() >= max_masks) masks_.clear();
        return masks_.emplace(state_, std::move(mask)).first->second;
    }

    const vocab *vocab_;
    std::shared_ptr<const grammar_vocab_index> trie_;
    grammar_automaton automaton_;
    int32_t state_;
    uint32_t pending_ = 0;  // a character split across tokens (see utf8_step)
    std::unordered_map<int32_t, std::vector<uint64_t>> masks_;
    std::vector<uint64_t> scratch_;
};

}  // namespace

std::unique_ptr<sampler> make_grammar_sampler(const vocab &v, std::shared_ptr<const grammar> g,
                                              std::shared_ptr<const grammar_vocab_index> index) {
    if (!g) throw error("grammar sampler: no grammar");
    return std::make_unique<grammar_sampler>(v, std::move(g), std::move(index));
}

std::unique_ptr<sampler_chain> make_sampler_chain(const sampling_params &params, const vocab &v,
                                                  std::span<const token> history,
                                                  std::shared_ptr<const grammar_vocab_index> index) {
    sampling_params rest = params;
    rest.grammar.clear();
    auto chain = make_sampler_chain(rest, &v);
    for (token t : history) chain->accept(t);
    if (params.grammar.empty()) return chain;
    auto constrained = std::make_unique<sampler_chain>();
    constrained->add(make_grammar_sampler(v, grammar::parse(params.grammar), std::move(index)));
    constrained->add(std::move(chain));
    return constrained;
}

}  // namespace weft
