// tests/runtime/test_numpy_reference.cpp — whole forward passes against independent NumPy ones
// (tests/reference/*.py, float64): tiny F32 synthetic models of this year's architectures (and llama,
// the harness's own check), every position's logits within NMSE 1e-10 of the reference's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/numpy_reference.h"
#include "model/model_test_util.h"
#include "runtime/context_test_util.h"
#include "weft/backends/cpu.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft {
namespace {

using test::synth_file;

void expect_matches_numpy(const synth_spec &spec, const std::string &stem, bool gelu_table = true) {
    synth_file f(stem, spec);
    const auto m = model::load(f.path());
    const std::vector<token> tokens = test::some_tokens(11, int32_t(spec.n_vocab));
    inference_params p = test::params_with(64, 64);
    p.type_k = p.type_v = dtype::f32;  // an f16 cache would round K, V (and Q) to 11 bits
    inference_context ctx(*m, p);
    const std::vector<std::vector<float>> got = test::all_logits(ctx, tokens);
    const std::vector<double> want =
        test::reference_logits(f.path(), std::vector<int32_t>(tokens.begin(), tokens.end()), gelu_table);
    const size_t n_vocab = size_t(spec.n_vocab);
    ASSERT_EQ(want.size(), got.size() * n_vocab);
    for (size_t pos = 0; pos < tokens.size(); ++pos) {
        const double e = test::nmse(got[pos].data(), want.data() + pos * n_vocab, n_vocab);
        EXPECT_LE(e, 1e-10) << spec.arch << ": logits of position " << pos;
    }
}

TEST(NumpyReference, Llama) {
    WEFT_SKIP_WITHOUT_NUMPY();
    expect_matches_numpy(test::small_spec("llama"), "numpy-llama");
}

// Five sliding-window layers (windows of 4 over 11 tokens, RoPE base 10000) and one global layer
// (linearly scaled RoPE), Q/K norms, post norms, GELU, tied output. GELU in f32 on both sides: through
// the f16 table, the two passes' inputs (equal to ~1e-7) round to different f16 steps once in a few
// thousand, and one such step is NMSE ~1e-9 at the logits (the table itself is checked against the
// reference engine's results by the fixture tests).
TEST(NumpyReference, Gemma3) {
    WEFT_SKIP_WITHOUT_NUMPY();
    cpu_set_gelu_table(false);
    synth_spec s = test::small_spec("gemma3");
    s.n_layer = 7;
    s.tied = true;
    expect_matches_numpy(s, "numpy-gemma3", /*gelu_table=*/false);
    cpu_set_gelu_table(true);
}

// 6 experts, 2 used per token, their weights renormalized; per-head Q/K norms.
TEST(NumpyReference, Qwen3Moe) {
    WEFT_SKIP_WITHOUT_NUMPY();
    synth_spec s = test::small_spec("qwen3moe");
    s.n_expert = 6;
    s.n_expert_used = 2;
    expect_matches_numpy(s, "numpy-qwen3moe");
}

}  // namespace
}  // namespace weft
