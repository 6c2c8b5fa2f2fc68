// tests/sampling/test_sampling.cpp — samplers on hand-computed cases, chain order, seeds, clones, dist.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/sampling/sampling.h"
#include "weft/vocab/vocab.h"

namespace weft {
namespace {

std::vector<float> log_of(const std::vector<float> &probs) {
    std::vector<float> logits;
    for (float p : probs) logits.push_back(std::log(p));
    return logits;
}

token_data_array candidates(const std::vector<float> &logits) {
    return token_data_array_from_logits(logits.data(), int32_t(logits.size()));
}

std::vector<token> ids_of(const token_data_array &cur) {
    std::vector<token> ids;
    for (const auto &c : cur.data) ids.push_back(c.id);
    return ids;
}

TEST(Sampling, CandidatesFromLogits) {
    const std::vector<float> logits = {0.5f, -1.0f, 2.0f};
    const auto cur = candidates(logits);
    ASSERT_EQ(cur.data.size(), 3u);
    EXPECT_EQ(cur.data[2].id, 2);
    EXPECT_EQ(cur.data[2].logit, 2.0f);
    EXPECT_EQ(cur.selected, -1);
    EXPECT_FALSE(cur.sorted);
    EXPECT_THROW(token_data_array_from_logits(logits.data(), 0), error);
    EXPECT_THROW(token_data_array_from_logits(nullptr, 3), error);
    const std::vector<float> with_nan = {0.5f, std::nanf(""), 2.0f};
    EXPECT_THROW(make_greedy()->sample(with_nan.data(), 3), error);
}

// Logits of a 5000-entry vocabulary on a coarse grid: many ties, which the order breaks by id.
std::vector<float> tied_logits(std::mt19937 &rng) {
    std::uniform_int_distribution<int> level(-40, 40);
    std::vector<float> logits(5000);
    for (float &x : logits) x = 0.25f * float(level(rng));
    return logits;
}

TEST(Sampling, BestCandidatesAreTheSortedPrefixOfAll) {
    std::mt19937 rng(7);
    for (size_t k : {size_t(1), size_t(2), size_t(40), size_t(4999), size_t(5000), size_t(6000)}) {
        SCOPED_TRACE(k);
        const std::vector<float> logits = tied_logits(rng);
        auto all = candidates(logits);
        token_data_array_softmax(all);
        all.data.resize(std::min(k, all.data.size()));
        token_data_array best;
        token_data_array_fill_best(best, logits.data(), int32_t(logits.size()), k);
        EXPECT_TRUE(best.sorted);
        EXPECT_EQ(best.selected, -1);
        EXPECT_EQ(ids_of(best), ids_of(all));
    }
    token_data_array none;
    const std::vector<float> logits = {1.0f, 2.0f};
    token_data_array_fill_best(none, logits.data(), 2, 0);
    EXPECT_TRUE(none.data.empty());
    const std::vector<float> with_nan = {0.5f, 1.0f, std::nanf(""), 2.0f};
    EXPECT_THROW(token_data_array_fill_best(none, with_nan.data(), 4, 1), error);
    EXPECT_THROW(token_data_array_fill_best(none, nullptr, 4, 1), error);
    EXPECT_THROW(token_data_array_fill_best(none, logits.data(), 0, 1), error);
}

// sample() builds only the candidates the chain's leading samplers keep (top-k, or the best one for
// greedy): every chain must pick what it picks from the whole vocabulary, draw after draw.
TEST(Sampling, SampleFromTheBestCandidatesPicksAsFromAll) {
    struct variant {
        const char *name;
        sampling_params p;
        size_t needed;  // best_needed(5000) of the fresh chain
    };
    std::vector<variant> variants;
    sampling_params p;
    p.seed = 99;
    variants.push_back({"default", p, 40});
    p.top_k = 0;
    variants.push_back({"no top-k", p, 5000});
    p.top_k = 7000;
    variants.push_back({"top-k above the vocabulary", p, 5000});
    p.top_k = 3;
    p.penalty_repeat = 1.5f;  // neutral until the first token is accepted
    variants.push_back({"top-k after penalties", p, 3});
    p = sampling_params{};
    p.temp = 0.0f;
    variants.push_back({"greedy", p, 1});
    p.penalty_repeat = 1.3f;
    variants.push_back({"greedy with a repeat penalty", p, 1});
    p.logit_bias = {{12, 1.0f}};
    variants.push_back({"greedy after a logit bias", p, 5000});
    for (const variant &v : variants) {
        SCOPED_TRACE(v.name);
        auto fast = make_sampler_chain(v.p), whole = make_sampler_chain(v.p);
        EXPECT_EQ(fast->best_needed(5000), v.needed);
        std::mt19937 rng(3);
        for (int draw_index = 0; draw_index < 200; ++draw_index) {
            const std::vector<float> logits = tied_logits(rng);
            const token got = fast->sample(logits.data(), int32_t(logits.size()));
            auto cur = candidates(logits);
            whole->apply(cur);
            ASSERT_GE(cur.selected, 0);
            const token want = cur.data[size_t(cur.selected)].id;
            whole->accept(want);
            ASSERT_EQ(got, want) << "draw " << draw_index;
        }
    }
}

TEST(Sampling, SoftmaxSortsAndNormalizes) {
    auto cur = candidates(log_of({0.1f, 0.4f, 0.2f, 0.3f}));
    token_data_array_softmax(cur);
    EXPECT_TRUE(cur.sorted);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 3, 2, 0}));
    EXPECT_NEAR(cur.data[0].p, 0.4f, 1e-6f);
    EXPECT_NEAR(cur.data[3].p, 0.1f, 1e-6f);

    auto masked = candidates({1.0f, -std::numeric_limits<float>::infinity()});
    token_data_array_softmax(masked);
    EXPECT_EQ(masked.data[0].p, 1.0f);
    EXPECT_EQ(masked.data[1].p, 0.0f);
}

TEST(Sampling, GreedyPicksArgmaxAndFirstOnTies) {
    const std::vector<float> logits = {0.1f, 3.0f, -2.0f, 2.9f};
    EXPECT_EQ(make_greedy()->sample(logits.data(), 4), 1);
    const std::vector<float> tied = {1.0f, 5.0f, 5.0f, 0.0f};
    EXPECT_EQ(make_greedy()->sample(tied.data(), 4), 1);
}

TEST(Sampling, LogitBiasShiftsAndBansTokens) {
    const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f};
    auto cur = token_data_array_from_logits(logits.data(), 4);
    // id 1 banned, id 3 raised twice (the biases add up)
    make_logit_bias({{1, -std::numeric_limits<float>::infinity()}, {3, 1.0f}, {3, 1.5f}})->apply(cur);
    EXPECT_EQ(cur.data[1].logit, -std::numeric_limits<float>::infinity());
    EXPECT_FLOAT_EQ(cur.data[3].logit, 3.0f);
    EXPECT_FLOAT_EQ(cur.data[0].logit, 1.0f);

    sampling_params p;
    p.temp = 0.0f;
    p.logit_bias = {{1, -std::numeric_limits<float>::infinity()}};
    auto chain = make_sampler_chain(p);
    EXPECT_EQ(chain->describe().rfind("logit-bias", 0), 0u) << chain->describe();
    EXPECT_EQ(chain->sample(logits.data(), 4), 2);  // the best one is banned: the second best
    p.logit_bias = {{0, std::nanf("")}};
    EXPECT_THROW(make_sampler_chain(p), error);
}

TEST(Sampling, TopKKeepsLargestAndZeroIsOff) {
    const std::vector<float> logits = {1.0f, 4.0f, 2.0f, 3.0f};
    auto cur = candidates(logits);
    make_top_k(2)->apply(cur);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 3}));
    EXPECT_TRUE(cur.sorted);

    auto off = candidates(logits);
    make_top_k(0)->apply(off);
    EXPECT_EQ(ids_of(off), (std::vector<token>{0, 1, 2, 3}));
    make_top_k(-5)->apply(off);
    EXPECT_EQ(off.data.size(), 4u);

    auto big = candidates(logits);
    make_top_k(100)->apply(big);
    EXPECT_EQ(ids_of(big), (std::vector<token>{1, 3, 2, 0}));
}

TEST(Sampling, TopPKeepsSmallestPrefixReachingP) {
    const auto logits = log_of({0.1f, 0.4f, 0.2f, 0.3f});  // sorted: 1 (.4), 3 (.3), 2 (.2), 0 (.1)
    auto cur = candidates(logits);
    make_top_p(0.65f)->apply(cur);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 3}));

    cur = candidates(logits);
    make_top_p(0.75f)->apply(cur);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 3, 2}));

    cur = candidates(logits);
    make_top_p(0.3f)->apply(cur);  // the first candidate alone already reaches 0.3
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1}));

    cur = candidates(logits);
    make_top_p(0.3f, 3)->apply(cur);  // but min_keep wins
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 3, 2}));

    cur = candidates(logits);
    make_top_p(1.0f)->apply(cur);  // off: untouched, not even sorted
    EXPECT_EQ(ids_of(cur), (std::vector<token>{0, 1, 2, 3}));
}

// The obvious reference: sort everything, softmax in double, cut at the first prefix reaching p.
std::vector<token> top_p_reference(const std::vector<float> &logits, double p, size_t min_keep) {
    std::vector<token> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = token(i);
    std::sort(ids.begin(), ids.end(), [&](token a, token b) {
        return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
    });
    double sum = 0.0;
    for (float l : logits) sum += std::exp(double(l) - double(logits[size_t(ids[0])]));
    double cumulative = 0.0;
    for (size_t i = 0; i < ids.size(); ++i) {
        cumulative += std::exp(double(logits[size_t(ids[i])]) - double(logits[size_t(ids[0])])) / sum;
        if (cumulative >= p && i + 1 >= min_keep) return {ids.begin(), ids.begin() + std::ptrdiff_t(i + 1)};
    }
    return ids;
}

TEST(Sampling, TopPOnLargeArraysMatchesFullSortReference) {
    // 5000 candidates, flat enough that the nucleus needs thousands of them: the partial sort has to
    // grow several times.
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> logits(5000);
    for (auto &l : logits) l = normal(rng);
    for (float p : {0.05f, 0.3f, 0.6f, 0.9f, 0.99f}) {
        for (size_t min_keep : {size_t(1), size_t(300)}) {
            auto cur = candidates(logits);
            make_top_p(p, min_keep)->apply(cur);
            const auto expected = top_p_reference(logits, p, min_keep);
            // cumulative sums in float vs double may disagree right at the boundary: allow one
            ASSERT_NEAR(double(cur.data.size()), double(expected.size()), 1.0) << "p " << p;
            const size_t n = std::min(cur.data.size(), expected.size());
            const auto got = ids_of(cur);
            EXPECT_TRUE(std::equal(got.begin(), got.begin() + std::ptrdiff_t(n), expected.begin()))
                << "p " << p;
            EXPECT_TRUE(cur.sorted);
        }
    }
    // already sorted input takes the other path and gives the same answer
    auto sorted = candidates(logits);
    token_data_array_softmax(sorted);
    make_top_p(0.6f)->apply(sorted);
    auto unsorted = candidates(logits);
    make_top_p(0.6f)->apply(unsorted);
    EXPECT_EQ(ids_of(sorted), ids_of(unsorted));
}

TEST(Sampling, MinPIsRelativeToTheLargestProbability) {
    const auto logits = log_of({0.1f, 0.4f, 0.2f, 0.3f});
    auto cur = candidates(logits);
    make_min_p(0.6f)->apply(cur);  // threshold 0.24: keeps .4 and .3, original order
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 3}));

    cur = candidates(logits);
    make_min_p(0.3f)->apply(cur);  // threshold 0.12
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 2, 3}));

    cur = candidates(logits);
    make_min_p(0.9f, 3)->apply(cur);  // only one passes, min_keep asks for the best three
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 3, 2}));

    cur = candidates(logits);
    make_min_p(0.0f)->apply(cur);
    EXPECT_EQ(cur.data.size(), 4u);
}

TEST(Sampling, TypicalKeepsCandidatesNearTheEntropy) {
    // p = .5 .25 .125 .125: entropy 1.75 ln2; -ln p = 1, 2, 3, 3 ln2; distances .75, .25, 1.25, 1.25
    const auto logits = log_of({0.5f, 0.25f, 0.125f, 0.125f});
    auto cur = candidates(logits);
    make_typical(0.5f)->apply(cur);  // id 1 (.25), then id 0: .75 > .5
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 0}));
    EXPECT_FALSE(cur.sorted);

    cur = candidates(logits);
    make_typical(0.2f)->apply(cur);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1}));

    cur = candidates(logits);
    make_typical(0.2f, 3)->apply(cur);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 0, 2}));

    cur = candidates(logits);
    make_typical(1.0f)->apply(cur);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{0, 1, 2, 3}));
}

TEST(Sampling, TemperatureDividesLogits) {
    auto cur = candidates({1.0f, 2.0f, -3.0f});
    make_temp(0.5f)->apply(cur);
    EXPECT_FLOAT_EQ(cur.data[0].logit, 2.0f);
    EXPECT_FLOAT_EQ(cur.data[1].logit, 4.0f);
    EXPECT_FLOAT_EQ(cur.data[2].logit, -6.0f);

    cur = candidates({1.0f, 2.0f, -3.0f});
    make_temp(0.0f)->apply(cur);
    EXPECT_TRUE(std::isinf(cur.data[0].logit) && cur.data[0].logit < 0);
    EXPECT_FLOAT_EQ(cur.data[1].logit, 2.0f);
    EXPECT_TRUE(std::isinf(cur.data[2].logit) && cur.data[2].logit < 0);
}

TEST(Sampling, PenaltiesRepeatFrequencyPresence) {
    auto pen = make_penalties(/*last_n=*/8, /*repeat=*/2.0f, /*freq=*/0.5f, /*present=*/0.25f);
    pen->accept(0);
    pen->accept(1);
    pen->accept(1);
    auto cur = candidates({2.0f, -2.0f, 3.0f});
    pen->apply(cur);
    EXPECT_FLOAT_EQ(cur.data[0].logit, 2.0f / 2.0f - 1 * 0.5f - 0.25f);   // seen once, positive
    EXPECT_FLOAT_EQ(cur.data[1].logit, -2.0f * 2.0f - 2 * 0.5f - 0.25f);  // seen twice, negative
    EXPECT_FLOAT_EQ(cur.data[2].logit, 3.0f);                             // never seen

    pen->reset();
    cur = candidates({2.0f, -2.0f, 3.0f});
    pen->apply(cur);
    EXPECT_FLOAT_EQ(cur.data[0].logit, 2.0f);
}

TEST(Sampling, PenaltiesLookOnlyAtTheLastN) {
    auto pen = make_penalties(/*last_n=*/2, 2.0f, 0.0f, 0.0f);
    for (token t : {0, 1, 1}) pen->accept(t);  // window is [1, 1]
    auto cur = candidates({2.0f, 2.0f});
    pen->apply(cur);
    EXPECT_FLOAT_EQ(cur.data[0].logit, 2.0f);
    EXPECT_FLOAT_EQ(cur.data[1].logit, 1.0f);

    auto off = make_penalties(/*last_n=*/0, 2.0f, 1.0f, 1.0f);
    off->accept(0);
    cur = candidates({2.0f, 2.0f});
    off->apply(cur);
    EXPECT_FLOAT_EQ(cur.data[0].logit, 2.0f);

    auto all = make_penalties(/*last_n=*/-1, 2.0f, 0.0f, 0.0f);  // whole history
    all->accept(0);
    for (int i = 0; i < 1000; ++i) all->accept(1);
    cur = candidates({2.0f, 2.0f});
    all->apply(cur);
    EXPECT_FLOAT_EQ(cur.data[0].logit, 1.0f);
}

// Appends its tag to a shared log on apply and accept: shows the order a chain runs its members.
class recording_sampler final : public sampler {
  public:
    recording_sampler(std::string tag, std::vector<std::string> *log) : tag_(std::move(tag)), log_(log) {}
    const char *name() const override { return tag_.c_str(); }
    void accept(token t) override { log_->push_back(tag_ + ":accept" + std::to_string(t)); }
    void apply(token_data_array &) override { log_->push_back(tag_ + ":apply"); }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<recording_sampler>(*this); }

  private:
    std::string tag_;
    std::vector<std::string> *log_;
};

TEST(Sampling, ChainRunsInOrderAndForwardsAccept) {
    std::vector<std::string> log;
    sampler_chain chain;
    chain.add(std::make_unique<recording_sampler>("a", &log))
        .add(std::make_unique<recording_sampler>("b", &log))
        .add(make_greedy());
    const std::vector<float> logits = {0.0f, 1.0f};
    EXPECT_EQ(chain.sample(logits.data(), 2), 1);
    EXPECT_EQ(log, (std::vector<std::string>{"a:apply", "b:apply", "a:accept1", "b:accept1"}));
    EXPECT_EQ(chain.accepted(), (std::vector<token>{1}));
    EXPECT_EQ(chain.describe(), "a -> b -> greedy");
    chain.reset();
    EXPECT_TRUE(chain.accepted().empty());
}

TEST(Sampling, ChainOrderChangesTheResult) {
    const auto logits = log_of({0.6f, 0.4f});
    // min-p 0.5 before temp 0.25: .4 >= .3, both stay
    sampler_chain before;
    before.add(make_min_p(0.5f)).add(make_temp(0.25f));
    auto cur = candidates(logits);
    before.apply(cur);
    EXPECT_EQ(cur.data.size(), 2u);
    // temp first sharpens to (.4/.6)^4 ~ .2 of the leader: min-p drops it
    sampler_chain after;
    after.add(make_temp(0.25f)).add(make_min_p(0.5f));
    cur = candidates(logits);
    after.apply(cur);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{0}));
}

TEST(Sampling, SampleWithoutSelectorThrows) {
    sampler_chain chain;
    chain.add(make_top_k(2));
    const std::vector<float> logits = {0.0f, 1.0f, 2.0f};
    EXPECT_THROW(chain.sample(logits.data(), 3), error);
}

TEST(Sampling, DefaultChainOrder) {
    sampling_params params;
    params.seed = 7;
    auto chain = make_sampler_chain(params);
    EXPECT_EQ(chain->describe(), "penalties -> top-k -> typical -> top-p -> min-p -> temp -> dist");
    EXPECT_EQ(chain->seed(), 7u);
    params.temp = 0.0f;
    EXPECT_EQ(make_sampler_chain(params)->describe(), "penalties -> greedy");
    EXPECT_EQ(make_sampler_chain(params)->seed(), std::nullopt);

    sampling_params bad;
    bad.top_p = 1.5f;
    EXPECT_THROW(make_sampler_chain(bad), error);
    bad = {};
    bad.penalty_repeat = 0.0f;
    EXPECT_THROW(make_sampler_chain(bad), error);
    bad = {};
    bad.temp = std::nanf("");
    EXPECT_THROW(make_sampler_chain(bad), error);
}

// tokenizer.ggml.suppress_tokens (Gemma 4's end-of-media markers): a chain made with the vocabulary
// never picks them, even as the only likely token and under the request's own bias; without the
// vocabulary (no model) nothing is suppressed.
TEST(Sampling, SuppressedTokensAreNeverPicked) {
    vocab_spec spec;
    spec.model = "gpt2";
    spec.pre = "gpt-2";
    for (const char *t : {"a", "b", "c", "d"}) spec.tokens.push_back(t);
    spec.suppress = {2, 1, 2};
    const auto v = vocab::create(spec, "suppress");
    EXPECT_EQ(v->suppressed_tokens(), (std::vector<token>{1, 2}));

    sampling_params params;
    params.temp = 0.0f;
    params.logit_bias = {{2, 100.0f}};
    const std::vector<float> logits = {0.0f, 9.0f, 8.0f, 1.0f};
    auto chain = make_sampler_chain(params, v.get());
    EXPECT_EQ(chain->describe(), "logit-bias -> penalties -> greedy");
    EXPECT_EQ(chain->sample(logits.data(), 4), 3);
    EXPECT_EQ(make_sampler_chain(params)->sample(logits.data(), 4), 2);  // no vocabulary: only the bias

    params.temp = 1.0f;  // drawing: the suppressed ones have no chance
    params.seed = 11;
    params.logit_bias.clear();
    auto drawing = make_sampler_chain(params, v.get());
    for (int i = 0; i < 50; ++i) {
        const token t = drawing->sample(logits.data(), 4);
        EXPECT_TRUE(t == 0 || t == 3) << t;
    }

    spec.suppress = {4};
    try {
        vocab::create(spec, "suppress");
        ADD_FAILURE() << "an id past the vocabulary must be refused";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.suppress_tokens[0] is 4, not a token of the "
                                             "4-token vocabulary"),
                  std::string::npos)
            << e.what();
    }
    spec.suppress = {0, -1};
    EXPECT_THROW(vocab::create(spec, "suppress"), error);
}

TEST(Sampling, GreedyChainWithRepeatPenaltyMovesOn) {
    sampling_params params;
    params.temp = 0.0f;
    params.penalty_repeat = 4.0f;
    auto chain = make_sampler_chain(params);
    const std::vector<float> logits = {2.0f, 1.0f, 0.9f};
    EXPECT_EQ(chain->sample(logits.data(), 3), 0);
    EXPECT_EQ(chain->sample(logits.data(), 3), 1);  // 0 was accepted by sample(): 2/4 < 1
    EXPECT_EQ(chain->sample(logits.data(), 3), 2);  // 0 -> 0.5, 1 -> 0.25, 2 stays 0.9
    EXPECT_EQ(chain->accepted(), (std::vector<token>{0, 1, 2}));
}

std::vector<token> draw(sampler &s, const std::vector<float> &logits, int n) {
    std::vector<token> out;
    for (int i = 0; i < n; ++i) out.push_back(s.sample(logits.data(), int32_t(logits.size())));
    return out;
}

TEST(Sampling, SameSeedSameSequenceDifferentSeedDiffers) {
    const std::vector<float> uniform(16, 0.0f);
    auto a = make_dist(1234);
    auto b = make_dist(1234);
    auto c = make_dist(1235);
    const auto seq_a = draw(*a, uniform, 200);
    EXPECT_EQ(seq_a, draw(*b, uniform, 200));
    EXPECT_NE(seq_a, draw(*c, uniform, 200));
    a->reset();  // re-seeds: the same sequence again
    EXPECT_EQ(seq_a, draw(*a, uniform, 200));

    // the default chain too
    sampling_params params;
    params.seed = 99;
    params.top_k = 0;
    params.min_p = 0.0f;
    auto chain1 = make_sampler_chain(params);
    auto chain2 = make_sampler_chain(params);
    EXPECT_EQ(draw(*chain1, uniform, 100), draw(*chain2, uniform, 100));

    auto random1 = make_dist(sampler_seed_random);
    auto random2 = make_dist(sampler_seed_random);
    EXPECT_NE(random1->seed(), random2->seed());  // two random_device draws: equal with p = 2^-32
}

TEST(Sampling, DifferentSeedsDifferInDistributionOfSequences) {
    // Over many seeds the first draw from a uniform distribution covers all tokens.
    const std::vector<float> uniform(4, 0.0f);
    std::map<token, int> first;
    for (uint32_t seed = 0; seed < 400; ++seed) ++first[make_dist(seed)->sample(uniform.data(), 4)];
    ASSERT_EQ(first.size(), 4u);
    for (const auto &[t, n] : first) EXPECT_GT(n, 50) << "token " << t;
}

TEST(Sampling, CloneIsIndependentAndCarriesState) {
    sampling_params params;
    params.seed = 42;
    params.penalty_repeat = 1.5f;
    auto original = make_sampler_chain(params);
    const std::vector<float> logits = {0.5f, 0.4f, 0.3f, 0.2f, 0.1f, 0.0f};
    draw(*original, logits, 5);
    auto copy = original->clone();
    auto &copy_chain = dynamic_cast<sampler_chain &>(*copy);
    EXPECT_EQ(copy_chain.accepted(), original->accepted());
    // same RNG position and same penalty history: the same continuation
    const auto next_original = draw(*original, logits, 20);
    EXPECT_EQ(draw(*copy, logits, 20), next_original);
    // advancing one does not move the other
    draw(*original, logits, 7);
    EXPECT_EQ(original->accepted().size(), 32u);
    EXPECT_EQ(copy_chain.accepted().size(), 25u);
    original->reset();
    EXPECT_EQ(copy_chain.accepted().size(), 25u);
}

TEST(Sampling, DistFrequenciesMatchSoftmax) {
    const std::vector<float> probs = {0.5f, 0.3f, 0.15f, 0.05f};
    const auto logits = log_of(probs);
    auto dist = make_dist(2024);
    const int n = 200000;
    std::vector<int> counts(probs.size(), 0);
    for (int i = 0; i < n; ++i) ++counts[size_t(dist->sample(logits.data(), 4))];
    double chi2 = 0.0;
    for (size_t i = 0; i < probs.size(); ++i) {
        const double expected = probs[i] * n;
        const double sigma = std::sqrt(n * probs[i] * (1.0 - probs[i]));
        EXPECT_NEAR(counts[i], expected, 5 * sigma) << "token " << i;
        chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    }
    EXPECT_LT(chi2, 16.27);  // 3 degrees of freedom, p = 0.001
}

TEST(Sampling, DistAfterTopKNeverDrawsDroppedTokens) {
    sampler_chain chain;
    chain.add(make_top_k(2)).add(make_dist(5));
    const std::vector<float> logits = {0.0f, 1.0f, 0.9f, 0.1f};
    for (int i = 0; i < 500; ++i) {
        const token t = chain.sample(logits.data(), 4);
        EXPECT_TRUE(t == 1 || t == 2) << t;
    }
}

// --- the samplers beyond the basic ones

// The first draws of std::mt19937 with its default seed, as the standard fixes them; the seeded
// samplers map each 32-bit draw u to u / 2^32.
constexpr uint32_t mt_default_seed = 5489;
constexpr double mt_first = 3499211612.0 / 4294967296.0;  // 0.8147
constexpr double mt_second = 581869302.0 / 4294967296.0;  // 0.1355
constexpr double mt_third = 3890346734.0 / 4294967296.0;  // 0.9058

TEST(Sampling, MersenneTwisterDrawsAreTheStandardOnes) {
    std::mt19937 rng(mt_default_seed);
    EXPECT_EQ(rng(), 3499211612u);
    EXPECT_EQ(rng(), 581869302u);
    EXPECT_EQ(rng(), 3890346734u);
}

const float neg_inf = -std::numeric_limits<float>::infinity();

TEST(Sampling, TopNSigmaMasksLogitsFarBelowTheBest) {
    // finite logits 1..5: mean 3, population sigma sqrt(2); the -inf one is left out of both
    const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, neg_inf};
    auto cur = candidates(logits);
    make_top_n_sigma(1.0f)->apply(cur);  // threshold 5 - 1.414 = 3.59: keeps 4 and 5
    ASSERT_EQ(cur.data.size(), 6u);      // masked, not removed
    EXPECT_TRUE(cur.sorted);
    EXPECT_EQ(cur.data[0].id, 4);
    EXPECT_EQ(cur.data[1].id, 3);
    EXPECT_NEAR(cur.data[0].p, 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
    EXPECT_NEAR(cur.data[1].p, 1.0 / (1.0 + std::exp(1.0)), 1e-6);
    for (size_t i = 2; i < 6; ++i) {
        EXPECT_EQ(cur.data[i].logit, neg_inf) << i;
        EXPECT_EQ(cur.data[i].p, 0.0f) << i;
    }

    cur = candidates(logits);
    make_top_n_sigma(2.0f)->apply(cur);  // threshold 5 - 2.83 = 2.17: keeps 3, 4 and 5
    EXPECT_EQ(cur.data[2].id, 2);
    EXPECT_EQ(cur.data[2].logit, 3.0f);
    EXPECT_EQ(cur.data[3].logit, neg_inf);

    for (float off : {0.0f, -1.0f}) {
        cur = candidates(logits);
        make_top_n_sigma(off)->apply(cur);
        EXPECT_EQ(ids_of(cur), (std::vector<token>{0, 1, 2, 3, 4, 5}));
        EXPECT_EQ(cur.data[0].logit, 1.0f);
    }
}

TEST(Sampling, XtcExcludesTheTopChoicesButTheLeastLikelyOfThem) {
    const auto logits = log_of({0.35f, 0.3f, 0.2f, 0.15f});
    // probability 1: always. Threshold .25: ids 0 and 1 reach it, id 0 goes.
    auto cur = candidates(logits);
    make_xtc(1.0f, 0.25f, 1, 1)->apply(cur);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 2, 3}));
    // threshold .18: ids 0, 1, 2 reach it; 0 and 1 go
    cur = candidates(logits);
    make_xtc(1.0f, 0.18f, 1, 1)->apply(cur);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{2, 3}));
    // ... unless fewer than min_keep would remain
    cur = candidates(logits);
    make_xtc(1.0f, 0.18f, 3, 1)->apply(cur);
    EXPECT_EQ(cur.data.size(), 4u);
    // one candidate alone above the threshold stays
    cur = candidates(logits);
    make_xtc(1.0f, 0.32f, 1, 1)->apply(cur);
    EXPECT_EQ(cur.data.size(), 4u);
    // threshold above 0.5 or probability 0: off, untouched and unsorted
    for (const auto &[probability, threshold] : {std::pair{1.0f, 0.6f}, std::pair{0.0f, 0.1f}}) {
        cur = candidates(logits);
        make_xtc(probability, threshold, 1, 1)->apply(cur);
        EXPECT_EQ(ids_of(cur), (std::vector<token>{0, 1, 2, 3}));
        EXPECT_FALSE(cur.sorted);
    }
}

TEST(Sampling, XtcDrawsFromItsSeed) {
    // probability .8 with the default seed: the first draw (.8147) is above it, the second (.1355)
    // not; so the first call leaves the candidates alone and the second cuts
    ASSERT_GT(mt_first, 0.8);
    ASSERT_LT(mt_second, 0.8);
    const auto logits = log_of({0.35f, 0.3f, 0.2f, 0.15f});
    auto xtc = make_xtc(0.8f, 0.25f, 1, mt_default_seed);
    EXPECT_EQ(xtc->seed(), std::nullopt);  // a chain reports its selecting sampler's seed
    auto cur = candidates(logits);
    xtc->apply(cur);
    EXPECT_EQ(cur.data.size(), 4u);
    cur = candidates(logits);
    xtc->apply(cur);
    EXPECT_EQ(ids_of(cur), (std::vector<token>{1, 2, 3}));

    // a clone carries the generator's position; reset goes back to the first draw
    auto copy = xtc->clone();
    xtc->reset();
    cur = candidates(logits);
    xtc->apply(cur);
    EXPECT_EQ(cur.data.size(), 4u);
    cur = candidates(logits);
    copy->apply(cur);  // the third draw (.9058): no cut
    EXPECT_EQ(cur.data.size(), 4u);
}

TEST(Sampling, DynamicTemperatureFollowsTheEntropy) {
    // p = .5 .25 .25: entropy 1.5 ln 2 = 1.0397, of at most ln 3 = 1.0986: normalized .946395
    const auto logits = log_of({0.5f, 0.25f, 0.25f});
    const double normalized = 1.5 * std::log(2.0) / std::log(3.0);
    ASSERT_NEAR(normalized, 0.946395, 1e-6);
    struct {
        float t, range, exponent;
        double expected_t;
    } cases[] = {
        {1.0f, 0.5f, 1.0f, 0.5 + 1.0 * normalized},               // 1.446
        {1.0f, 0.5f, 2.0f, 0.5 + 1.0 * normalized * normalized},  // 1.396
        {0.3f, 0.5f, 1.0f, 0.0 + 0.8 * normalized},               // the bottom clamps at 0
        {1.0f, 0.0f, 1.0f, 1.0},                                  // range 0: plain temperature
    };
    for (const auto &c : cases) {
        SCOPED_TRACE(c.expected_t);
        auto cur = candidates(logits);
        make_temp_ext(c.t, c.range, c.exponent)->apply(cur);
        std::map<token, float> got;
        for (const auto &d : cur.data) got[d.id] = d.logit;
        EXPECT_NEAR(got[0], std::log(0.5) / c.expected_t, 1e-5);
        EXPECT_NEAR(got[1], std::log(0.25) / c.expected_t, 1e-5);
        if (c.range > 0) {  // the probabilities follow the new logits
            const double a = std::pow(0.5, 1 / c.expected_t), b = std::pow(0.25, 1 / c.expected_t);
            EXPECT_NEAR(cur.data[0].p, a / (a + 2 * b), 1e-6);
        }
    }
}

TEST(Sampling, MirostatCutsByTheZipfFitAndTracksTheSurprise) {
    // p proportional to 1/(i+1)^2 over 4 candidates: the fitted exponent s is 2, e = s - 1 = 1, so
    // k = (2^mu / (1 - 4^-1))^(1/2). tau 1: mu starts at 2, k = 2.31 -> 2.
    std::vector<float> logits;
    for (int i = 0; i < 4; ++i) logits.push_back(-2.0f * std::log(float(i + 1)));
    auto miro = make_mirostat(mt_default_seed, /*tau=*/1.0f, /*eta=*/1.0f);
    EXPECT_EQ(miro->seed(), mt_default_seed);
    auto step = [&](size_t expect_kept, token expect_id) {
        auto cur = candidates(logits);
        miro->apply(cur);
        ASSERT_EQ(cur.data.size(), expect_kept);
        ASSERT_GE(cur.selected, 0);
        EXPECT_EQ(cur.data[size_t(cur.selected)].id, expect_id);
    };
    // kept .8 / .2; the draw .8147 passes .8: id 1, surprise log2 5 = 2.32; mu = 2 - (2.32 - 1) = .678
    step(2, 1);
    // k = (1.6 / .75)^(1/2) = 1.46 -> 1: id 0, surprise 0; mu = .678 + 1 = 1.678
    step(1, 0);
    // k = (3.2 / .75)^(1/2) = 2.07 -> 2; the draw .9058: id 1
    ASSERT_GT(mt_third, 0.8);
    step(2, 1);
    // reset: mu back to 2 and the generator to its first draw
    miro->reset();
    step(2, 1);
    step(1, 0);
}

TEST(Sampling, MirostatV2KeepsTheCandidatesBelowMu) {
    // surprises 1, 2, 3, 3 bits; tau 1.25: mu starts at 2.5, keeping ids 0 and 1 (2/3, 1/3)
    const auto logits = log_of({0.5f, 0.25f, 0.125f, 0.125f});
    auto miro = make_mirostat_v2(mt_default_seed, /*tau=*/1.25f, /*eta=*/2.0f);
    auto step = [&](size_t expect_kept, token expect_id) {
        auto cur = candidates(logits);
        miro->apply(cur);
        ASSERT_EQ(cur.data.size(), expect_kept);
        EXPECT_EQ(cur.data[size_t(cur.selected)].id, expect_id);
    };
    // the draw .8147 passes 2/3: id 1, surprise log2 3 = 1.585; mu = 2.5 - 2 (1.585 - 1.25) = 1.83
    step(2, 1);
    // only id 0 (1 bit) is within 1.83; it has p 1, surprise 0: mu = 1.83 + 2.5 = 4.33
    step(1, 0);
    // everything is within 4.33 bits; the draw .9058 passes .5 + .25 + .125: id 3
    ASSERT_GT(mt_third, 0.875);
    step(4, 3);
}

// --- DRY

// DRY on ten equal logits after the history, returning each token's logit.
std::vector<float> dry_logits(sampler &dry, const std::vector<token> &history) {
    dry.reset();
    for (token t : history) dry.accept(t);
    auto cur = candidates(std::vector<float>(10, 0.0f));
    dry.apply(cur);
    std::vector<float> out(10);
    for (const auto &c : cur.data) out[size_t(c.id)] = c.logit;
    return out;
}

TEST(Sampling, DryPenalizesTokensThatExtendARepetition) {
    // 5 6 7 8 1 6 7 9 1 6 7: the tail "6 7" appeared before 8 (as 6 7, 2 tokens) and before 9 (as
    // 1 6 7, 3 tokens). multiplier 1, base 2, allowed 2: 8 loses 2^0 = 1, 9 loses 2^1 = 2.
    const std::vector<token> history = {5, 6, 7, 8, 1, 6, 7, 9, 1, 6, 7};
    auto dry = make_dry(1.0f, 2.0f, 2, -1, {});
    std::vector<float> expected(10, 0.0f);
    expected[8] = -1.0f;
    expected[9] = -2.0f;
    EXPECT_EQ(dry_logits(*dry, history), expected);

    // allowed length 3: only 9's 3-token repetition counts, at 2^0
    auto strict = make_dry(1.0f, 2.0f, 3, -1, {});
    expected[8] = 0.0f;
    expected[9] = -1.0f;
    EXPECT_EQ(dry_logits(*strict, history), expected);

    // the last 4 tokens (9 1 6 7) repeat nothing
    auto short_window = make_dry(1.0f, 2.0f, 2, 4, {});
    EXPECT_EQ(dry_logits(*short_window, history), std::vector<float>(10, 0.0f));

    // multiplier 0 or last_n 0: off
    EXPECT_EQ(dry_logits(*make_dry(0.0f, 2.0f, 2, -1, {}), history), std::vector<float>(10, 0.0f));
    EXPECT_EQ(dry_logits(*make_dry(1.0f, 2.0f, 2, 0, {}), history), std::vector<float>(10, 0.0f));

    // the exponent is capped where base^exponent would overflow a float: 1.75^158 (88.72 / ln 1.75)
    auto capped = make_dry(1.0f, 1.75f, 2, -1, {});
    const auto flat = dry_logits(*capped, std::vector<token>(200, 3));
    EXPECT_FLOAT_EQ(flat[3], -float(std::pow(1.75, 158.0)));
    EXPECT_EQ(flat[4], 0.0f);

    EXPECT_THROW(make_dry(1.0f, 2.0f, -1, -1, {}), error);
    EXPECT_THROW(make_dry(1.0f, 2.0f, 2, -2, {}), error);
}

TEST(Sampling, DrySequenceBreakersLimitTheRepetition) {
    std::vector<float> expected(10, 0.0f);
    // single-token breaker 1: the most recent 1 is 2 tokens from the end, so no repetition is
    // longer than 2: 9's drops to 2^0
    const std::vector<token> history = {5, 6, 7, 8, 1, 6, 7, 9, 1, 6, 7};
    expected[8] = expected[9] = -1.0f;
    EXPECT_EQ(dry_logits(*make_dry(1.0f, 2.0f, 2, -1, {{1}}), history), expected);

    // a single-token breaker is never penalized itself: after 6 7 3 6 7, 3 would continue "6 7"
    const std::vector<token> before_breaker = {6, 7, 3, 6, 7};
    expected.assign(10, 0.0f);
    expected[3] = -1.0f;
    EXPECT_EQ(dry_logits(*make_dry(1.0f, 2.0f, 2, -1, {}), before_breaker), expected);
    EXPECT_EQ(dry_logits(*make_dry(1.0f, 2.0f, 2, -1, {{3}}), before_breaker), std::vector<float>(10, 0.0f));

    // a two-token breaker 3 4 counts only complete: 3 4 6 7 9 3 4 6 7 repeats 4 tokens before 9
    // (2^2); the breaker 3 4, 3 tokens from the end, cuts that to 2 (2^0); 3 5 never occurs
    const std::vector<token> long_repeat = {3, 4, 6, 7, 9, 3, 4, 6, 7};
    expected.assign(10, 0.0f);
    expected[9] = -4.0f;
    EXPECT_EQ(dry_logits(*make_dry(1.0f, 2.0f, 2, -1, {}), long_repeat), expected);
    EXPECT_EQ(dry_logits(*make_dry(1.0f, 2.0f, 2, -1, {{3, 5}}), long_repeat), expected);
    expected[9] = -1.0f;
    EXPECT_EQ(dry_logits(*make_dry(1.0f, 2.0f, 2, -1, {{3, 4}}), long_repeat), expected);
}

TEST(Sampling, DryHistoryIsResetAndCloned) {
    auto dry = make_dry(1.0f, 2.0f, 2, -1, {});
    for (token t : {5, 6, 7, 8, 5, 6, 7}) dry->accept(t);
    auto copy = dry->clone();
    dry->reset();
    auto cur = candidates(std::vector<float>(10, 0.0f));
    dry->apply(cur);
    EXPECT_EQ(cur.data[8].logit, 0.0f);
    copy->apply(cur);
    EXPECT_EQ(cur.data[8].logit, -2.0f);  // 5 6 7 repeated: 2^1
}

// The built-in model's vocabulary (stories260K, 512 SPM tokens), checked into the repository.
const vocab &stories_vocab() {
    static const auto file = gguf_file::open(std::string(WEFT_SOURCE_DIR) + "/models/stories260K.gguf");
    static const auto v = vocab::load(*file);
    return *v;
}

std::string text_of_token(const vocab &v, token t) {
    return v.detokenize(std::span<const token>(&t, 1), true);
}

TEST(Sampling, DrySequenceBreakerTokensMatchTokenTexts) {
    const vocab &v = stories_vocab();
    // "\n" is the byte token <0x0A> alone
    EXPECT_EQ(dry_sequence_breaker_tokens(v, {"\n"}), (std::vector<std::vector<token>>{{13}}));
    // ":" is held by two tokens (":" and " :", whose leading space a lone piece drops)
    const auto colon = dry_sequence_breaker_tokens(v, {":"});
    EXPECT_EQ(colon, (std::vector<std::vector<token>>{{61}, {467}}));

    // "once": no token holds it whole; those ending with "o", "on" or "onc" start it, followed by
    // the rest as tokenized alone; "upon" (407) ends with "on" and leaves "ce"
    const auto once = dry_sequence_breaker_tokens(v, {"once"});
    ASSERT_FALSE(once.empty());
    const std::vector<token> ce = v.tokenize("ce", false, false);
    EXPECT_NE(std::find(once.begin(), once.end(),
                        [&] {
                            std::vector<token> seq{407};
                            seq.insert(seq.end(), ce.begin(), ce.end());
                            return seq;
                        }()),
              once.end());
    size_t heads = 0;
    for (token id = 0; id < v.n_tokens(); ++id) {
        const std::string text = text_of_token(v, id);
        for (size_t overlap = 1; overlap < 4 && overlap <= text.size(); ++overlap)
            if (text.compare(text.size() - overlap, overlap, std::string("once"), 0, overlap) == 0) {
                std::vector<token> seq{id};
                const auto rest = v.tokenize(std::string("once").substr(overlap), false, false);
                seq.insert(seq.end(), rest.begin(), rest.end());
                EXPECT_NE(std::find(once.begin(), once.end(), seq), once.end())
                    << "token " << id << " '" << text << "'";
                ++heads;
            }
    }
    EXPECT_EQ(once.size(), heads);

    EXPECT_THROW(dry_sequence_breaker_tokens(v, {"\n", ""}), error);
}

// --- chains

TEST(Sampling, SamplerNamesAliasesAndLetters) {
    EXPECT_EQ(
        default_sampler_sequence(),
        (std::vector<sampler_type>{sampler_type::penalties, sampler_type::dry, sampler_type::top_n_sigma,
                                   sampler_type::top_k, sampler_type::typical_p, sampler_type::top_p,
                                   sampler_type::min_p, sampler_type::xtc, sampler_type::temperature}));
    std::string names, letters;
    for (sampler_type t : default_sampler_sequence()) {
        names += std::string(names.empty() ? "" : ";") + sampler_type_name(t);
        letters += sampler_type_letter(t);
    }
    EXPECT_EQ(names, "penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature");
    EXPECT_EQ(letters, "edskypmxt");
    EXPECT_EQ(sampler_types_from_list(names), default_sampler_sequence());
    EXPECT_EQ(sampler_types_from_letters(letters), default_sampler_sequence());

    EXPECT_EQ(sampler_types_from_list("top-k; nucleus;typical ;temp;;"),
              (std::vector<sampler_type>{sampler_type::top_k, sampler_type::top_p, sampler_type::typical_p,
                                         sampler_type::temperature}));
    EXPECT_EQ(
        sampler_types_from_names({"top-p", "top-n-sigma", "typical-p", "typ-p", "typ", "min-p"}),
        (std::vector<sampler_type>{sampler_type::top_p, sampler_type::top_n_sigma, sampler_type::typical_p,
                                   sampler_type::typical_p, sampler_type::typical_p, sampler_type::min_p}));
    EXPECT_EQ(sampler_types_from_list(""), std::vector<sampler_type>{});

    try {
        sampler_types_from_list("top_k;warmth");
        ADD_FAILURE() << "no error";
    } catch (const error &e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("'warmth' is unknown"), std::string::npos) << what;
        EXPECT_NE(what.find("penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature"),
                  std::string::npos)
            << what;
    }
    try {
        sampler_types_from_list("infill");
        ADD_FAILURE() << "no error";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("'infill' is not supported"), std::string::npos) << e.what();
    }
    try {
        sampler_types_from_letters("kzt");
        ADD_FAILURE() << "no error";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("letter 'z' in 'kzt' is unknown"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("k top_k"), std::string::npos) << e.what();
    }
    EXPECT_THROW(sampler_types_from_letters("a"), error);
}

TEST(Sampling, ChainFollowsTheSamplerOrder) {
    sampling_params p;
    p.dry_multiplier = 0.8f;
    p.dry_sequence_breakers.clear();  // no vocabulary needed
    p.top_n_sigma = 1.5f;
    p.xtc_probability = 0.5f;
    p.dynatemp_range = 0.2f;
    p.logit_bias = {{1, 1.0f}};
    EXPECT_EQ(make_sampler_chain(p)->describe(),
              "logit-bias -> penalties -> dry -> top-n-sigma -> top-k -> typical -> top-p -> min-p -> xtc -> "
              "temp-ext -> dist");
    p.samplers = sampler_types_from_list("temperature;xtc;top_k");
    EXPECT_EQ(make_sampler_chain(p)->describe(), "logit-bias -> temp-ext -> xtc -> top-k -> dist");
    p.samplers = {};
    EXPECT_EQ(make_sampler_chain(p)->describe(), "logit-bias -> dist");

    // greedy keeps the listed samplers that rewrite logits
    p.samplers = default_sampler_sequence();
    p.temp = 0.0f;
    EXPECT_EQ(make_sampler_chain(p)->describe(), "logit-bias -> penalties -> dry -> greedy");
    p.samplers = sampler_types_from_list("dry;top_k");
    EXPECT_EQ(make_sampler_chain(p)->describe(), "logit-bias -> dry -> greedy");

    // mirostat replaces the chain after the logit bias
    p.temp = 0.7f;
    p.mirostat = 1;
    EXPECT_EQ(make_sampler_chain(p)->describe(), "logit-bias -> temp -> mirostat");
    p.mirostat = 2;
    p.seed = 11;
    EXPECT_EQ(make_sampler_chain(p)->describe(), "logit-bias -> temp -> mirostat-v2");
    EXPECT_EQ(make_sampler_chain(p)->seed(), 11u);
    p.temp = 0.0f;
    EXPECT_EQ(make_sampler_chain(p)->describe(), "logit-bias -> greedy");

    // DRY's breaker strings need the vocabulary to become tokens
    sampling_params dry;
    dry.dry_multiplier = 1.0f;
    EXPECT_THROW(make_sampler_chain(dry), error);
    EXPECT_EQ(make_sampler_chain(dry, &stories_vocab())->describe(),
              "penalties -> dry -> top-k -> typical -> top-p -> min-p -> temp -> dist");
}

TEST(Sampling, ChainOrderFromSamplersChangesTheResult) {
    // XTC before top-k sees every candidate, after it only two
    sampling_params p;
    p.top_k = 2;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.xtc_probability = 1.0f;
    p.xtc_threshold = 0.15f;
    const auto logits = log_of({0.4f, 0.3f, 0.2f, 0.1f});
    // xtc first: .4 .3 .2 reach .15, .4 and .3 go; top-k 2 keeps .2 .1 -> never 0 or 1
    p.samplers = sampler_types_from_list("xtc;top_k;temperature");
    auto a = make_sampler_chain(p);
    // top-k first: .4 .3 renormalized .57 .43 both reach .15: .4 goes -> always 1
    p.samplers = sampler_types_from_list("top_k;xtc;temperature");
    auto b = make_sampler_chain(p);
    for (int i = 0; i < 50; ++i) {
        const token ta = a->sample(logits.data(), 4);
        EXPECT_TRUE(ta == 2 || ta == 3) << ta;
        EXPECT_EQ(b->sample(logits.data(), 4), 1);
    }
}

TEST(Sampling, SeededChainsWithEverySamplerRepeat) {
    const std::vector<float> logits = {0.5f, 0.4f, 0.3f, 0.2f, 0.1f, 0.0f, -0.1f, -0.2f};
    for (const char *which : {"xtc", "dry", "top_n_sigma", "dynatemp", "mirostat1", "mirostat2"}) {
        SCOPED_TRACE(which);
        sampling_params p;
        p.seed = 1234;
        p.top_k = 0;
        p.min_p = 0.0f;
        p.dry_sequence_breakers.clear();
        const std::string w = which;
        if (w == "xtc") p.xtc_probability = 0.5f;
        if (w == "dry") p.dry_multiplier = 1.0f;
        if (w == "top_n_sigma") p.top_n_sigma = 1.0f;
        if (w == "dynatemp") p.dynatemp_range = 0.5f;
        if (w == "mirostat1") p.mirostat = 1;
        if (w == "mirostat2") p.mirostat = 2;
        auto one = make_sampler_chain(p), two = make_sampler_chain(p);
        const auto seq = draw(*one, logits, 60);
        EXPECT_EQ(seq, draw(*two, logits, 60));
        std::map<token, int> seen;
        for (token t : seq) ++seen[t];
        EXPECT_GT(seen.size(), 1u);  // still random
    }
}

TEST(Sampling, NewParametersAreRangeChecked) {
    const auto refused = [](auto edit, const char *name) {
        sampling_params p;
        edit(p);
        try {
            check_sampling_params(p);
            ADD_FAILURE() << name << ": accepted";
        } catch (const error &e) {
            EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        }
        EXPECT_THROW(make_sampler_chain(p), error) << name;
    };
    refused([](sampling_params &p) { p.dynatemp_range = -0.1f; }, "dynatemp_range");
    refused([](sampling_params &p) { p.dynatemp_exponent = std::nanf(""); }, "dynatemp_exponent");
    refused([](sampling_params &p) { p.top_n_sigma = std::nanf(""); }, "top_n_sigma");
    refused([](sampling_params &p) { p.xtc_probability = 1.5f; }, "xtc_probability");
    refused([](sampling_params &p) { p.xtc_threshold = -0.1f; }, "xtc_threshold");
    refused([](sampling_params &p) { p.dry_multiplier = -1.0f; }, "dry_multiplier");
    refused([](sampling_params &p) { p.dry_base = 0.9f; }, "dry_base");
    refused([](sampling_params &p) { p.dry_base = std::numeric_limits<float>::infinity(); }, "dry_base");
    refused([](sampling_params &p) { p.dry_allowed_length = -1; }, "dry_allowed_length");
    refused([](sampling_params &p) { p.dry_penalty_last_n = -2; }, "dry_penalty_last_n");
    refused([](sampling_params &p) { p.dry_sequence_breakers = {"\n", ""}; }, "DRY sequence breaker 1");
    refused([](sampling_params &p) { p.mirostat = 3; }, "mirostat");
    refused([](sampling_params &p) { p.mirostat_tau = -1.0f; }, "mirostat_tau");
    refused([](sampling_params &p) { p.mirostat_eta = std::nanf(""); }, "mirostat_eta");

    sampling_params edges;  // the ends of each range are fine
    edges.dynatemp_range = 0.0f;
    edges.top_n_sigma = -5.0f;
    edges.xtc_probability = 1.0f;
    edges.xtc_threshold = 1.0f;
    edges.dry_base = 1.0f;
    edges.dry_allowed_length = 0;
    edges.dry_penalty_last_n = -1;
    edges.dry_sequence_breakers.clear();
    edges.mirostat = 2;
    edges.mirostat_eta = 0.0f;
    EXPECT_NO_THROW(check_sampling_params(edges));
}

}  // namespace
}  // namespace weft
