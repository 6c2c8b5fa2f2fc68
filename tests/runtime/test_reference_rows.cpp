// tests/runtime/test_reference_rows.cpp — deeper Q8_0 models, every scored row vs the reference engine.
//
// tests/data/reference-rows holds 4-layer random-weight Q8_0 models and the log-probabilities the
// reference engine computed for them on two chunks of 256 tokens of tests/data/simple-stories.txt
// (`llama-perplexity --kl-divergence-base`, its own file format: the README there has the commands).
// Each chunk is decoded as the perplexity tool does (the first token replaced by BOS) and every
// scored position's log-probabilities must match, per row over the tokens the file keeps (within 16
// nats of the top one): the gemma to NMSE 1e-8 (the file's own resolution is ~1e-11): its weights
// are large enough that one activation rounded to another integer, or one q8_0 product summed in
// another order, moves the later rows by NMSE 1e-5 and more (issue 25: both did, before the q8_0
// activations were rounded and summed as the reference engine does). The olmo2 keeps a residual
// of ~3e-7 whose cause is still open, so its bound is 1e-6.
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

struct deep_model {
    std::string name;
    double bound;
};

class DeepQ8Models : public ::testing::TestWithParam<deep_model> {};

TEST_P(DeepQ8Models, EveryRowTracksTheReference) {
    const std::string name = GetParam().name;
    const reference_rows ref = read_rows(data_path(name + ".kld"));
    ASSERT_GT(ref.n_chunk, 0);
    auto m = model::load(data_path(name + ".gguf"));
    ASSERT_EQ(m->hparams().n_vocab, ref.n_vocab);
    inference_params ip;
    ip.n_ctx = uint32_t(ref.n_ctx);
    ip.n_threads = ip.n_threads_batch = 2;
    inference_context ctx(*m, ip);
    const size_t n_ctx = size_t(ref.n_ctx), first = n_ctx / 2, per_chunk = n_ctx - 1 - first;
    ASSERT_EQ(ref.rows.size(), per_chunk * size_t(ref.n_chunk));
    double worst = 0, sum = 0;
    for (int32_t c = 0; c < ref.n_chunk; ++c) {
        ctx.kv_clear();
        batch b;
        for (size_t k = 0; k < n_ctx; ++k)
            b.add(k == 0 ? m->vocab().bos() : ref.tokens[size_t(c) * n_ctx + k], llm_pos(k), {0}, k >= first);
        ASSERT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        for (size_t k = first; k + 1 < n_ctx; ++k) {
            const double e = row_nmse(ctx.get_logits_ith(int32_t(k)),
                                      ref.rows[size_t(c) * per_chunk + (k - first)], ref.n_vocab);
            worst = std::max(worst, e);
            sum += e;
            EXPECT_LE(e, GetParam().bound) << "chunk " << c << ", position " << k;
        }
    }
    std::printf("[ nmse     ] %s: worst row %.3g, mean %.3g\n", name.c_str(), worst,
                sum / double(ref.rows.size()));
}

INSTANTIATE_TEST_SUITE_P(Recorded, DeepQ8Models,
                         ::testing::Values(deep_model{"deep-gemma-Q8_0", 1e-8},
                                           deep_model{"deep-olmo2-Q8_0", 1e-6}),
                         [](const auto &info) {
                             std::string s = info.param.name;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

}  // namespace
}  // namespace weft
