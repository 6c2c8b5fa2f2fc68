// tests/runtime/context_test_util.h — small synthetic models, token runs, logits and their comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "weft/runtime/context.h"

namespace weft::test {

inline synth_spec small_spec(const std::string &arch = "llama") {
    synth_spec s;
    s.arch = arch;
    s.n_embd = 64;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 96;
    s.n_vocab = 300;
    return s;
}

inline std::vector<token> some_tokens(size_t n, int32_t n_vocab, uint32_t salt = 0) {
    std::vector<token> t;
    for (size_t i = 0; i < n; ++i) t.push_back(token((i * 37 + 11 + salt * 101) % uint32_t(n_vocab)));
    return t;
}

inline inference_params params_with(uint32_t n_ctx, uint32_t n_ubatch, uint32_t n_seq_max = 1) {
    inference_params p;
    p.n_ctx = n_ctx;
    p.n_batch = 512;
    p.n_ubatch = n_ubatch;
    p.n_seq_max = n_seq_max;
    p.n_threads = p.n_threads_batch = 2;
    return p;
}

// Logits of every position of `toks` (sequence 0, from position `start`) decoded in one call.
inline std::vector<std::vector<float>> all_logits(inference_context &ctx, const std::vector<token> &toks,
                                                  llm_pos start = 0) {
    batch b;
    for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], start + llm_pos(i), {0}, true);
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i < toks.size(); ++i) {
        const float *r = ctx.get_logits_ith(int32_t(i));
        rows.emplace_back(r, r + ctx.n_vocab());
    }
    return rows;
}

// sum (a - b)^2 / sum b^2: a row of logits against a reference row.
inline double nmse(const std::vector<float> &a, const std::vector<float> &ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
        den += double(ref[i]) * ref[i];
    }
    return num / den;
}

// The last row of logits of the context's last decode.
inline std::vector<float> last_logits(const inference_context &ctx) {
    const float *r = ctx.get_logits_ith(-1);
    return std::vector<float>(r, r + ctx.n_vocab());
}

// Largest |a - b| relative to the largest |b| of the row.
inline double max_rel_diff(const std::vector<float> &a, const float *b) {
    double d = 0, scale = 1e-30;
    for (size_t i = 0; i < a.size(); ++i) {
        d = std::max(d, std::fabs(double(a[i]) - b[i]));
        scale = std::max(scale, std::fabs(double(b[i])));
    }
    return d / scale;
}

constexpr double same_logits = 1e-5;  // f32 rounding of differently split sums

}  // namespace weft::test
