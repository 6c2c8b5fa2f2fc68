// tests/serving/test_speculative.cpp — speculative decoding in the engine: greedy output token for
// token what decoding without a draft gives, on every fixture architecture (prompt lookup, the model
// as its own draft, a quantized draft that is sometimes wrong), several slots at once, seeded
// sampling equal to plain sampling seed by seed, the output distribution the target's (a chi-square
// test over many seeds on a 300-token vocabulary), prompt lookup itself, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/decode_helpers.h"
#include "common/fixtures.h"
#include "model/model_test_util.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/batch.h"
#include "weft/runtime/context.h"
#include "weft/serving/engine.h"
#include "weft/serving/speculative.h"

namespace weft::serving {
namespace {

engine_params params_with(speculative_params sp, int32_t n_slots = 1, uint32_t n_ctx = 512) {
    engine_params ep;
    ep.n_slots = n_slots;
    ep.context.n_ctx = n_ctx * uint32_t(n_slots);
    ep.context.n_threads = ep.context.n_threads_batch = 1;  // tokens, not threads, are checked here
    ep.speculative = sp;
    return ep;
}

completion run(const model &m, const speculative_params &sp, const std::vector<token> &prompt, int32_t n,
               sampling_params sampling) {
    engine eng(m, params_with(sp));
    request r;
    r.prompt = prompt;
    r.max_tokens = n;
    r.sampling = sampling;
    r.ignore_eos = true;
    return eng.generate(std::move(r), [](const event &) { return true; });
}

sampling_params greedy() {
    sampling_params s;
    s.temp = 0.0f;
    return s;
}

speculative_params lookup(int32_t n) {
    speculative_params sp;
    sp.lookup_ngram = n;
    sp.n_max = 8;
    return sp;
}

speculative_params with_draft(const model &d, int32_t n_max = 4) {
    speculative_params sp;
    sp.draft = &d;
    sp.n_max = n_max;
    sp.p_min = 0.0f;  // draft every time: as many verifications as possible
    return sp;
}

std::vector<token> prompt_of(const model &m) {
    std::vector<token> p = m.vocab().tokenize("Once upon a time there was a little", true, true);
    if (p.empty()) p.push_back(0);
    return p;
}

// Plain decoding, prompt lookup and self-drafting all give the same greedy tokens; lookup and
// self-drafting do verify drafts (and self-drafting keeps every one).
void expect_same_greedy_tokens(const model &m, const model *other_draft = nullptr) {
    const std::vector<token> prompt = prompt_of(m);
    const completion plain = run(m, {}, prompt, 40, greedy());
    ASSERT_EQ(plain.tokens.size(), 40u) << plain.error;
    const completion looked = run(m, lookup(1), prompt, 40, greedy());
    EXPECT_EQ(test::generated_ids(looked), test::generated_ids(plain)) << m.path() << ": prompt lookup";
    const completion self = run(m, with_draft(m), prompt, 40, greedy());
    EXPECT_EQ(test::generated_ids(self), test::generated_ids(plain))
        << m.path() << ": the model as its own draft";
    EXPECT_GT(self.n_drafted, 0) << m.path();
    EXPECT_EQ(self.n_draft_accepted, self.n_drafted) << m.path() << ": a greedy self-draft is always right";
    if (other_draft) {
        const completion other = run(m, with_draft(*other_draft), prompt, 40, greedy());
        EXPECT_EQ(test::generated_ids(other), test::generated_ids(plain))
            << m.path() << ": draft " << other_draft->path();
        EXPECT_GT(other.n_drafted, 0);
    }
}

TEST(Speculative, GreedyTokensUnchangedOnSyntheticModels) {
    for (const dtype type : {dtype::f32, dtype::q8_0}) {
        synth_spec s;
        s.type = type;
        test::synth_file f(std::string("spec-") + type_name(type), s);
        const auto m = model::load(f.path());
        expect_same_greedy_tokens(*m);
    }
}

// Every fixture architecture, F32 with its Q8_0 file as a second draft (same vocabulary, other
// numbers: some drafts are rejected) and the Q8_0 file alone.
TEST(Speculative, GreedyTokensUnchangedOnEveryFixtureArchitecture) {
    WEFT_REQUIRE_FIXTURES();
    for (const std::string arch :
         {"llama", "llama-moe", "qwen2", "qwen2moe", "gemma", "gemma2", "phi2", "phi3", "phi3-swa", "granite",
          "starcoder2", "olmo2", "command-r", "deepseek2"}) {
        SCOPED_TRACE(arch);
        const auto f32 = model::load(test::fixture("models/tiny-" + arch + "-F32.gguf"));
        const auto q8 = model::load(test::fixture("models/tiny-" + arch + "-Q8_0.gguf"));
        expect_same_greedy_tokens(*f32, q8.get());
        expect_same_greedy_tokens(*q8);
    }
}

// Several slots drafting and verifying in the same batches: each request gets its solo tokens.
TEST(Speculative, ConcurrentSlotsGetTheirSoloTokens) {
    synth_spec s;
    test::synth_file target_file("spec-slots-target", s);
    s.type = dtype::q8_0;
    test::synth_file draft_file("spec-slots-draft", s);
    const auto target = model::load(target_file.path());
    const auto draft = model::load(draft_file.path());
    const std::vector<std::string> prompts = {"Once upon a time", "The cat sat", "abc abc abc abc", "Lily"};
    std::vector<std::vector<token>> solo;
    for (const auto &p : prompts)
        solo.push_back(
            test::generated_ids(run(*target, {}, target->vocab().tokenize(p, true, true), 30, greedy())));
    for (const speculative_params &sp : {lookup(2), with_draft(*draft, 6)}) {
        engine eng(*target, params_with(sp, 4));
        std::vector<std::shared_ptr<job>> jobs;
        for (const auto &p : prompts) {
            request r;
            r.prompt = target->vocab().tokenize(p, true, true);
            r.max_tokens = 30;
            r.sampling = greedy();
            r.ignore_eos = true;
            jobs.push_back(eng.submit(std::move(r)));
        }
        while (eng.step()) {
        }
        for (size_t i = 0; i < jobs.size(); ++i) {
            ASSERT_TRUE(jobs[i]->finished());
            EXPECT_EQ(test::generated_ids(jobs[i]->result()), solo[i]) << prompts[i];
        }
        EXPECT_GT(eng.stats().draft_tokens, 0u);
    }
}

// A batch too small for every slot's draft (the slots take turns), a slot cancelled at several points
// of it, and the next request in that slot: every finished request still has its solo tokens.
TEST(Speculative, SmallBatchesAndCancellationKeepTokensExact) {
    synth_spec s;
    test::synth_file target_file("spec-small-batch", s);
    const auto target = model::load(target_file.path());
    const std::vector<std::string> prompts = {"abc abc abc", "The cat sat", "Lily and Lily", "xyz xyz"};
    std::vector<std::vector<token>> solo;
    for (const auto &p : prompts)
        solo.push_back(
            test::generated_ids(run(*target, {}, target->vocab().tokenize(p, true, true), 20, greedy())));
    for (const speculative_params &sp : {lookup(1), with_draft(*target, 6)}) {
        for (int cancel_after = 3; cancel_after <= 9; ++cancel_after) {  // each slot skipped at some point
            engine_params ep = params_with(sp, 3);
            ep.context.n_batch = 5;  // fewer than the slots' pending tokens and drafts together
            ep.context.n_ubatch = 5;
            engine eng(*target, ep);
            auto submit = [&](size_t i) {
                request r;
                r.prompt = target->vocab().tokenize(prompts[i], true, true);
                r.max_tokens = 20;
                r.sampling = greedy();
                r.ignore_eos = true;
                return eng.submit(std::move(r));
            };
            std::vector<std::shared_ptr<job>> jobs = {submit(0), submit(1), submit(2)};
            for (int i = 0; i < cancel_after; ++i) eng.step();
            jobs[1]->cancel();          // mid-generation, perhaps with a draft the batch had no room for
            jobs.push_back(submit(3));  // takes the cancelled job's slot
            while (eng.step()) {
            }
            EXPECT_EQ(jobs[1]->result().finish, finish_reason::cancelled);
            for (size_t i : {size_t(0), size_t(2), size_t(3)}) {
                ASSERT_TRUE(jobs[i]->finished());
                EXPECT_EQ(test::generated_ids(jobs[i]->result()), solo[i])
                    << prompts[i] << ", cancel after " << cancel_after;
            }
        }
    }
}

// The sampler chain runs over the verified rows in the order plain decoding runs it: with a seed,
// the sampled tokens are the same seed by seed, with any draft.
TEST(Speculative, SeededSamplingUnchanged) {
    synth_spec s;
    test::synth_file target_file("spec-seeded-target", s);
    s.seed = 7;
    test::synth_file draft_file("spec-seeded-draft", s);
    const auto target = model::load(target_file.path());
    const auto draft = model::load(draft_file.path());
    for (uint32_t seed = 0; seed < 8; ++seed) {
        sampling_params sampling;
        sampling.seed = seed;
        sampling.temp = 1.0f;
        sampling.penalty_repeat = 1.1f;  // state that must advance exactly as in plain decoding
        const std::vector<token> prompt = prompt_of(*target);
        const auto plain = test::generated_ids(run(*target, {}, prompt, 24, sampling));
        EXPECT_EQ(test::generated_ids(run(*target, with_draft(*draft), prompt, 24, sampling)), plain) << seed;
        EXPECT_EQ(test::generated_ids(run(*target, with_draft(*target), prompt, 24, sampling)), plain)
            << seed;
        EXPECT_EQ(test::generated_ids(run(*target, lookup(1), prompt, 24, sampling)), plain) << seed;
    }
}

// The distribution of a verified token is the target's: over many seeds, the second generated token
// (the first one a verification produces: a draft of one token follows the first) is counted and
// compared with the target's own probabilities given the prompt and the first token, by a
// chi-square test (bins of expected count >= 5, the rest pooled).
TEST(Speculative, VerifiedTokensFollowTheTargetsDistribution) {
    synth_spec s;
    test::synth_file target_file("spec-dist-target", s);
    s.seed = 11;
    test::synth_file draft_file("spec-dist-draft", s);
    const auto target = model::load(target_file.path());
    const auto draft = model::load(draft_file.path());
    const std::vector<token> prompt = prompt_of(*target);
    const int32_t n_vocab = target->vocab().n_tokens();
    const float temp = 2.0f;  // a flatter distribution: more bins

    // p(x | prompt, first) for every first token met, from a plain context
    inference_params ip;
    ip.n_ctx = 256;
    inference_context ctx(*target, ip);
    std::map<token, std::vector<double>> next_given;
    auto probabilities_after = [&](token first) -> const std::vector<double> & {
        auto it = next_given.find(first);
        if (it != next_given.end()) return it->second;
        ctx.kv_seq_rm(-1, -1, -1);
        std::vector<token> toks = prompt;
        toks.push_back(first);
        EXPECT_EQ(ctx.decode(batch::from_tokens(toks)), decode_ok);
        const float *logits = ctx.get_logits_ith(-1);
        double max_l = -1e30, sum = 0.0;
        for (int32_t i = 0; i < n_vocab; ++i) max_l = std::max(max_l, double(logits[i]) / temp);
        std::vector<double> p(static_cast<size_t>(n_vocab));
        for (int32_t i = 0; i < n_vocab; ++i)
            sum += p[size_t(i)] = std::exp(double(logits[i]) / temp - max_l);
        for (double &x : p) x /= sum;
        return next_given.emplace(first, std::move(p)).first->second;
    };

    const int n_runs = 1000;  // per draft
    std::vector<double> expected(size_t(n_vocab), 0.0), observed(size_t(n_vocab), 0.0);
    int64_t drafted = 0, accepted = 0;
    // another model's guesses (mostly wrong) and the target's own most likely token (often right)
    uint32_t seed = 1000;  // every run its own seed: the same seed gives the same tokens
    for (const model *d : {draft.get(), target.get()}) {
        engine eng(*target, params_with(with_draft(*d, 1)));
        for (int run_i = 0; run_i < n_runs; ++run_i) {
            request r;
            r.prompt = prompt;
            r.max_tokens = 3;
            r.ignore_eos = true;
            r.sampling.seed = seed++;
            r.sampling.temp = temp;
            r.sampling.top_k = 0;
            r.sampling.top_p = 1.0f;
            r.sampling.min_p = 0.0f;
            const completion c = eng.generate(std::move(r), [](const event &) { return true; });
            ASSERT_GE(c.tokens.size(), 2u);
            drafted += c.n_drafted;
            accepted += c.n_draft_accepted;
            const std::vector<double> &p = probabilities_after(c.tokens[0].id);
            for (int32_t i = 0; i < n_vocab; ++i) expected[size_t(i)] += p[size_t(i)];
            observed[size_t(c.tokens[1].id)] += 1.0;
        }
    }
    EXPECT_GT(drafted, n_runs);  // the second token came through a verification
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, drafted);  // and the draft was sometimes wrong
    double chi2 = 0.0, pooled_e = 0.0, pooled_o = 0.0;
    int bins = 0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (expected[size_t(i)] >= 5.0) {
            const double d = observed[size_t(i)] - expected[size_t(i)];
            chi2 += d * d / expected[size_t(i)];
            ++bins;
        } else {
            pooled_e += expected[size_t(i)];
            pooled_o += observed[size_t(i)];
        }
    }
    if (pooled_e > 0.0) {
        chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        ++bins;
    }
    ASSERT_GE(bins, 5);
    // the 0.999 quantile of chi-square with k = bins - 1 degrees of freedom (Wilson-Hilferty)
    const double k = double(bins - 1), z = 3.09;
    const double limit = k * std::pow(1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k)), 3.0);
    EXPECT_LT(chi2, limit) << bins << " bins";
    std::printf("chi-square %.1f over %d bins (0.999 quantile %.1f); %lld of %lld drafts accepted\n", chi2,
                bins, limit, (long long)accepted, (long long)drafted);
}

TEST(Speculative, PromptLookupDraftsWhatFollowedTheLatestMatch) {
    const std::vector<token> h = {1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 2, 3};
    EXPECT_EQ(lookup_draft(h, 2, 8), (std::vector<token>{7, 8, 2, 3}));  // the latest earlier "2 3"
    EXPECT_EQ(lookup_draft(h, 2, 1), (std::vector<token>{7}));
    EXPECT_EQ(lookup_draft(h, 3, 8), (std::vector<token>{}));  // "8 2 3" never came before
    EXPECT_EQ(lookup_draft(h, 1, 3), (std::vector<token>{7, 8, 2}));
    EXPECT_TRUE(lookup_draft({}, 2, 8).empty());
    EXPECT_TRUE(lookup_draft(h, 0, 8).empty());
}

TEST(Speculative, DraftWithAnotherVocabularyIsAClearError) {
    synth_spec s;
    test::synth_file target_file("spec-vocab-target", s);
    s.n_vocab = 320;
    test::synth_file draft_file("spec-vocab-draft", s);
    const auto target = model::load(target_file.path());
    const auto draft = model::load(draft_file.path());
    try {
        engine eng(*target, params_with(with_draft(*draft)));
        FAIL() << "a draft with another vocabulary was accepted";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("vocabulary differs"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("320 tokens"), std::string::npos) << e.what();
    }
}

TEST(Speculative, BadParametersAreErrors) {
    speculative_params sp = lookup(2);
    sp.n_min = 9;  // above n_max 8
    EXPECT_THROW(check_speculative_params(sp), error);
    sp = lookup(2);
    sp.p_min = 1.5f;
    EXPECT_THROW(check_speculative_params(sp), error);
    sp = lookup(-1);
    EXPECT_THROW(check_speculative_params(sp), error);
}

}  // namespace
}  // namespace weft::serving
