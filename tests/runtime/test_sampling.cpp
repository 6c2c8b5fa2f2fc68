// tests/runtime/test_sampling.cpp — samplers on hand-computed cases, chain order, seeds, clones, dist.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "weft/core/error.h"
#include "weft/runtime/sampling.h"

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

}  // namespace
}  // namespace weft
