// tests/tools/test_cache_types_cli.cpp — the KV cache type options (-ctk/--cache-type-k,
// -ctv/--cache-type-v, --kv-type for both) of run, chat, bench, perplexity and serve.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "common/run_weft.h"
#include "model/model_test_util.h"

namespace {

using weft::test::run_result;
using weft::test::shell_quote;
using weft::test::temp_file;

run_result weft(const std::string &args, const std::string *input = nullptr) {
    return weft::test::run_weft_shell(args, input);
}

// A synthetic llama with heads of 64 (whole blocks for every cache type), and its path quoted.
struct synth_model {
    temp_file file{"cli-cache-types"};
    synth_model() {
        const run_result r = weft("synth " + shell_quote(file.path()) +
                                  " --embd 128 --layers 2 --heads 2 --kv-heads 1 --ff 128 --vocab 300");
        EXPECT_EQ(r.status, 0) << r.err;
    }
    std::string arg() const { return shell_quote(file.path()); }
};

bool has(const std::string &text, const std::string &part) {
    return text.find(part) != std::string::npos;
}

TEST(CacheTypesCli, RunTakesEachTypeAndReportsIt) {
    synth_model m;
    for (const char *type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}) {
        SCOPED_TRACE(type);
        const run_result r =
            weft("run -m " + m.arg() + " -p abc -n 4 --temp 0 -t 1 -ctk " + type + " -ctv " + type);
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_TRUE(has(r.err, std::string("(K ") + type + ", V " + type + ")")) << r.err;
    }
    // long forms, K and V apart, and --kv-type for both with -ctv overriding its V
    run_result r = weft("run -m " + m.arg() + " -p abc -n 2 --cache-type-k q8_0 --cache-type-v q4_1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(has(r.err, "(K q8_0, V q4_1)")) << r.err;
    r = weft("run -m " + m.arg() + " -p abc -n 2 --kv-type q5_0");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(has(r.err, "(K q5_0, V q5_0)")) << r.err;
    r = weft("run -m " + m.arg() + " -p abc -n 2 --kv-type q5_0 -ctv f16");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(has(r.err, "(K q5_0, V f16)")) << r.err;
    r = weft("run -m " + m.arg() + " -p abc -n 2");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(has(r.err, "(K f16, V f16)")) << r.err;  // the default
}

TEST(CacheTypesCli, UnknownNamesListTheValidOnes) {
    synth_model m;
    const std::vector<std::string> commands = {"run", "chat", "bench", "perplexity -f " + m.arg(), "serve"};
    for (const std::string &cmd : commands)
        for (const char *opt : {"-ctk", "-ctv", "--kv-type"}) {
            SCOPED_TRACE(cmd + " " + opt);
            const run_result r = weft(cmd + " -m " + m.arg() + " " + opt + " q4_K");
            EXPECT_NE(r.status, 0);
            EXPECT_TRUE(has(r.err,
                            "unknown KV cache type 'q4_K' (valid: f32, f16, bf16, q8_0, q4_0, q4_1, "
                            "q5_0, q5_1)"))
                << r.err;
        }
}

// The built-in stories260K has heads of 8: a block type is refused, naming the head size.
TEST(CacheTypesCli, BlockTypesNeedWholeBlocksPerHead) {
    for (const char *cmd : {"run -n 2 -ctk q8_0", "run -n 2 -ctv q4_0", "serve --port 0 -ctk q5_1"}) {
        SCOPED_TRACE(cmd);
        const run_result r = weft(cmd);
        EXPECT_EQ(r.status, 1) << r.err;
        EXPECT_TRUE(has(r.err, "needs a head size that is a multiple of its block size 32")) << r.err;
        EXPECT_TRUE(has(r.err, "heads of 8")) << r.err;
    }
}

TEST(CacheTypesCli, ChatTakesTheTypes) {
    synth_model m;
    const std::string input = "hello\nagain\n";
    const run_result r = weft("chat -m " + m.arg() + " --temp 0 -n 4 -ctk q8_0 -ctv q4_0", &input);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(r.out.empty());
}

TEST(CacheTypesCli, BenchNamesTheTypes) {
    synth_model m;
    const run_result r =
        weft("bench -m " + m.arg() + " -p 8 -n 4 -r 1 -t 1 --json --no-bandwidth -ctk q8_0 -ctv q4_0");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["type_k"], "q8_0");
    EXPECT_EQ(j["type_v"], "q4_0");
    // 2 layers, 1 KV head of 64: K 2 blocks of 34 bytes, V 2 of 18, per layer
    EXPECT_EQ(j["kv_bytes_per_token"].get<double>(), 2.0 * (68 + 36));
    const run_result table = weft("bench -m " + m.arg() + " -p 8 -n 0 -r 1 -t 1 --kv-type bf16");
    ASSERT_EQ(table.status, 0) << table.err;
    EXPECT_TRUE(has(table.out, "| type_k | type_v | test | t/s |")) << table.out;
    EXPECT_TRUE(has(table.out, "| bf16 | bf16 | pp8 |")) << table.out;
}

// Perplexity over a cache of each type: near the f32 cache's (these are random weights: the
// perplexity is near the vocabulary size; the error of the cache moves it little).
TEST(CacheTypesCli, PerplexityNearTheF32Cache) {
    synth_model m;
    const std::string text = shell_quote(std::string(WEFT_SOURCE_DIR) + "/tests/data/simple-stories.txt");
    auto ppl = [&](const std::string &types) {
        const run_result r =
            weft("perplexity -m " + m.arg() + " -f " + text + " -c 64 --chunks 2 -t 1 --json " + types);
        EXPECT_EQ(r.status, 0) << r.err;
        if (r.status != 0) return nlohmann::json{};
        return nlohmann::json::parse(r.out);
    };
    const auto f32 = ppl("--kv-type f32");
    ASSERT_FALSE(f32.is_null());
    EXPECT_EQ(f32["type_k"], "f32");
    for (const char *type : {"q8_0", "q4_0"}) {
        SCOPED_TRACE(type);
        const auto got = ppl(std::string("-ctk ") + type + " -ctv " + type);
        ASSERT_FALSE(got.is_null());
        EXPECT_EQ(got["type_v"], type);
        const double rel = std::fabs(got["ppl"].get<double>() / f32["ppl"].get<double>() - 1.0);
        // measured: q8_0 under 1e-3, q4_0 1.3e-2
        EXPECT_LT(rel, std::string(type) == "q8_0" ? 1e-3 : 3e-2) << got["ppl"] << " vs " << f32["ppl"];
    }
}

}  // namespace
