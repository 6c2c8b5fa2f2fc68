// tests/runtime/test_reference_rows.cpp — deeper Q8_0 models, every scored row vs the reference engine.
//
// tests/data/reference-rows holds 4-layer random-weight Q8_0 models and the log-probabilities the
// reference engine computed on two chunks of 256 tokens of tests/data/simple-stories.txt
// (`llama-perplexity --kl-divergence-base`, its own file format: the README there has the commands),
// for the Q8_0 file and for the F32 file it was quantized from. Each chunk is decoded as the
// perplexity tool does (the first token replaced by BOS), and weft's Q8_0 rows must be no further
// from the reference's F32 rows than the reference's own Q8_0 rows are: NMSE per row over the tokens
// the F32 file keeps (within 16 nats of the top one), the mean within a factor of 1 + 1e-3, the
// worst row within 5% (see the test). These models' weights are large (the gemma's most: one activation
// rounded to another integer moves its later rows by NMSE 1e-5 against the reference's Q8_0), so a product
// that rounded its activations or scales otherwise would show here. weft sums a q8_0 product in
// another order than the reference (one exact integer sum and one fma per block, interleaved.h), so
// its rows are not the reference's Q8_0 rows bit for bit: they differ from them by ~1e-5 (gemma), as
// far as that order moves them, and are printed beside.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft {
namespace {

std::string data_path(const std::string &name) {
    std::string path = WEFT_SOURCE_DIR;  // appended, not `+`: GCC 12 at -O1 reports a false -Warray-bounds
    path += "/tests/data/reference-rows/";
    path += name;
    return path;
}

// A --kl-divergence-base file of the reference engine: "_logits_", n_ctx, n_vocab, n_chunk (int32),
// n_ctx * n_chunk tokens, then per scored position 2 * ((n_vocab + 1) / 2) + 4 uint16: the step and
// the lowest log-probability (floats), then n_vocab codes, log p = lowest + code * step (0: clipped).
struct reference_rows {
    int32_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
    std::vector<token> tokens;
    std::vector<std::vector<uint16_t>> rows;
};

reference_rows read_rows(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    reference_rows r;
    char magic[8] = {};
    in.read(magic, sizeof magic);
    EXPECT_EQ(std::string(magic, 8), "_logits_") << path;
    int32_t head[3] = {};
    in.read(reinterpret_cast<char *>(head), sizeof head);
    r.n_ctx = head[0];
    r.n_vocab = head[1];
    r.n_chunk = head[2];
    r.tokens.resize(size_t(r.n_ctx) * size_t(r.n_chunk));
    in.read(reinterpret_cast<char *>(r.tokens.data()), std::streamsize(r.tokens.size() * sizeof(token)));
    const size_t per_row = size_t(2 * ((r.n_vocab + 1) / 2) + 4);
    std::vector<uint16_t> row(per_row);
    while (in.read(reinterpret_cast<char *>(row.data()), std::streamsize(per_row * sizeof(uint16_t))))
        r.rows.push_back(row);
    return r;
}

// The log-probabilities of a recorded row (a clipped token at the row's lowest).
std::vector<float> log_probs(const std::vector<uint16_t> &row, int32_t n_vocab) {
    float step = 0, lowest = 0;
    std::memcpy(&step, row.data(), sizeof step);
    std::memcpy(&lowest, row.data() + 2, sizeof lowest);
    std::vector<float> out(static_cast<size_t>(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) out[size_t(i)] = lowest + float(row[size_t(4 + i)]) * step;
    return out;
}

// NMSE of the log-softmax of `logits` against a reference row, over its kept tokens.
double row_nmse(const float *logits, const std::vector<uint16_t> &ref, int32_t n_vocab) {
    float step = 0, lowest = 0;
    std::memcpy(&step, ref.data(), sizeof step);
    std::memcpy(&lowest, ref.data() + 2, sizeof lowest);
    const float max_logit = *std::max_element(logits, logits + n_vocab);
    double sum_exp = 0;
    for (int32_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(double(logits[i]) - max_logit);
    const double log_sum = std::log(sum_exp);
    double num = 0, den = 0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        const uint16_t code = ref[size_t(4 + i)];
        if (code == 0) continue;
        const double want = double(lowest) + double(code) * double(step);
        const double got = double(logits[i]) - max_logit - log_sum;
        num += (got - want) * (got - want);
        den += want * want;
    }
    return num / den;
}

struct row_distances {
    double worst = 0, sum = 0;
    size_t n = 0;
    void add(double e) {
        worst = std::max(worst, e);
        sum += e;
        ++n;
    }
    double mean() const { return n ? sum / double(n) : 0.0; }
};

class DeepQ8Models : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepQ8Models, RowsAreAsCloseToTheReferenceF32AsTheReferenceQ8_0) {
    const std::string name = GetParam();
    const reference_rows ref_q8 = read_rows(data_path(name + "-Q8_0.kld"));
    const reference_rows ref_f32 = read_rows(data_path(name + "-F32.kld"));
    ASSERT_GT(ref_q8.n_chunk, 0);
    ASSERT_EQ(ref_f32.tokens, ref_q8.tokens);
    ASSERT_EQ(ref_f32.rows.size(), ref_q8.rows.size());
    auto m = model::load(data_path(name + "-Q8_0.gguf"));
    ASSERT_EQ(m->hparams().n_vocab, ref_q8.n_vocab);
    const int32_t n_vocab = ref_q8.n_vocab;
    inference_params ip;
    ip.n_ctx = uint32_t(ref_q8.n_ctx);
    ip.n_threads = ip.n_threads_batch = 2;
    inference_context ctx(*m, ip);
    const size_t n_ctx = size_t(ref_q8.n_ctx), first = n_ctx / 2, per_chunk = n_ctx - 1 - first;
    ASSERT_EQ(ref_q8.rows.size(), per_chunk * size_t(ref_q8.n_chunk));
    row_distances weft_from_f32, ref_from_f32, weft_from_q8;
    for (int32_t c = 0; c < ref_q8.n_chunk; ++c) {
        ctx.kv_clear();
        batch b;
        for (size_t k = 0; k < n_ctx; ++k)
            b.add(k == 0 ? m->vocab().bos() : ref_q8.tokens[size_t(c) * n_ctx + k], llm_pos(k), {0},
                  k >= first);
        ASSERT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        for (size_t k = first; k + 1 < n_ctx; ++k) {
            const size_t row = size_t(c) * per_chunk + (k - first);
            const float *logits = ctx.get_logits_ith(int32_t(k));
            weft_from_f32.add(row_nmse(logits, ref_f32.rows[row], n_vocab));
            ref_from_f32.add(
                row_nmse(log_probs(ref_q8.rows[row], n_vocab).data(), ref_f32.rows[row], n_vocab));
            weft_from_q8.add(row_nmse(logits, ref_q8.rows[row], n_vocab));
        }
    }
    // the mean within 1 + 1e-3 (weft's is below the reference's: 7.025e-4 against 7.054e-4, 7.774e-7
    // against 7.786e-7); the worst of the 254 rows within 5%: one row's distance moves by a few
    // percent with the order of the sums (2.0% and 3.4% above the reference's worst, measured)
    EXPECT_LE(weft_from_f32.mean(), ref_from_f32.mean() * (1 + 1e-3) + 1e-9)
        << "mean row distance from the reference's F32";
    EXPECT_LE(weft_from_f32.worst, ref_from_f32.worst * 1.05)
        << "worst row distance from the reference's F32";
    std::printf(
        "[ nmse     ] %s from the reference's F32: weft mean %.4g worst %.4g, reference Q8_0 mean %.4g worst "
        "%.4g | weft vs reference Q8_0 mean %.3g worst %.3g\n",
        name.c_str(), weft_from_f32.mean(), weft_from_f32.worst, ref_from_f32.mean(), ref_from_f32.worst,
        weft_from_q8.mean(), weft_from_q8.worst);
}

INSTANTIATE_TEST_SUITE_P(Recorded, DeepQ8Models, ::testing::Values("deep-gemma", "deep-olmo2"),
                         [](const auto &info) {
                             std::string s = info.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

}  // namespace
}  // namespace weft
