// tests/tools/test_perplexity_cli.cpp — `weft perplexity`: the reference engine's numbers on the same
// text and chunking, and the KL-divergence comparison of a model with a base model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "common/fixtures.h"
#include "common/run_weft.h"

namespace {

namespace fs = std::filesystem;
using weft::test::run_result;
using weft::test::shell_quote;

std::string text_path() {
    return (fs::path(WEFT_SOURCE_DIR) / "tests" / "data" / "simple-stories.txt").string();
}
std::string model(const std::string &name) {
    return shell_quote(weft::test::fixture("models/" + name + ".gguf"));
}
nlohmann::json json_of(const run_result &r) {
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
    return j;
}

// The reference engine's llama-perplexity on stories260K with tests/data/simple-stories.txt,
// -c 128 -b 128 (16 chunks): "Final estimate: PPL = 4.8250 +/- 0.29511".
constexpr double reference_ppl = 4.8250, reference_error = 0.29511;

TEST(PerplexityCli, Stories260KMatchesTheReferenceEngine) {
    WEFT_REQUIRE_FIXTURES();
    const run_result r = weft::test::run_weft_shell("perplexity -m " + model("stories260K") + " -f " +
                                                    shell_quote(text_path()) + " -c 128 -b 128 -t 2 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = json_of(r);
    EXPECT_EQ(j.value("chunks", 0), 16);
    EXPECT_EQ(j.value("tokens_scored", 0), 16 * 63);
    EXPECT_NEAR(j.value("ppl", 0.0), reference_ppl, reference_ppl * 1e-3);
    EXPECT_NEAR(j.value("error", 0.0), reference_error, reference_error * 1e-2);
    EXPECT_NE(r.err.find("[16]"), std::string::npos) << r.err;  // the running estimates on stderr
}

// When the reference engine's binary is beside the fixtures (../shared/bench/reference), the same
// comparison live.
TEST(PerplexityCli, LiveAgainstTheReferenceBinary) {
    WEFT_REQUIRE_FIXTURES();
    const fs::path ref_dir = fs::path(WEFT_SOURCE_DIR) / ".." / "shared" / "bench" / "reference";
    if (!fs::exists(ref_dir / "llama-perplexity")) GTEST_SKIP() << "no reference binary at " << ref_dir;
    const std::string out =
        (fs::temp_directory_path() / ("weft-ref-ppl-" + std::to_string(::getpid()))).string();
    const std::string cmd = "LD_LIBRARY_PATH=" + shell_quote(ref_dir.string()) + " " +
                            shell_quote((ref_dir / "llama-perplexity").string()) + " -m " +
                            model("stories260K") + " -f " + shell_quote(text_path()) +
                            " -c 128 -b 128 -t 2 > " + shell_quote(out) + " 2>&1";
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "the reference binary does not run here";
    const std::string log = weft::test::read_text_file(out);
    fs::remove(out);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, std::regex("Final estimate: PPL = ([0-9.]+)"))) << log;
    const double ref = std::stod(m[1]);
    const run_result r = weft::test::run_weft_shell("perplexity -m " + model("stories260K") + " -f " +
                                                    shell_quote(text_path()) + " -c 128 -b 128 -t 2 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NEAR(json_of(r).value("ppl", 0.0), ref, ref * 1e-3);
}

TEST(PerplexityCli, KlDivergenceAgainstABaseModel) {
    WEFT_REQUIRE_FIXTURES();
    const fs::path dir = fs::temp_directory_path() / ("weft-kld-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string base = (dir / "base.kld").string();
    const std::string args = " -f " + shell_quote(text_path()) + " -c 128 -t 2 --json";
    const run_result made = weft::test::run_weft_shell("perplexity -m " + model("tiny-llama-F32") + args +
                                                       " --kl-divergence-base " + shell_quote(base));
    ASSERT_EQ(made.status, 0) << made.err;
    EXPECT_FALSE(fs::exists(base + ".tmp"));
    const double base_ppl = json_of(made).value("ppl", 0.0);

    // the base against itself: nothing but the file's 16-bit rounding
    const auto self = json_of(weft::test::run_weft_shell("perplexity -m " + model("tiny-llama-F32") + args +
                                                         " --kl-divergence " + shell_quote(base)));
    EXPECT_LT(self["kl_divergence"].value("mean", 1.0), 1e-6);
    EXPECT_EQ(self["kl_divergence"].value("same_top_percent", 0.0), 100.0);
    EXPECT_NEAR(self["kl_divergence"].value("base_ppl", 0.0), base_ppl, base_ppl * 1e-4);

    // a quantized copy diverges, Q4_0 more than Q8_0
    const auto q8 = json_of(weft::test::run_weft_shell("perplexity -m " + model("tiny-llama-Q8_0") + args +
                                                       " --kl-divergence " + shell_quote(base)));
    const auto q4 = json_of(weft::test::run_weft_shell("perplexity -m " + model("tiny-llama-Q4_0") + args +
                                                       " --kl-divergence " + shell_quote(base)));
    const double kl8 = q8["kl_divergence"].value("mean", 0.0), kl4 = q4["kl_divergence"].value("mean", 0.0);
    EXPECT_GT(kl8, 0.0);
    EXPECT_GT(kl4, 5 * kl8);
    EXPECT_GT(q8["kl_divergence"].value("same_top_percent", 0.0),
              q4["kl_divergence"].value("same_top_percent", 0.0));

    // another context size, and a truncated file: clear errors
    run_result r =
        weft::test::run_weft_shell("perplexity -m " + model("tiny-llama-Q8_0") + " -f " +
                                   shell_quote(text_path()) + " -c 64 --kl-divergence " + shell_quote(base));
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("made with -c 128"), std::string::npos) << r.err;
    const std::string cut = (dir / "cut.kld").string();
    fs::copy_file(base, cut);
    fs::resize_file(cut, fs::file_size(base) / 2);
    r = weft::test::run_weft_shell("perplexity -m " + model("tiny-llama-Q8_0") + args + " --kl-divergence " +
                                   shell_quote(cut));
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
    fs::remove_all(dir);
}

TEST(PerplexityCli, TooShortATextIsAnError) {
    WEFT_REQUIRE_FIXTURES();
    const run_result r = weft::test::run_weft_shell("perplexity -m " + model("stories260K") + " -f " +
                                                    shell_quote(text_path()) + " -c 4096");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("needs at least 8192"), std::string::npos) << r.err;
}

}  // namespace
