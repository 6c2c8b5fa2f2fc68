// tests/runtime/test_pipeline.cpp — a model's blocks split between ranks (runtime/pipeline.h): every
// fixture model, on 2 and 3 in-process ranks, gives the logits of one process bit for bit, through
// prompts in several ubatches, KV cache edits and single-token steps.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "../common/fixtures.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/pipeline.h"

namespace weft {
namespace {

inference_params script_params(pipeline_link *link) {
    inference_params p;
    p.n_ctx = 64;
    p.n_batch = 64;
    p.n_ubatch = 4;  // a 10-token prompt is three ubatches: they flow through the ranks together
    p.n_threads = p.n_threads_batch = 1;
    p.type_k = p.type_v = dtype::f32;
    p.pipeline = link;
    return p;
}

// The last decode's n rows of output.
void keep_rows(inference_context &ctx, int32_t n, std::vector<float> &out) {
    EXPECT_EQ(ctx.n_outputs(), n);
    const size_t row = size_t(ctx.model().hparams().n_output());
    for (int32_t i = -n; i < 0; ++i) {
        const float *r = ctx.get_logits_ith(i);
        out.insert(out.end(), r, r + row);
    }
}

// Every row of logits a script of decodes and cache edits produces on rank 0's context.
std::vector<float> run_script(inference_context &ctx) {
    std::vector<float> out;
    const int32_t n_vocab = ctx.n_vocab();
    auto tok = [&](int i) { return token((i * 37 + 11) % n_vocab); };
    const bool causal = ctx.model().hparams().causal_attn;
    batch b;
    if (!causal) {  // an encoder: one ubatch per batch
        for (int i = 0; i < 4; ++i) b.add(tok(i), i, {0}, true);
        EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        keep_rows(ctx, 4, out);
        ctx.kv_clear();
        b.clear();
        for (int i = 0; i < 3; ++i) b.add(tok(i + 5), i, {0}, true);
        EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        keep_rows(ctx, 3, out);
        return out;
    }
    for (int i = 0; i < 10; ++i) b.add(tok(i), i, {0}, true);
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    keep_rows(ctx, 10, out);
    ctx.kv_seq_rm(0, 6, -1);  // the last four again, with other tokens
    b.clear();
    for (int i = 6; i < 10; ++i) b.add(tok(i + 3), i, {0}, i == 9);
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    keep_rows(ctx, 1, out);
    for (int step = 0; step < 2; ++step) {
        b.clear();
        b.add(tok(20 + step), 10 + step, {0}, true);
        EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        keep_rows(ctx, 1, out);
    }
    return out;
}

// The script on n_ranks in-process ranks; with abort_first, rank 0's abort callback stops its first
// decode part way (the other ranks roll it back too, and nobody waits forever).
std::vector<float> run_pipelined(const std::string &path, int n_ranks, bool abort_first = false) {
    const int64_t n_layer = [&] {
        model_params mp;
        return model::load(path, mp)->hparams().n_layer;
    }();
    const std::vector<layer_span> spans = split_layers(n_layer, n_ranks);
    std::vector<std::unique_ptr<pipeline_link>> links = make_local_pipeline(n_ranks);
    std::vector<std::unique_ptr<model>> models;
    for (int r = 0; r < n_ranks; ++r) {
        model_params mp;
        mp.layers = spans[size_t(r)];
        models.push_back(model::load(path, mp));
    }
    // the other ranks wait for rank 0's context, make theirs alike, and follow it
    std::vector<std::thread> stages;
    for (int r = 1; r < n_ranks; ++r)
        stages.emplace_back([&, r] { serve_pipeline_stage(*models[size_t(r)], *links[size_t(r)]); });
    inference_params ip = script_params(links[0].get());
    int polls = 0;
    if (abort_first) ip.abort_callback = [polls]() mutable { return ++polls == 40; };
    std::vector<float> out;
    {
        inference_context ctx(*models[0], ip);
        if (abort_first) {
            batch b;
            for (int i = 0; i < 10; ++i) b.add(token(i + 1), i, {0}, true);
            EXPECT_EQ(ctx.decode(b), decode_aborted);
            EXPECT_EQ(ctx.kv_used_cells(), 0u);
        }
        out = run_script(ctx);
    }  // ends the other ranks' loops
    for (std::thread &t : stages) t.join();
    return out;
}

// Rank 0 aborting a prompt part way: every rank rolls back, the next decodes are as if it never ran.
TEST(Pipeline, AbortOnRankZeroRollsBackEveryRank) {
    WEFT_REQUIRE_FIXTURES();
    const std::string path = test::fixture("models/tiny-llama-F32.gguf");
    std::unique_ptr<model> m = model::load(path);
    inference_context ctx(*m, script_params(nullptr));
    const std::vector<float> alone = run_script(ctx);
    const std::vector<float> piped = run_pipelined(path, 3, true);
    ASSERT_EQ(piped.size(), alone.size());
    EXPECT_EQ(std::memcmp(piped.data(), alone.data(), alone.size() * sizeof(float)), 0);
}

// Cached keys moved (a context shift), then rank 0 aborts while re-rotating them: no rank goes on
// with that decode, the move stays pending everywhere, and the next decode equals one process's.
TEST(Pipeline, ShiftAbortedOnRankZeroStaysPendingOnEveryRank) {
    WEFT_REQUIRE_FIXTURES();
    const std::string path = test::fixture("models/tiny-llama-F32.gguf");
    auto shifted_step = [](inference_context &ctx, const std::function<void()> &before_step) {
        batch b;
        for (int i = 0; i < 10; ++i) b.add(token(i * 7 + 3), i, {0}, false);
        EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        ctx.kv_seq_rm(0, 0, 3);
        ctx.kv_seq_add(0, 3, -1, -3);
        before_step();
        b.clear();
        b.add(token(42), 7, {0}, true);
        EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        const float *r = ctx.get_logits_ith(-1);
        return std::vector<float>(r, r + ctx.n_vocab());
    };
    std::unique_ptr<model> m = model::load(path);
    std::vector<float> alone;
    {
        inference_context ctx(*m, script_params(nullptr));
        alone = shifted_step(ctx, [] {});
    }
    const std::vector<layer_span> spans = split_layers(m->hparams().n_layer, 3);
    std::vector<std::unique_ptr<pipeline_link>> links = make_local_pipeline(3);
    std::vector<std::unique_ptr<model>> models;
    for (const layer_span &s : spans) {
        model_params mp;
        mp.layers = s;
        models.push_back(model::load(path, mp));
    }
    std::vector<std::thread> stages;
    for (int r = 1; r < 3; ++r)
        stages.emplace_back([&, r] { serve_pipeline_stage(*models[size_t(r)], *links[size_t(r)]); });
    bool abort_now = false;
    inference_params ip = script_params(links[0].get());
    ip.abort_callback = [&abort_now] { return abort_now; };
    std::vector<float> piped;
    {
        inference_context ctx(*models[0], ip);
        piped = shifted_step(ctx, [&] {
            abort_now = true;
            batch one;
            one.add(token(42), 7, {0}, true);
            EXPECT_EQ(ctx.decode(one), decode_failed);  // the shift was aborted
            abort_now = false;
        });
    }
    for (std::thread &t : stages) t.join();
    ASSERT_EQ(piped.size(), alone.size());
    EXPECT_EQ(std::memcmp(piped.data(), alone.data(), alone.size() * sizeof(float)), 0);
}

TEST(Pipeline, SplitLayersEvenlyOrByWeights) {
    const std::vector<layer_span> even = split_layers(22, 3);
    ASSERT_EQ(even.size(), 3u);
    EXPECT_EQ(even[0], (layer_span{0, 8}));
    EXPECT_EQ(even[1], (layer_span{8, 15}));
    EXPECT_EQ(even[2], (layer_span{15, 22}));
    const std::vector<double> w{3, 1};
    const std::vector<layer_span> weighted = split_layers(8, 2, w);
    EXPECT_EQ(weighted[0], (layer_span{0, 6}));
    EXPECT_EQ(weighted[1], (layer_span{6, 8}));
    EXPECT_THROW(split_layers(2, 3), error);
    const std::vector<double> one{1};
    EXPECT_THROW(split_layers(8, 2, one), error);
}

TEST(Pipeline, StageLoadsOnlyAValidRange) {
    WEFT_REQUIRE_FIXTURES();
    model_params mp;
    mp.layers = {3, 9};
    try {
        model::load(test::fixture("models/tiny-llama-F32.gguf"), mp);
        FAIL() << "a range past the model's blocks loaded";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("not a range of the model's 4 blocks"), std::string::npos)
            << e.what();
    }
}

// Every fixture model weft runs: 2 and 3 ranks (where it has the blocks) equal one process bit for bit.
TEST(Pipeline, LogitsBitIdenticalToOneProcess) {
    WEFT_REQUIRE_FIXTURES();
    int checked = 0;
    for (const auto &entry : std::filesystem::directory_iterator(test::fixtures_dir() / "models")) {
        const std::filesystem::path &p = entry.path();
        if (p.extension() != ".gguf" || test::fixture_has_unimplemented_types(p)) continue;
        SCOPED_TRACE(p.filename().string());
        std::unique_ptr<model> m = model::load(p.string());
        std::vector<float> alone;
        {
            inference_context ctx(*m, script_params(nullptr));
            alone = run_script(ctx);
        }
        for (int n_ranks : {2, 3}) {
            if (m->hparams().n_layer < n_ranks) continue;
            SCOPED_TRACE(std::to_string(n_ranks) + " ranks");
            const std::vector<float> piped = run_pipelined(p.string(), n_ranks);
            ASSERT_EQ(piped.size(), alone.size());
            EXPECT_EQ(std::memcmp(piped.data(), alone.data(), alone.size() * sizeof(float)), 0);
            ++checked;
        }
    }
    EXPECT_GT(checked, 20);
}

}  // namespace
}  // namespace weft
