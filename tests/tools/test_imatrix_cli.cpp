// tests/tools/test_imatrix_cli.cpp — `weft imatrix` and `weft quantize --imatrix`: the reference
// quantizer's i-quant files reproduced byte for byte from its importance matrix, and an importance
// matrix of weft's own that reads back and drives the quantizer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/fixtures.h"
#include "common/run_weft.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/quant/imatrix.h"

namespace {

namespace fs = std::filesystem;
using weft::test::run_result;
using weft::test::shell_quote;

class ImatrixCli : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("weft-imatrix-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string &name) const { return (dir_ / name).string(); }
    static std::string fixture(const std::string &name) { return weft::test::fixture("models/" + name); }
    fs::path dir_;
};

// Every tensor of a and b: same type and bytes.
void expect_same_tensors(const std::string &a_path, const std::string &b_path) {
    const auto a = weft::gguf_file::open(a_path), b = weft::gguf_file::open(b_path);
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    for (const auto &tb : b->tensors()) {
        const weft::gguf_tensor_info *ta = a->find_tensor(tb.name);
        ASSERT_NE(ta, nullptr) << tb.name;
        EXPECT_EQ(ta->type, tb.type) << tb.name;
        ASSERT_EQ(ta->nbytes, tb.nbytes) << tb.name;
        EXPECT_EQ(std::memcmp(a->tensor_data(*ta), b->tensor_data(tb), tb.nbytes), 0) << tb.name;
    }
}

// Every i-quant fixture file: its mix of types and every tensor's bytes (WEFT_LONG_TESTS=1; the suite
// takes one file of each family through the command line: quant's QuantFixtureImatrixBytes checks
// every type's bytes in one process).
TEST_F(ImatrixCli, QuantizeWithTheReferenceImatrixReproducesItsFiles) {
    WEFT_REQUIRE_FIXTURES();
    for (const std::string type :
         {"IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"}) {
        if (!weft::test::long_tests() && type != "IQ4_XS" && type != "IQ2_M" && type != "IQ3_S" &&
            type != "IQ1_S")
            continue;
        SCOPED_TRACE(type);
        const std::string out = path("q-" + type + ".gguf");
        const run_result r = weft::test::run_weft_shell(
            "quantize " + shell_quote(fixture("tiny-llama-F32.gguf")) + " " + shell_quote(out) + " " + type +
            " --imatrix " + shell_quote(fixture("tiny-llama.imatrix")) + " -t 2");
        ASSERT_EQ(r.status, 0) << r.err;
        expect_same_tensors(out, fixture("tiny-llama-" + type + ".gguf"));
        const auto f = weft::gguf_file::open(out);
        EXPECT_EQ(f->get_int("quantize.imatrix.entries_count").value_or(0), 28);
        EXPECT_EQ(f->get_int("quantize.imatrix.chunks_count").value_or(0), 16);
    }
}

TEST_F(ImatrixCli, OwnImatrixReadsBackAndDrivesTheQuantizer) {
    WEFT_REQUIRE_FIXTURES();
    const std::string text = (fs::path(WEFT_SOURCE_DIR) / "tests" / "data" / "simple-stories.txt").string();
    const std::string mine = path("mine.imatrix");
    run_result r = weft::test::run_weft_shell("imatrix -m " + shell_quote(fixture("tiny-llama-F32.gguf")) +
                                              " -f " + shell_quote(text) + " -c 128 -o " + shell_quote(mine));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(fs::exists(mine + ".tmp"));
    const weft::importance_matrix m = weft::read_imatrix(mine);
    const weft::importance_matrix ref = weft::read_imatrix(fixture("tiny-llama.imatrix"));
    ASSERT_EQ(m.entries.size(), ref.entries.size());  // every matrix product but the output's
    for (const auto &[name, e] : ref.entries) {
        SCOPED_TRACE(name);
        const auto it = m.entries.find(name);
        ASSERT_NE(it, m.entries.end());
        EXPECT_EQ(it->second.ncall, 16);
        ASSERT_EQ(it->second.values.size(), e.values.size());
        for (float v : it->second.values) EXPECT_GT(v, 0.0f);
    }
    EXPECT_EQ(m.chunks, 16);
    EXPECT_EQ(m.dataset, text);

    // quantized with it: a valid file that differs from the one made without
    const std::string with = path("with.gguf"), without = path("without.gguf");
    const std::string base = "quantize " + shell_quote(fixture("tiny-llama-F32.gguf")) + " ";
    ASSERT_EQ(weft::test::run_weft_shell(base + shell_quote(with) + " IQ4_XS --imatrix " + shell_quote(mine))
                  .status,
              0);
    ASSERT_EQ(weft::test::run_weft_shell(base + shell_quote(without) + " IQ4_XS").status, 0);
    const auto a = weft::gguf_file::open(with), b = weft::gguf_file::open(without);
    const auto *ta = a->find_tensor("blk.0.attn_q.weight"), *tb = b->find_tensor("blk.0.attn_q.weight");
    ASSERT_TRUE(ta && tb);
    EXPECT_NE(std::memcmp(a->tensor_data(*ta), b->tensor_data(*tb), tb->nbytes), 0);
    r = weft::test::run_weft_shell("run -m " + shell_quote(with) + " -p hi -n 4 --temp 0");
    EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(ImatrixCli, BrokenImatrixFilesAreRefusedByName) {
    WEFT_REQUIRE_FIXTURES();
    const std::string ref = fixture("tiny-llama.imatrix");
    const std::string cut = path("cut.imatrix");
    fs::copy_file(ref, cut);
    fs::resize_file(cut, fs::file_size(ref) / 3);
    EXPECT_THROW(weft::read_imatrix(cut), weft::error);
    try {
        weft::read_imatrix(cut);
    } catch (const weft::error &e) {
        EXPECT_NE(std::string(e.what()).find(cut), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos) << e.what();
    }
    const std::string huge = path("huge.imatrix");
    {
        std::ofstream out(huge, std::ios::binary);
        const int32_t n = 1 << 30;
        out.write(reinterpret_cast<const char *>(&n), sizeof n);
    }
    EXPECT_THROW(weft::read_imatrix(huge), weft::error);
    const run_result r =
        weft::test::run_weft_shell("quantize " + shell_quote(fixture("tiny-llama-F32.gguf")) + " " +
                                   shell_quote(path("x.gguf")) + " IQ4_NL --imatrix " + shell_quote(cut));
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("imatrix file"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(path("x.gguf")));
}

}  // namespace
