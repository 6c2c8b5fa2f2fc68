// tests/vocab/test_vocab_cli.cpp — `weft tokenize` end to end on real vocabulary files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "common/fixtures.h"
#include "common/run_weft.h"

namespace {

// Runs `weft ARGS` (shell text; a redirection of stdin inside ARGS is allowed).
weft::test::run_result run(const std::string &args) {
    return weft::test::run_weft_shell(args);
}

class weft_tokenize : public ::testing::Test {
  protected:
    void SetUp() override {
        WEFT_REQUIRE_FIXTURES();
        if (!std::filesystem::exists(WEFT_BINARY)) GTEST_SKIP() << WEFT_BINARY << " is not built";
    }
    // a file holding `text`, for stdin
    std::string write_input(const std::string &text) {
        const auto path =
            std::filesystem::temp_directory_path() / ("weft-tokenize-" + std::to_string(getpid()) + ".txt");
        FILE *f = std::fopen(path.c_str(), "wb");
        std::fwrite(text.data(), 1, text.size(), f);
        std::fclose(f);
        input_ = path;
        return path.string();
    }
    void TearDown() override {
        if (!input_.empty()) std::filesystem::remove(input_);
    }
    std::filesystem::path input_;
    static std::string vocab(const std::string &name) {
        return weft::test::fixture("vocab/ggml-vocab-" + name + ".gguf");
    }
};

TEST_F(weft_tokenize, IdsOnly) {
    const auto r = run("tokenize -m " + vocab("llama-spm") + " -p 'Hello world' --ids");
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, "[1, 15043, 3186]\n");
    EXPECT_EQ(run("tokenize -m " + vocab("llama-spm") + " -p 'Hello world' --ids --no-bos").out,
              "[15043, 3186]\n");
}

TEST_F(weft_tokenize, PiecesPerLineAndStdin) {
    const auto r = run("tokenize -m " + vocab("gpt-2") + " --no-bos < /dev/null");
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, "");
    const auto s =
        run("tokenize -m " + vocab("llama-spm") + " --parse-special --no-bos < " + write_input("a\n<s>"));
    EXPECT_EQ(s.status, 0);
    EXPECT_EQ(s.out, "   263 ' a'\n    13 '\\n'\n     1 '<s>'\n");
}

TEST_F(weft_tokenize, BadFileIsAnErrorNotACrash) {
    EXPECT_NE(run("tokenize -m /nonexistent.gguf -p x").status, 0);
    // a file that is not GGUF: the inp text file of a fixture
    EXPECT_NE(run("tokenize -m " + vocab("gpt-2") + ".inp -p x").status, 0);
}

}  // namespace
