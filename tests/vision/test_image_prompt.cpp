// tests/vision/test_image_prompt.cpp — image embeddings in a prompt: rows enter the KV cache at their
// positions (equal to tokens fed as embeddings, across ubatch sizes), the engine's requests with
// images, and `weft run --mmproj --image`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/run_weft.h"
#include "vision/vision_test_util.h"
#include "weft/model/model.h"
#include "weft/model/synth.h"
#include "weft/runtime/context.h"
#include "weft/serving/engine.h"
#include "weft/vision/clip.h"
#include "weft/vision/media_prompt.h"

namespace {

namespace vision = weft::vision;
using weft::test::vision_temp_path;

constexpr int64_t n_embd = 48;

class ImagePrompt : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        llm_path = vision_temp_path("prompt-llm.gguf");
        mmproj_path = vision_temp_path("prompt-mmproj.gguf");
        weft::synth_write(weft::test::tiny_text_spec(n_embd), llm_path);
        vision::clip_synth_write(weft::test::tiny_clip_spec(n_embd), mmproj_path);
        llm = weft::model::load(llm_path).release();
        proj = vision::clip_model::load(mmproj_path).release();
    }
    static void TearDownTestSuite() {
        delete llm;
        delete proj;
        std::filesystem::remove(llm_path);
        std::filesystem::remove(mmproj_path);
    }

    static weft::inference_params params(uint32_t n_ubatch) {
        weft::inference_params p;
        p.n_ctx = 256;
        p.n_batch = 256;
        p.n_ubatch = n_ubatch;
        p.n_threads = p.n_threads_batch = 2;
        p.type_k = p.type_v = weft::dtype::f32;
        return p;
    }
    // Decodes pieces in order (tokens, or embedding rows when the piece's tokens are empty) and
    // returns the last row's logits.
    struct piece {
        std::vector<weft::token> tokens;
        std::vector<float> embd;
    };
    static std::vector<float> logits_after(const std::vector<piece> &pieces, uint32_t n_ubatch) {
        weft::inference_context ctx(*llm, params(n_ubatch));
        for (const piece &p : pieces) {
            const weft::batch b = p.tokens.empty()
                                      ? weft::batch::from_embeddings(p.embd, int32_t(p.embd.size() / n_embd))
                                      : weft::batch::from_tokens(p.tokens);
            EXPECT_EQ(ctx.decode(b), weft::decode_ok) << ctx.last_error();
        }
        const float *l = ctx.get_logits_ith(-1);
        return std::vector<float>(l, l + ctx.n_vocab());
    }
    static double nmse(const std::vector<float> &a, const std::vector<float> &b) {
        double err = 0.0, norm = 0.0;
        for (size_t i = 0; i < a.size(); ++i) {
            err += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
            norm += double(b[i]) * double(b[i]);
        }
        return err / norm;
    }
    static std::vector<float> image_rows(uint32_t seed) {
        return proj->encode_image(weft::test::random_image(40, 30, seed), 2);
    }

    // A request of text, an image's rows (or the image last) and text, greedy, one token with its
    // log-probabilities; and the logits of the same prompt decoded by hand.
    static std::pair<weft::serving::request, std::vector<float>> image_request(const std::vector<float> &rows,
                                                                               bool image_last) {
        const std::string text = image_last ? "Look: " + std::string(vision::image_marker)
                                            : "USER: " + std::string(vision::image_marker) + " What is it?";
        const int32_t n = 16;
        vision::marked_prompt mp =
            vision::tokenize_with_markers(llm->vocab(), text, std::span<const int32_t>(&n, 1), true);
        weft::serving::request r;
        r.prompt = mp.tokens;
        r.media.push_back({mp.image_at[0], n, rows});
        r.max_tokens = 1;
        r.sampling.temp = 0.0f;
        r.logprobs = true;
        r.n_probs = 3;
        // the same prompt decoded by hand: tokens, rows, tokens
        std::vector<piece> pieces = {
            {{mp.tokens.begin(), mp.tokens.begin() + std::ptrdiff_t(mp.image_at[0])}, {}}, {{}, rows}};
        if (!image_last)
            pieces.push_back({{mp.tokens.begin() + std::ptrdiff_t(mp.image_at[0]) + n, mp.tokens.end()}, {}});
        return std::pair{r, logits_after(pieces, 512)};
    }

    static inline std::string llm_path, mmproj_path;
    static inline weft::model *llm = nullptr;
    static inline vision::clip_model *proj = nullptr;
};

TEST_F(ImagePrompt, EmbeddingRowsTakeTheTokensPositions) {
    // the token embeddings of some tokens, fed as an embedding batch between token batches, give the
    // logits of the tokens themselves: embedding rows go to the positions after the cached tokens
    const std::vector<weft::token> all = {1, 40, 77, 150, 9, 230, 31};
    const weft::tensor *tok_embd = llm->weights().tok_embd;
    ASSERT_EQ(tok_embd->type, weft::dtype::f32);
    std::vector<float> rows;
    for (size_t i = 2; i < 5; ++i) {
        const float *r = static_cast<const float *>(tok_embd->data) + size_t(all[i]) * n_embd;
        rows.insert(rows.end(), r, r + n_embd);
    }
    const std::vector<float> want = logits_after({{all, {}}}, 512);
    const std::vector<float> got = logits_after(
        {{{all.begin(), all.begin() + 2}, {}}, {{}, rows}, {{all.begin() + 5, all.end()}, {}}}, 512);
    EXPECT_LE(nmse(got, want), 1e-12);
    // and out of place they are not the same (the comparison can fail)
    const std::vector<float> shifted = logits_after(
        {{{all.begin(), all.begin() + 1}, {}}, {{}, rows}, {{all.begin() + 5, all.end()}, {}}}, 512);
    EXPECT_GT(nmse(shifted, want), 1e-6);
}

TEST_F(ImagePrompt, TextImageTextEqualAcrossUbatchSizes) {
    const std::vector<float> img = image_rows(1);
    ASSERT_EQ(img.size(), size_t(16 * n_embd));
    const std::vector<piece> pieces = {{{1, 50, 60}, {}}, {{}, img}, {{70, 80, 90, 100}, {}}};
    const std::vector<float> big = logits_after(pieces, 256);
    for (uint32_t n_ubatch : {1u, 5u, 16u})
        EXPECT_LE(nmse(logits_after(pieces, n_ubatch), big), 1e-10) << n_ubatch;
}

// The first generated token's log-probabilities from the engine against log-softmax of the logits.
void expect_same_first_token(const weft::serving::completion &done, const std::vector<float> &logits) {
    ASSERT_FALSE(done.tokens.empty()) << done.error;
    const auto best = std::max_element(logits.begin(), logits.end());
    EXPECT_EQ(done.tokens[0].id, weft::token(best - logits.begin()));
    double sum = 0.0;
    for (float l : logits) sum += std::exp(double(l) - double(*best));
    const double want = 0.0 - std::log(sum);
    EXPECT_NEAR(done.tokens[0].logprob, want, 1e-4);
    ASSERT_EQ(done.tokens[0].top.size(), 3u);
}

TEST_F(ImagePrompt, EngineDecodesImagesAtTheirPlaceholders) {
    weft::serving::engine_params ep;
    ep.context = params(512);
    weft::serving::engine eng(*llm, ep);
    for (bool image_last : {false, true}) {
        // two images one after the other in the same slot: the second reuses nothing of the first
        for (uint32_t seed : {3u, 4u}) {
            auto [r, want] = image_request(image_rows(seed), image_last);
            const size_t image_at = r.media[0].at;
            const weft::serving::completion done =
                eng.generate(std::move(r), [](const auto &) { return true; });
            EXPECT_LE(size_t(done.n_cached), image_at) << "cells reused past the text before the image";
            expect_same_first_token(done, want);
        }
    }
    // a placeholder without its rows, or rows of the wrong width, are refused before anything runs
    weft::serving::request bad;
    bad.prompt = {1, weft::token_null, 5};
    EXPECT_THROW(eng.submit(bad), weft::error);
    bad.media.push_back({1, 1, std::vector<float>(n_embd - 1)});
    EXPECT_THROW(eng.submit(bad), weft::error);
}

TEST_F(ImagePrompt, TwoSlotsDecodeTheirImagesSideBySide) {
    weft::serving::engine_params ep;
    ep.n_slots = 2;
    ep.context = params(512);
    weft::serving::engine eng(*llm, ep);
    auto [r1, want1] = image_request(image_rows(5), false);
    auto [r2, want2] = image_request(image_rows(6), true);
    const auto j1 = eng.submit(std::move(r1)), j2 = eng.submit(std::move(r2));
    for (int steps = 0; (!j1->finished() || !j2->finished()) && steps < 100; ++steps) eng.step();
    expect_same_first_token(j1->result(), want1);
    expect_same_first_token(j2->result(), want2);
    EXPECT_NE(j1->result().slot, j2->result().slot);
}

TEST(VisionCli, RunWithAnImage) {
    const std::string llm = vision_temp_path("cli-llm.gguf"), mmproj = vision_temp_path("cli-mmproj.gguf"),
                      wrong = vision_temp_path("cli-wrong.gguf"), pic = vision_temp_path("cli-pic.bmp"),
                      bad = vision_temp_path("cli-bad.png");
    const std::string weft = weft::test::shell_quote(WEFT_BINARY);
    auto q = weft::test::shell_quote;
    ASSERT_EQ(weft::test::run_shell(weft + " synth " + q(llm) +
                                    " --arch llama --embd 64 --layers 1 --heads 4 "
                                    "--kv-heads 2 --ff 96 --vocab 300")
                  .status,
              0);
    const weft::test::run_result synth = weft::test::run_shell(
        weft + " synth " + q(mmproj) +
        " --arch clip --embd 32 --layers 3 --heads 4 --ff 64 --image-size 28 --patch-size 7 --proj-embd 64");
    ASSERT_EQ(synth.status, 0) << synth.err;
    EXPECT_NE(synth.err.find("clip mlp"), std::string::npos) << synth.err;
    ASSERT_EQ(weft::test::run_shell(weft + " synth " + q(wrong) +
                                    " --arch clip --embd 32 --layers 2 --heads 4 --ff 64 --image-size 28 "
                                    "--patch-size 7 --proj-embd 32")
                  .status,
              0);
    std::ofstream(pic, std::ios::binary) << weft::test::bmp_bytes(weft::test::random_image(50, 40, 9));
    std::ofstream(bad, std::ios::binary) << "\x89PNG\r\n\x1a\n not really";

    const std::string run = weft + " run -m " + q(llm) + " -n 4 --temp 0 ";
    const weft::test::run_result ok = weft::test::run_shell(run + "--mmproj " + q(mmproj) + " --image " +
                                                            q(pic) + " -p 'Describe this image'");
    EXPECT_EQ(ok.status, 0) << ok.err;
    EXPECT_NE(ok.err.find("16 tokens, encoded"), std::string::npos) << ok.err;
    // the marker places the image; two images need two markers
    const weft::test::run_result marked =
        weft::test::run_shell(run + "--mmproj " + q(mmproj) + " --image " + q(pic) + " --image " + q(pic) +
                              " -p 'A <__image__> B'");
    EXPECT_NE(marked.status, 0);
    EXPECT_NE(marked.err.find("1 places"), std::string::npos) << marked.err;

    const weft::test::run_result no_mmproj = weft::test::run_shell(run + "--image " + q(pic) + " -p x");
    EXPECT_NE(no_mmproj.status, 0);
    EXPECT_NE(no_mmproj.err.find("--mmproj"), std::string::npos) << no_mmproj.err;
    const weft::test::run_result mismatch =
        weft::test::run_shell(run + "--mmproj " + q(wrong) + " --image " + q(pic) + " -p x");
    EXPECT_NE(mismatch.status, 0);
    EXPECT_NE(mismatch.err.find("output width is 32"), std::string::npos) << mismatch.err;
    const weft::test::run_result corrupt =
        weft::test::run_shell(run + "--mmproj " + q(mmproj) + " --image " + q(bad) + " -p x");
    EXPECT_NE(corrupt.status, 0);
    EXPECT_NE(corrupt.err.find(bad), std::string::npos) << corrupt.err;
    for (const std::string &f : {llm, mmproj, wrong, pic, bad}) std::filesystem::remove(f);
}

}  // namespace
