// tests/runtime/reference_run.h — a model run the way the reference engine's fixture tools run it:
// the prompt in one decode with logits at every position, then greedy tokens one at a time.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft::test {

struct reference_run {
    std::vector<token> prompt_tokens;
    std::vector<std::vector<float>> prompt_logits;
    std::vector<token> greedy;
    std::string greedy_text;
};

// Tokenizes with BOS and special tokens parsed (BOS alone for an empty prompt), decodes the prompt
// with logits at every position (2 threads), then greedy decodes n tokens one at a time.
inline reference_run run_like_the_reference(const model &m, const std::string &prompt, size_t n_greedy) {
    reference_run out;
    out.prompt_tokens = m.vocab().tokenize(prompt, true, true);
    if (out.prompt_tokens.empty()) out.prompt_tokens.push_back(m.vocab().bos());
    inference_params ip;
    ip.n_ctx = 512;
    ip.n_threads = ip.n_threads_batch = 2;
    inference_context ctx(m, ip);
    const int32_t n_vocab = ctx.n_vocab();
    batch b;
    for (size_t i = 0; i < out.prompt_tokens.size(); ++i) b.add(out.prompt_tokens[i], llm_pos(i), {0}, true);
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    for (size_t i = 0; i < out.prompt_tokens.size(); ++i) {
        const float *row = ctx.get_logits_ith(int32_t(i));
        out.prompt_logits.emplace_back(row, row + n_vocab);
    }
    const float *last = ctx.get_logits_ith(-1);
    for (size_t i = 0; i < n_greedy; ++i) {
        const token t = token(std::max_element(last, last + n_vocab) - last);
        out.greedy.push_back(t);
        out.greedy_text += m.vocab().token_to_piece(t, false);
        if (i + 1 == n_greedy) break;
        EXPECT_EQ(ctx.decode(batch::from_tokens({t})), decode_ok) << ctx.last_error();
        last = ctx.get_logits_ith(-1);
    }
    return out;
}

}  // namespace weft::test
