// tests/tools/test_perplexity_cli.cpp — `weft perplexity`: the reference engine's numbers on the same
// text and chunking, and the KL-divergence comparison of a model with a base model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

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

// The reference engine's llama-perplexity where ../shared/bench/reference has it (a yardstick the
// tests run when present, never a dependency): its output to `out`; false when it is absent or does
// not run on this machine.
bool run_reference_perplexity(const std::string &args, const std::string &out) {
    const fs::path ref_dir = fs::path(WEFT_SOURCE_DIR) / ".." / "shared" / "bench" / "reference";
    if (!fs::exists(ref_dir / "llama-perplexity")) return false;
    const std::string cmd = "LD_LIBRARY_PATH=" + shell_quote(ref_dir.string()) + " " +
                            shell_quote((ref_dir / "llama-perplexity").string()) + " " + args + " > " +
                            shell_quote(out) + " 2>&1";
    return std::system(cmd.c_str()) == 0;
}

// When the reference engine's binary is beside the fixtures, the same comparison live.
TEST(PerplexityCli, LiveAgainstTheReferenceBinary) {
    WEFT_REQUIRE_FIXTURES();
    const std::string out =
        (fs::temp_directory_path() / ("weft-ref-ppl-" + std::to_string(::getpid()))).string();
    if (!run_reference_perplexity(
            "-m " + model("stories260K") + " -f " + shell_quote(text_path()) + " -c 128 -b 128 -t 2", out))
        GTEST_SKIP() << "no reference binary in ../shared/bench/reference, or it does not run here";
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

// The reference engine's --kl-divergence-base format ("_logits_", n_ctx, n_vocab, chunks, the chunks'
// tokens, then per position its step and lowest log-probability and n_vocab 16-bit codes, code 0
// clipped), written here from a weft base file (the same codes), is read as well.
TEST(PerplexityCli, ReadsTheReferenceEnginesBaseFiles) {
    WEFT_REQUIRE_FIXTURES();
    const fs::path dir = fs::temp_directory_path() / ("weft-kld-ref-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string base = (dir / "base.kld").string(), ref = (dir / "ref.kld").string();
    const std::string args = " -f " + shell_quote(text_path()) + " -c 128 -t 2 --json";
    ASSERT_EQ(weft::test::run_weft_shell("perplexity -m " + model("tiny-llama-F32") + args +
                                         " --kl-divergence-base " + shell_quote(base))
                  .status,
              0);
    {
        std::ifstream in(base, std::ios::binary);
        char magic[8];
        uint32_t head[4];  // version, n_ctx, n_vocab, chunks
        uint64_t n_tok = 0;
        in.read(magic, 8);
        in.read(reinterpret_cast<char *>(head), sizeof head);
        in.read(reinterpret_cast<char *>(&n_tok), sizeof n_tok);
        std::vector<int32_t> tokens(n_tok);
        in.read(reinterpret_cast<char *>(tokens.data()), std::streamsize(n_tok * 4));
        const int32_t n_ctx = int32_t(head[1]), n_vocab = int32_t(head[2]), chunks = int32_t(head[3]);
        std::ofstream out(ref, std::ios::binary);
        out.write("_logits_", 8);
        const int32_t ref_head[3] = {n_ctx, n_vocab, chunks};
        out.write(reinterpret_cast<const char *>(ref_head), sizeof ref_head);
        out.write(reinterpret_cast<const char *>(tokens.data()), std::streamsize(size_t(n_ctx * chunks) * 4));
        const size_t rows = size_t(chunks) * size_t(n_ctx - 1 - n_ctx / 2);
        std::vector<uint16_t> codes(static_cast<size_t>(n_vocab));
        std::vector<uint16_t> row(static_cast<size_t>(2 * ((n_vocab + 1) / 2) + 4), 0);
        for (size_t r = 0; r < rows; ++r) {
            float lo = 0, step = 0;
            in.read(reinterpret_cast<char *>(&lo), 4);
            in.read(reinterpret_cast<char *>(&step), 4);
            in.read(reinterpret_cast<char *>(codes.data()), std::streamsize(codes.size() * 2));
            ASSERT_TRUE(in) << "row " << r;
            std::memcpy(&row[0], &step, 4);
            std::memcpy(&row[2], &lo, 4);
            std::copy(codes.begin(), codes.end(), row.begin() + 4);
            out.write(reinterpret_cast<const char *>(row.data()), std::streamsize(row.size() * 2));
        }
    }
    const auto self = json_of(weft::test::run_weft_shell("perplexity -m " + model("tiny-llama-F32") + args +
                                                         " --kl-divergence " + shell_quote(ref)));
    EXPECT_LT(self["kl_divergence"].value("mean", 1.0), 1e-6);
    EXPECT_EQ(self["kl_divergence"].value("same_top_percent", 0.0), 100.0);
    const auto q8 = json_of(weft::test::run_weft_shell("perplexity -m " + model("tiny-llama-Q8_0") + args +
                                                       " --kl-divergence " + shell_quote(ref)));
    EXPECT_GT(q8["kl_divergence"].value("mean", 0.0), 1e-6);
    // the first token of another text
    std::string bytes = weft::test::read_text_file(ref);
    bytes[8 + 12] ^= 1;
    std::ofstream(ref, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
    const run_result r = weft::test::run_weft_shell("perplexity -m " + model("tiny-llama-F32") + args +
                                                    " --kl-divergence " + shell_quote(ref));
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("made from another text"), std::string::npos) << r.err;
    fs::remove_all(dir);
}

// With the reference binary beside the fixtures: its own base file of tiny-gemma2-F32 (26 layers of
// large weights: any last-ulp difference shows), and weft's log-probabilities agree to its rounding.
TEST(PerplexityCli, LiveKlDivergenceAgainstTheReferenceBinary) {
    WEFT_REQUIRE_FIXTURES();
    const std::string base =
        (fs::temp_directory_path() / ("weft-ref-kld-" + std::to_string(::getpid()))).string();
    if (!run_reference_perplexity("-m " + model("tiny-gemma2-F32") + " -f " + shell_quote(text_path()) +
                                      " -c 64 --chunks 4 -t 2 --kl-divergence-base " + shell_quote(base),
                                  "/dev/null"))
        GTEST_SKIP() << "no reference binary in ../shared/bench/reference, or it does not run here";
    const auto j = json_of(weft::test::run_weft_shell(
        "perplexity -m " + model("tiny-gemma2-F32") + " -f " + shell_quote(text_path()) +
        " -c 64 -t 2 --json --kl-divergence " + shell_quote(base)));
    fs::remove(base);
    EXPECT_EQ(j.value("chunks", 0), 4);
    EXPECT_LT(j["kl_divergence"].value("max", 1.0), 1e-4);
    EXPECT_EQ(j["kl_divergence"].value("same_top_percent", 0.0), 100.0);
}

TEST(PerplexityCli, TooShortATextIsAnError) {
    WEFT_REQUIRE_FIXTURES();
    const run_result r = weft::test::run_weft_shell("perplexity -m " + model("stories260K") + " -f " +
                                                    shell_quote(text_path()) + " -c 4096");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("needs at least 8192"), std::string::npos) << r.err;
}

}  // namespace
