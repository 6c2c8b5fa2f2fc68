// weft/sampling/sampling.h — samplers over candidate arrays, and the chain that runs them in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
// Only the best k candidates (by logit, ties: the lower id first), sorted so, p = 0: what filling
// all of them and keeping the first k after sorting gives, in one pass over the logits instead of
// a pass that writes the whole vocabulary. The same errors as token_data_array_fill.
void token_data_array_fill_best(token_data_array &cur, const float *logits, int32_t n_vocab, size_t k);

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
    // When this sampler, as it stands, only keeps the best candidates (by logit, ties: the lower id
    // first) and changes nothing else, how many of n it keeps; nullopt when it does anything else.
    virtual std::optional<size_t> keeps_best(size_t n) const { return std::nullopt; }
    // How many of the n candidates apply() needs, the best ones sorted, to come out as it would
    // from all n: fewer when it (a chain: its leading samplers) only truncates to the best or only
    // picks the best. sample() then builds just those (top-k 40 of a 150k vocabulary: 40 entries).
    virtual size_t best_needed(size_t n) const { return keeps_best(n).value_or(n); }

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
    std::optional<size_t> keeps_best(size_t n) const override;
    size_t best_needed(size_t n) const override;
    void accept(token t) override;
    void apply(token_data_array &cur) override;
    void reset() override;
    std::unique_ptr<sampler> clone() const override;
    std::optional<uint32_t> seed() const override;

  private:
    // Walks the leading samplers that only keep the best candidates, n becoming what they keep;
    // the first sampler after them, or null when every one is such.
    const sampler *after_leading_truncations(size_t &n) const;
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

// Temperature scaled by the entropy of the candidates (dynamic temperature): with H the entropy of
// their softmax and n their count, the logits are divided by
// max(0, t - range) + (t + range - max(0, t - range)) * (H / ln n)^exponent, and p is set; range <= 0
// is the plain temperature t.
std::unique_ptr<sampler> make_temp_ext(float t, float range, float exponent);
// Top-n-sigma: every logit below max - n * sigma becomes -inf, where the mean and the (population)
// standard deviation sigma are taken over the finite logits; then sorted, with p. n <= 0 turns it off.
std::unique_ptr<sampler> make_top_n_sigma(float n);
// Exclude Top Choices: with the given probability (one draw per call from its own mt19937 seeded
// with `seed`), drops every candidate whose probability is >= threshold except the least likely of
// them, when at least two reach it and min_keep remain. probability <= 0 or threshold > 0.5: off.
std::unique_ptr<sampler> make_xtc(float probability, float threshold, size_t min_keep, uint32_t seed);
// DRY ("don't repeat yourself"): a candidate that would extend a sequence already repeated in the
// last `last_n` accepted tokens (-1: every one since the last reset, 0: off) for n >= allowed_length
// tokens gets multiplier * base^(n - allowed_length) subtracted. A repetition cannot reach back past
// the most recent sequence breaker; each breaker is a head token followed by the tokens that must
// follow it (see dry_sequence_breaker_tokens), and a single-token breaker is never penalized.
// multiplier == 0 or base < 1 turns it off.
std::unique_ptr<sampler> make_dry(float multiplier, float base, int32_t allowed_length, int32_t last_n,
                                  std::vector<std::vector<token>> breakers);
// The token sequences DRY matches for breaker strings, as the established engine finds them: each
// token whose text (special tokens rendered) contains a breaker is a single-token breaker; a token
// whose text ends with the beginning of a breaker is followed by the tokenization of the rest (at
// most 20 tokens). Breakers are cut to 40 bytes; throws weft::error on an empty one.
std::vector<std::vector<token>> dry_sequence_breaker_tokens(const vocab &v,
                                                            const std::vector<std::string> &breakers);
// Mirostat 1.0 (selects): estimates the Zipf exponent s from the m most likely candidates, keeps the
// top k = (e * 2^mu / (1 - n^-e))^(1/s) of the n candidates (e = s - 1), draws one and moves mu by
// -eta * (its surprise in bits - tau); mu starts at 2 tau.
std::unique_ptr<sampler> make_mirostat(uint32_t seed, float tau, float eta, int32_t m = 100);
// Mirostat 2.0 (selects): keeps the candidates whose surprise -log2 p is at most mu (at least one),
// draws one and updates mu as mirostat 1.0 does.
std::unique_ptr<sampler> make_mirostat_v2(uint32_t seed, float tau, float eta);

// The samplers a chain runs in the order `sampling_params::samplers` lists them (logit bias always
// first, the selecting sampler always last). Their names are the established engine's.
enum class sampler_type { penalties, dry, top_n_sigma, top_k, typical_p, top_p, min_p, xtc, temperature };

// The established default order.
std::vector<sampler_type> default_sampler_sequence();
// "top_k", "typ_p", "temperature" ...: the canonical name.
const char *sampler_type_name(sampler_type type);
// The one-letter form --sampling-seq uses ('k' top-k, 'y' typical ...).
char sampler_type_letter(sampler_type type);
// Names as users write them: canonical ones and the aliases ("top-k", "nucleus", "typical",
// "temp" ...); blanks around names and empty entries are skipped. Throws weft::error naming an
// unknown name and listing the valid ones.
std::vector<sampler_type> sampler_types_from_names(const std::vector<std::string> &names);
// The same from one ';'-separated string ("penalties;top_k;temperature").
std::vector<sampler_type> sampler_types_from_list(std::string_view list);
// The same from letters ("kypmt"); throws weft::error on an unknown letter.
std::vector<sampler_type> sampler_types_from_letters(std::string_view letters);

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

    float dynatemp_range = 0.0f;  // temperature within temp +- this, by the entropy (0: off)
    float dynatemp_exponent = 1.0f;
    float top_n_sigma = -1.0f;     // <= 0: off
    float xtc_probability = 0.0f;  // 0: off
    float xtc_threshold = 0.1f;    // > 0.5: off
    float dry_multiplier = 0.0f;   // 0: off
    float dry_base = 1.75f;        // >= 1
    int32_t dry_allowed_length = 2;
    int32_t dry_penalty_last_n = -1;  // -1: every token since the start, 0: off
    std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
    int32_t mirostat =
        0;  // 0: off, 1: mirostat, 2: mirostat 2.0 (they replace the chain after the logit bias)
    float mirostat_tau = 5.0f;  // target surprise, bits
    float mirostat_eta = 0.1f;  // learning rate
    std::vector<sampler_type> samplers = default_sampler_sequence();
    std::string grammar;  // GBNF text the output must follow; empty: none (see weft/grammar/grammar.h)
};

// Throws weft::error naming the first parameter out of range (negative repeat penalty, top_p or
// min_p outside [0, 1], a NaN, a DRY base below 1, mirostat other than 0, 1, 2 ...).
void check_sampling_params(const sampling_params &params);

// Logit bias, then params.samplers in order, then dist. The established default order: logit bias ->
// penalties -> dry -> top-n-sigma -> top-k -> typical -> top-p -> min-p -> xtc -> temp -> dist; DRY,
// top-n-sigma and XTC join only when they are on, and temp is temp-ext when dynatemp_range > 0. With
// temp <= 0: logit bias, the listed penalties and DRY, then greedy. With mirostat 1 or 2: logit bias ->
// temp -> mirostat. DRY's sequence breakers are matched against `vocab` (needed only when DRY is on
// with breakers). Throws weft::error as check_sampling_params does, and on a grammar: the
// make_sampler_chain of weft/grammar/grammar.h builds the chain with one.
std::unique_ptr<sampler_chain> make_sampler_chain(const sampling_params &params,
                                                  const vocab *vocab = nullptr);

}  // namespace weft
