// tests/runtime/test_rerank.cpp — a reranker (bert with a classification head, pooling rank)
// against the 2026 reference server: tests/data/rerank/reranker-<TYPE>.json hold the answer of
// `llama-server --reranking` to one POST /v1/rerank for the file `weft synth` writes with the
// recorded flags (tests/data/rerank/record.sh made them). weft builds each query-document pair's
// tokens as the server does, scores them all in one batch and must agree: the same token counts,
// the same order, the scores within the F32 rule (NMSE <= 1e-6; Q8_0: 1e-4). The fixtures are in
// the repository, so these tests need nothing from ../shared.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/embeddings.h"

namespace weft {
namespace {

// The synth flags of record.sh as a spec: the test checks the fixture was made with these.
const char *const recorded_synth_args =
    "--arch bert --reranker --embd 64 --layers 2 --heads 4 --ff 128 --vocab 512 --ctx 128";

synth_spec reranker_spec(dtype type) {
    synth_spec s;
    s.arch = "bert";
    s.reranker = true;
    s.n_embd = 64;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 4;
    s.n_ff = 128;
    s.n_vocab = 512;
    s.n_ctx = 128;
    s.type = type;
    return s;
}

nlohmann::json read_fixture(const std::string &name) {
    const std::string path = std::string(WEFT_SOURCE_DIR) + "/tests/data/rerank/" + name;
    std::ifstream in(path);
    if (!in) throw error(path + ": missing (record it with tests/data/rerank/record.sh)");
    return nlohmann::json::parse(in);
}

inference_params rerank_params(uint32_t n_seq_max) {
    inference_params ip;
    ip.n_ctx = 128;
    ip.n_batch = ip.n_ubatch = 128;
    ip.n_seq_max = n_seq_max;
    ip.n_threads = ip.n_threads_batch = 2;
    return ip;
}

struct rerank_case {
    const char *fixture;
    dtype type;
    double bound;  // NMSE of the scores
};

class RerankReference : public ::testing::TestWithParam<rerank_case> {};

TEST_P(RerankReference, MatchesTheReferenceServer) {
    const rerank_case c = GetParam();
    const nlohmann::json fx = read_fixture(c.fixture);
    ASSERT_EQ(fx.at("synth_args").get<std::string>(), recorded_synth_args);
    test::synth_file f("rerank", reranker_spec(c.type));
    auto m = model::load(f.path());
    ASSERT_TRUE(m->hparams().ranks());
    EXPECT_EQ(m->hparams().n_cls_out, 1);
    EXPECT_EQ(m->hparams().n_output(), 1);

    const std::string query = fx.at("query").get<std::string>();
    const auto documents = fx.at("documents").get<std::vector<std::string>>();
    std::vector<std::vector<token>> sequences;
    int64_t n_tokens = 0;
    for (const std::string &d : documents) {
        sequences.push_back(rerank_tokens(*m, query, d));
        n_tokens += int64_t(sequences.back().size());
        // [CLS] query [SEP] document: the WordPiece vocabulary adds BOS and SEP, no EOS
        EXPECT_EQ(sequences.back().front(), m->vocab().bos());
    }
    const nlohmann::json &answer = fx.at("answer");
    EXPECT_EQ(n_tokens, answer.at("usage").at("prompt_tokens").get<int64_t>());

    inference_context ctx(*m, rerank_params(8));
    const std::vector<std::vector<float>> scores = compute_rank_scores(ctx, sequences);
    ASSERT_EQ(scores.size(), documents.size());
    double err = 0, ref = 0;
    std::vector<size_t> order;
    for (const nlohmann::json &r : answer.at("results")) {
        const size_t index = r.at("index").get<size_t>();
        const double want = r.at("relevance_score").get<double>();
        ASSERT_LT(index, scores.size());
        ASSERT_EQ(scores[index].size(), 1u);
        const double got = scores[index][0];
        err += (got - want) * (got - want);
        ref += want * want;
        order.push_back(index);
        std::printf("[ score    ] document %zu: weft %.7f reference %.7f (relative %.2g)\n", index, got, want,
                    std::abs(got - want) / std::abs(want));
    }
    EXPECT_LE(err / ref, c.bound) << "NMSE of the scores";
    std::printf("[ nmse     ] %s: %.3g\n", c.fixture, err / ref);
    ASSERT_EQ(order.size(), documents.size());
    for (size_t i = 1; i < order.size(); ++i)  // best first, as the reference sorted them
        EXPECT_GE(scores[order[i - 1]][0], scores[order[i]][0]) << "rank " << i;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RerankReference,
                         ::testing::Values(rerank_case{"reranker-F32.json", dtype::f32, 1e-6},
                                           rerank_case{"reranker-Q8_0.json", dtype::q8_0, 1e-4}),
                         [](const auto &info) { return info.param.type == dtype::f32 ? "F32" : "Q8_0"; });

// A document's score does not depend on which others share its decode (or how many fit one): the
// batch of all of them, batches of two and one at a time give the same bits.
TEST(Rerank, ScoresDoNotDependOnTheBatch) {
    test::synth_file f("rerank_batch", reranker_spec(dtype::f32));
    auto m = model::load(f.path());
    const std::vector<std::string> docs = {"a cat is an animal", "the sky", "",
                                           "cats and dogs and more cats"};
    std::vector<std::vector<token>> seqs;
    for (const std::string &d : docs) seqs.push_back(rerank_tokens(*m, "what is a cat", d));
    inference_context all(*m, rerank_params(8));
    inference_context pairs(*m, rerank_params(2));
    inference_context single(*m, rerank_params(1));
    const auto a = compute_rank_scores(all, seqs);
    EXPECT_EQ(compute_rank_scores(pairs, seqs), a);
    EXPECT_EQ(compute_rank_scores(single, seqs), a);
    // and compute_embeddings with pooling rank is the same score
    EXPECT_EQ(compute_embeddings(single, seqs[0], pooling_kind::rank, true).pooled, a[0]);
}

TEST(Rerank, RefusesWhatIsNotRanking) {
    test::synth_file rr("rerank_refuse", reranker_spec(dtype::f32));
    auto m = model::load(rr.path());
    inference_context ctx(*m, rerank_params(1));
    const std::vector<token> tokens = rerank_tokens(*m, "q", "d");
    // a reranker's rows are scores: no other pooling
    EXPECT_THROW(compute_embeddings(ctx, tokens, pooling_kind::mean, false), error);
    // an empty sequence, and one longer than the context
    EXPECT_THROW(compute_rank_scores(ctx, std::vector<std::vector<token>>{{}}), error);
    EXPECT_THROW(compute_rank_scores(ctx, std::vector<std::vector<token>>{std::vector<token>(129, 101)}),
                 error);

    synth_spec plain = reranker_spec(dtype::f32);
    plain.reranker = false;  // an embedding model: mean pooling, no head
    test::synth_file emb("rerank_plain", plain);
    auto e = model::load(emb.path());
    EXPECT_FALSE(e->hparams().ranks());
    inference_context ectx(*e, rerank_params(1));
    EXPECT_THROW(compute_rank_scores(ectx, std::vector<std::vector<token>>{tokens}), error);
    EXPECT_THROW(compute_embeddings(ectx, tokens, pooling_kind::rank, false), error);
    EXPECT_EQ(compute_embeddings(ectx, tokens, pooling_kind::mean, true).pooled.size(), 64u);
}

// A file that says pooling rank but has no classification head is refused with the tensor's name.
TEST(Rerank, PoolingRankWithoutAHeadIsRefused) {
    synth_spec plain = reranker_spec(dtype::f32);
    plain.reranker = false;
    test::synth_file emb("rerank_headless", plain);
    test::temp_file edited("rerank_headless_edited");
    test::gguf_edits e;
    e.set_ints["bert.pooling_type"] = 4;
    test::copy_gguf(emb.path(), edited.path(), e);
    try {
        model::load(edited.path());
        FAIL() << "loaded a reranker without a head";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("cls.output.weight"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace weft
