// tests/tools/test_mamba_cli.cpp — a recurrent model through the command line: `weft synth --arch mamba`,
// then run (with a prompt cache), bench, graph and logits on it, and the clear refusal of speculative
// decoding.
#include <gtest/gtest.h>

#include <string>

#include "common/run_weft.h"
#include "model/model_test_util.h"

namespace {

using weft::test::run_result;
using weft::test::shell_quote;
using weft::test::temp_file;

run_result weft_cli(const std::string &args) {
    return weft::test::run_weft_shell(args);
}

bool has(const std::string &text, const std::string &part) {
    return text.find(part) != std::string::npos;
}

class MambaCli : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        model_ = new temp_file("cli-mamba");
        const run_result r = weft_cli("synth " + shell_quote(model_->path()) +
                                      " --arch mamba --embd 64 --layers 2 --vocab 300 --type q8_0");
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_TRUE(has(r.err, "mamba, 2 layers, n_embd 64, d_inner 128, d_state 16, d_conv 4")) << r.err;
    }
    static void TearDownTestSuite() {
        delete model_;
        model_ = nullptr;
    }
    static std::string m() { return " -m " + shell_quote(model_->path()); }
    static temp_file *model_;
};
temp_file *MambaCli::model_ = nullptr;

TEST_F(MambaCli, RunGeneratesAndItsPromptCacheContinuesTheSame) {
    const std::string cache = temp_file("cli-mamba-cache").path();
    const std::string args = "run" + m() + " -p 'Once upon a time' -n 12 --temp 0";
    const run_result plain = weft_cli(args);
    ASSERT_EQ(plain.status, 0) << plain.err;
    EXPECT_TRUE(has(plain.err, "d_state 16")) << plain.err;
    EXPECT_TRUE(has(plain.err, "recurrent states")) << plain.err;
    EXPECT_FALSE(plain.out.empty());

    const run_result first = weft_cli(args + " --prompt-cache " + shell_quote(cache));
    ASSERT_EQ(first.status, 0) << first.err;
    EXPECT_TRUE(has(first.err, "saved")) << first.err;
    const run_result second = weft_cli(args + " --prompt-cache " + shell_quote(cache));
    ASSERT_EQ(second.status, 0) << second.err;
    EXPECT_TRUE(has(second.err, "loaded")) << second.err;
    EXPECT_EQ(first.out, plain.out);
    EXPECT_EQ(second.out, plain.out);
    std::remove(cache.c_str());
}

TEST_F(MambaCli, BenchGraphAndLogits) {
    const run_result bench = weft_cli("bench" + m() + " -p 16 -n 8 -r 1 --no-bandwidth --json");
    ASSERT_EQ(bench.status, 0) << bench.err;
    EXPECT_TRUE(has(bench.out, "\"kv_bytes_per_token\"")) << bench.out;
    const run_result graph = weft_cli("graph" + m() + " --tokens 4");
    ASSERT_EQ(graph.status, 0) << graph.err;
    EXPECT_TRUE(has(graph.out, "ssm_scan")) << graph.out;
    EXPECT_TRUE(has(graph.out, "ssm_conv")) << graph.out;
    const run_result logits = weft_cli("logits" + m() + " -p 'hello there' --json -n 2");
    ASSERT_EQ(logits.status, 0) << logits.err;
}

TEST_F(MambaCli, SpeculativeDecodingIsRefusedWithAReason) {
    const run_result r = weft_cli("run" + m() + " -p 'hi' -n 4 --lookup-ngram 3");
    EXPECT_NE(r.status, 0);
    EXPECT_TRUE(has(r.err, "recurrent")) << r.err;
}

}  // namespace
