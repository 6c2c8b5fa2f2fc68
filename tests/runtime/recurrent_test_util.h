// tests/runtime/recurrent_test_util.h — decoding helpers of the suites of models with recurrent
// states (mamba; the hybrids lfm2 ...): one sequence continued, the same tokens decoded one by one or
// together beside another sequence, bit-for-bit comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/context_test_util.h"
#include "weft/runtime/context.h"

namespace weft::test {

using logit_rows = std::vector<std::vector<float>>;

inline inference_params recurrent_params(uint32_t n_ubatch = 512, int threads = 2, uint32_t n_seq_max = 2,
                                         uint32_t n_ctx = 64) {
    inference_params p = params_with(n_ctx, n_ubatch, n_seq_max);
    p.n_threads = p.n_threads_batch = threads;
    return p;
}

// Decodes toks as sequence s, continuing it; returns the last token's logits.
inline std::vector<float> continue_seq(inference_context &ctx, const std::vector<token> &toks, seq_id s = 0) {
    batch b;
    const llm_pos start = ctx.kv_seq_pos_max(s) + 1;
    for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], start + llm_pos(i), {s}, i + 1 == toks.size());
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    return last_logits(ctx);
}

inline void expect_same_bits(const std::vector<float> &want, const std::vector<float> &got,
                             const std::string &how) {
    ASSERT_EQ(want.size(), got.size()) << how;
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << how;
}

// The logits of every token of a, decoded one at a time.
inline logit_rows one_by_one(const model &m, const std::vector<token> &a, int threads) {
    inference_context ctx(m, recurrent_params(512, threads));
    logit_rows r;
    for (const token t : a) r.push_back(continue_seq(ctx, {t}));
    return r;
}

// a as sequence 0, every row, with `other` as sequence 1 interleaved (shorter: unequal lengths in one
// ubatch), in ubatches of n_ubatch.
inline logit_rows together(const model &m, const std::vector<token> &a, uint32_t n_ubatch, int threads,
                           const std::vector<token> *other = nullptr) {
    inference_context ctx(m, recurrent_params(n_ubatch, threads));
    batch b;
    std::vector<int32_t> index_of_a;
    for (size_t i = 0; i < a.size(); ++i) {
        if (other && i < other->size() && i % 2 == 1) b.add((*other)[i], llm_pos(i), {1}, true);
        index_of_a.push_back(b.n_tokens());
        b.add(a[i], llm_pos(i), {0}, true);
        if (other && i < other->size() && i % 2 == 0) b.add((*other)[i], llm_pos(i), {1}, true);
    }
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    logit_rows r;
    for (int32_t i : index_of_a) r.emplace_back(ctx.get_logits_ith(i), ctx.get_logits_ith(i) + ctx.n_vocab());
    return r;
}

// a's logits the same bits one by one, in one ubatch, in ubatches of 3, beside another sequence, on
// 1, 2 and 3 threads.
inline void expect_invariant(const model &m, const std::vector<token> &a, const std::vector<token> &other,
                             const std::string &what) {
    const logit_rows want = one_by_one(m, a, 1);
    auto check = [&](const logit_rows &got, const std::string &how) {
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i)
            expect_same_bits(want[i], got[i], what + ", " + how + ", position " + std::to_string(i));
    };
    for (int threads : {1, 2, 3}) {
        const std::string t = std::to_string(threads) + " threads";
        check(one_by_one(m, a, threads), "one by one, " + t);
        check(together(m, a, 512, threads), "one ubatch, " + t);
        check(together(m, a, 3, threads), "ubatches of 3, " + t);
        check(together(m, a, 512, threads, &other), "beside another sequence, " + t);
        check(together(m, a, 3, threads, &other), "beside another sequence in ubatches of 3, " + t);
    }
}

}  // namespace weft::test
