// tests/tools/test_bench_cli.cpp — `weft bench` on a small synthetic model: its report and errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "common/run_weft.h"

namespace {

using weft::test::run_weft;

class weft_bench : public ::testing::Test {
  protected:
    void SetUp() override {
        model_ = (std::filesystem::temp_directory_path() /
                  ("weft-bench-test-" + std::to_string(::getpid()) + ".gguf"))
                     .string();
        const auto r =
            run_weft({"synth", model_, "--embd", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
                      "--ff", "128", "--vocab", "300", "--type", "q8_0", "--tied"});
        ASSERT_EQ(r.status, 0) << r.err;
    }
    void TearDown() override { std::filesystem::remove(model_); }
    std::string model_;
};

TEST_F(weft_bench, JsonReportHasBothTestsAndReusesGraphs) {
    const auto r = run_weft(
        {"bench", "-m", model_, "-p", "16", "-n", "8", "-r", "2", "-t", "2", "--json", "--no-bandwidth"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["pp"]["n_tokens"], 16);
    EXPECT_EQ(j["pp"]["runs"].size(), 2u);
    EXPECT_GT(j["pp"]["tokens_per_s"].get<double>(), 0.0);
    EXPECT_EQ(j["tg"]["n_tokens"], 8);
    EXPECT_GT(j["tg"]["tokens_per_s"].get<double>(), 0.0);
    // the output matrix is the token embedding (--tied): one generated token reads every weight once
    EXPECT_GE(j["tg"]["bytes_per_token"].get<double>(), j["weight_bytes"].get<double>());
    // generation steps of one token share their graph
    EXPECT_GT(j["graph_reuses"].get<int>(), 8);
    EXPECT_NE(r.err.find("tg8 run 2"), std::string::npos) << r.err;  // progress on stderr
}

TEST_F(weft_bench, TableNamesTheTests) {
    const auto r = run_weft({"bench", "-m", model_, "-p", "8", "-n", "4", "-r", "1", "--no-bandwidth"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("| pp8 |"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("| tg4 |"), std::string::npos) << r.out;
}

// -d N (llama-bench's --n-depth): each test runs after N cached tokens, and says so
TEST_F(weft_bench, DepthFillsTheCacheFirst) {
    const auto table =
        run_weft({"bench", "-m", model_, "-p", "8", "-n", "4", "-d", "40", "-r", "1", "--no-bandwidth"});
    ASSERT_EQ(table.status, 0) << table.err;
    EXPECT_NE(table.out.find("| pp8 @ d40 |"), std::string::npos) << table.out;
    EXPECT_NE(table.out.find("| tg4 @ d40 |"), std::string::npos) << table.out;
    const auto r = run_weft(
        {"bench", "-m", model_, "-p", "0", "-n", "4", "-d", "40", "-r", "1", "--json", "--no-bandwidth"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["n_depth"], 40);
    EXPECT_EQ(j["tg"]["n_depth"], 40);
}

// --parallel N (-np): each generation step decodes one token of each of N sequences in one batch
// (one graph per step, N output rows), at the depth in every sequence; t/s counts all of them.
TEST_F(weft_bench, ParallelSequencesShareEachStep) {
    const auto table = run_weft(
        {"bench", "-m", model_, "-p", "0", "-n", "4", "-d", "5", "-np", "3", "-r", "1", "--no-bandwidth"});
    ASSERT_EQ(table.status, 0) << table.err;
    EXPECT_NE(table.out.find("| tg4 x3 @ d5 |"), std::string::npos) << table.out;
    EXPECT_NE(table.out.find("per step (3 tokens)"), std::string::npos) << table.out;
    const auto r = run_weft({"bench", "-m", model_, "-p", "0", "-n", "4", "--parallel", "3", "-r", "1", "-t",
                             "2", "--json", "--no-bandwidth", "--profile"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tg"]["n_parallel"], 3);
    EXPECT_EQ(j["profile"]["tg"]["graphs"].get<int>(), 4);  // one graph a step, not one a sequence
    EXPECT_GE(j["tg"]["bytes_per_step"].get<double>(), j["weight_bytes"].get<double>());
    EXPECT_LT(j["tg"]["bytes_per_token"].get<double>(), j["tg"]["bytes_per_step"].get<double>());
    const auto bad = run_weft({"bench", "-m", model_, "-n", "4", "--parallel", "65"});
    EXPECT_NE(bad.status, 0);
}

// --profile: per op type and weight type, for each test; the shares of a test add up to one and
// the products dominate; the table form names its columns.
TEST_F(weft_bench, ProfileTablesPerTest) {
    const auto r = run_weft({"bench", "-m", model_, "-p", "16", "-n", "4", "-r", "1", "-t", "2", "--json",
                             "--no-bandwidth", "--profile"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    for (const char *test : {"pp", "tg"}) {
        SCOPED_TRACE(test);
        const auto &p = j["profile"][test];
        EXPECT_EQ(p["graphs"].get<int>(), std::string(test) == "pp" ? 1 : 4);
        double share = 0, flops = 0;
        bool saw_mul_mat = false;
        for (const auto &row : p["ops"]) {
            share += row["share"].get<double>();
            EXPECT_GT(row["calls"].get<int>(), 0);
            EXPECT_GE(row["ms"].get<double>(), 0.0);
            if (row["op"] == "mul_mat" && row["type"] == "q8_0") {
                saw_mul_mat = true;
                flops = row["flops"].get<double>();
                EXPECT_GT(row["bytes_read"].get<double>(), 0.0);
            }
        }
        EXPECT_NEAR(share, 1.0, 1e-6);
        EXPECT_TRUE(saw_mul_mat);
        EXPECT_GT(flops, 0.0);
    }
    const auto table =
        run_weft({"bench", "-m", model_, "-p", "8", "-n", "2", "-r", "1", "--no-bandwidth", "--profile"});
    ASSERT_EQ(table.status, 0) << table.err;
    EXPECT_NE(table.out.find("profile of pp8"), std::string::npos) << table.out;
    EXPECT_NE(table.out.find("| op | type | calls | total ms | ms/graph | share |"), std::string::npos)
        << table.out;
}

TEST_F(weft_bench, NothingToMeasureIsAnError) {
    const auto r = run_weft({"bench", "-m", model_, "-p", "0", "-n", "0"});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("nothing to measure"), std::string::npos) << r.err;
}

}  // namespace
