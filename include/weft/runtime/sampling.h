// weft/runtime/sampling.h — samplers over candidate arrays, and the chain that runs them in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/vocab/vocab.h"

namespace weft {

// One candidate: its id, its (possibly modified) logit and, once some sampler has computed it, its
// probability among the candidates still in the array.
struct token_data {
    token id;
    float logit;
    float p;
};

// The candidates a chain works on. Samplers reorder it, shrink it, rewrite logits, and the final
// one sets `selected`. `sorted` means data is in descending logit order (ties by ascending id).
struct token_data_array {
    std::vector<token_data> data;
    int64_t selected = -1;  // index into data of the chosen token; -1 until a selecting sampler ran
    bool sorted = false;
};

// One candidate per vocabulary entry, id i with logits[i], p = 0, unsorted. Throws weft::error on
// n_vocab <= 0, a null pointer or a NaN logit.
token_data_array token_data_array_from_logits(const float *logits, int32_t n_vocab);
// The same into an existing array, reusing its memory.
void token_data_array_fill(token_data_array &cur, const float *logits, int32_t n_vocab);

// Sorts descending by logit (ties: ascending id) and sets p to the softmax of the logits. Logits of
// -inf get p = 0. Empty arrays are left alone.
void token_data_array_softmax(token_data_array &cur);

class sampler {
  public:
    virtual ~sampler();
    virtual const char *name() const = 0;
    // Tells the sampler that `t` was chosen (penalties count it, a chain records it).
    virtual void accept(token t) {}
    // Rewrites the candidates; a selecting sampler (greedy, dist) sets cur.selected.
    virtual void apply(token_data_array &cur) = 0;
    // Back to the state right after construction (history cleared, RNG re-seeded).
    virtual void reset() {}
    // A deep, independent copy carrying the current state (history, RNG position).
    virtual std::unique_ptr<sampler> clone() const = 0;
    // The seed of the first seeded sampler inside (for a chain) or of this one; nullopt when none.
    virtual std::optional<uint32_t> seed() const { return std::nullopt; }

    // Builds the candidate array from one row of logits, runs apply(), and returns the selected
    // token. Like the established engine, it also calls accept() with that token, so the caller
    // must NOT accept it again. Throws weft::error when nothing was selected (a chain without a
    // final greedy or dist sampler) or when the input is empty.
    token sample(const float *logits, int32_t n_vocab);
};

// A sampler made of samplers: apply runs them in the order they were added; accept forwards to
// every one and records the token; reset and clone act on all of them.
class sampler_chain final : public sampler {
  public:
    sampler_chain() = default;

    sampler_chain &add(std::unique_ptr<sampler> s);
    size_t size() const { return samplers_.size(); }
    const sampler &at(size_t i) const;
    // Every token accepted since construction or the last reset, oldest first.
    const std::vector<token> &accepted() const { return accepted_; }
    // "penalties -> top-k -> ... -> dist": the order apply() runs, for logs.
    std::string describe() const;

    const char *name() const override { return "chain"; }
    void accept(token t) override;
    void apply(token_data_array &cur) override;
    void reset() override;
    std::unique_ptr<sampler> clone() const override;
    std::optional<uint32_t> seed() const override;

  private:
    std::vector<std::unique_ptr<sampler>> samplers_;
    std::vector<token> accepted_;
};

// The seed value that asks for a random seed (drawn from std::random_device at construction and
// at every reset).
constexpr uint32_t sampler_seed_random = 0xFFFFFFFFu;

// Selects the candidate with the largest logit (the first one in array order on ties).
std::unique_ptr<sampler> make_greedy();
// Softmax over the candidates, then one draw from that distribution with a mt19937 generator
// seeded with `seed`: the same seed gives the same sequence of draws on every platform.
std::unique_ptr<sampler> make_dist(uint32_t seed);
// Keeps the k largest logits; k <= 0 turns it off.
std::unique_ptr<sampler> make_top_k(int32_t k);
// Keeps the smallest most-probable prefix whose probabilities sum to >= p, but at least min_keep
// candidates; p >= 1 turns it off.
std::unique_ptr<sampler> make_top_p(float p, size_t min_keep = 1);
// Keeps the candidates whose probability is >= p times the largest probability, at least
// min_keep; p <= 0 turns it off.
std::unique_ptr<sampler> make_min_p(float p, size_t min_keep = 1);
// Locally typical sampling: orders candidates by how far their information (-log p) is from the
// entropy of the distribution and keeps the closest ones until their probabilities sum to > p, at
// least min_keep; p >= 1 turns it off.
std::unique_ptr<sampler> make_typical(float p, size_t min_keep = 1);
// Divides every logit by t; t <= 0 keeps only the largest logit (all others become -inf).
std::unique_ptr<sampler> make_temp(float t);
// For each candidate seen c > 0 times among the last `last_n` accepted tokens: the logit is divided
// by `repeat` when positive and multiplied by it when not, then c * freq + present is subtracted.
// last_n == 0 turns it off; last_n < 0 looks at every accepted token since the last reset.
std::unique_ptr<sampler> make_penalties(int32_t last_n, float repeat, float freq, float present);

// Adds a bias to the logit of each listed token (-inf: the token is never chosen); a token listed
// twice gets the sum. Throws weft::error on a NaN bias.
std::unique_ptr<sampler> make_logit_bias(std::vector<std::pair<token, float>> biases);

struct sampling_params {
    float temp = 0.8f;
    int32_t top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    float typical_p = 1.0f;
    int32_t penalty_last_n = 64;
    float penalty_repeat = 1.0f;
    float penalty_freq = 0.0f;
    float penalty_present = 0.0f;
    uint32_t seed = sampler_seed_random;
    size_t min_keep = 1;                              // the floor of top-p, min-p and typical
    std::vector<std::pair<token, float>> logit_bias;  // applied first (see make_logit_bias)
    std::string grammar;  // GBNF text the output must follow; empty: none (see weft/runtime/grammar.h)
};

// The established default order: logit bias -> penalties -> top-k -> typical -> top-p -> min-p -> temp ->
// dist; with temp <= 0: penalties -> greedy. Throws weft::error on a parameter out of range (negative repeat
// penalty, top_p or min_p outside [0, 1], NaN) and on a grammar, which needs the vocabulary: the
// make_sampler_chain of weft/runtime/grammar.h takes one.
std::unique_ptr<sampler_chain> make_sampler_chain(const sampling_params &params);

}  // namespace weft
