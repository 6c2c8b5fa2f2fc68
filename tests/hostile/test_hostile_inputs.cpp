// tests/hostile/test_hostile_inputs.cpp — inputs that used to cost minutes or clobber files (issue
// 42): grammars and JSON schemas sized to make their conversion slow, outputs that are inputs, and
// FIFOs given as file arguments.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "common/run_weft.h"
#include "weft/core/error.h"
#include "weft/grammar/grammar.h"
#include "weft/grammar/json_schema.h"

namespace hostile_input_tests {

using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::test::shell_quote;

// Seconds `fn` takes; the message of the weft::error it throws in `what` ("" when it returned).
template <class Fn>
double timed(Fn &&fn, std::string &what) {
    const auto t0 = std::chrono::steady_clock::now();
    what.clear();
    try {
        fn();
    } catch (const weft::error &e) {
        what = e.what();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A chain of n named rules, each the next's only use, the last one empty (every rule nullable).
std::string rule_chain(size_t n) {
    std::string g = "root ::= r0 \"x\"\n";
    for (size_t i = 0; i + 1 < n; ++i) g += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
    return g + "r" + std::to_string(n - 1) + " ::= \"\"\n";
}

// Item 3: a chain of 20,000 rules took 17 s (each rule's line and column were found by scanning the
// text from its start, and the nullable rules by a pass over all rules per link): the named rules are
// bounded now and the parse is linear.
TEST(HostileGrammars, LongRuleChainsParseInLinearTime) {
    std::string what;
    double s = timed([] { weft::grammar::parse(rule_chain(9000)); }, what);
    EXPECT_EQ(what, "");
    EXPECT_LT(s, 30.0) << "a chain of 9,000 rules";
    s = timed([] { weft::grammar::parse(rule_chain(20000)); }, what);
    EXPECT_NE(what.find("more than 10000 rules"), std::string::npos) << what;
    EXPECT_LT(s, 30.0);
    // repetitions make rules too: bounded in all
    std::string many = "root ::= ";
    for (int i = 0; i < 3; ++i) many += "\"a\"{0,100000} ";
    s = timed([&] { weft::grammar::parse(many); }, what);
    EXPECT_NE(what.find("200000 rules"), std::string::npos) << what;
    EXPECT_LT(s, 30.0);
    const std::string huge = "root ::= \"" + std::string(size_t(5) << 20, 'a') + "\"";
    s = timed([&] { weft::grammar::parse(huge); }, what);
    EXPECT_NE(what.find("at most"), std::string::npos) << what;
    EXPECT_LT(s, 30.0);
}

// Item 3: a schema nested 10,000 deep, 10,000 required properties and a 100,000-string enum took
// 1-3 minutes before their 400; now the sizes are checked first, and what is allowed converts fast.
TEST(HostileGrammars, SchemasOverTheLimitsAreRefusedAtOnce) {
    // "items" before "type", as the server's JSON writes a schema's keys (sorted): parsing that text
    // into ordered objects cost the depth squared
    std::string deep;
    for (int i = 0; i < 10000; ++i) deep += R"({"items": )";
    deep += R"({"type": "string"})";
    for (int i = 0; i < 10000; ++i) deep += R"(, "type": "array"})";
    json required = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
    for (int i = 0; i < 10000; ++i) {
        required["properties"]["p" + std::to_string(i)] = {{"type", "integer"}};
        required["required"].push_back("p" + std::to_string(i));
    }
    json big_enum = {{"enum", json::array()}};
    for (int i = 0; i < 100000; ++i) big_enum["enum"].push_back("value " + std::to_string(i));
    for (const auto &[text, says] : {std::pair<std::string, std::string>{deep, "nest deeper than 128"},
                                     {required.dump(), "at most 4096"},
                                     {big_enum.dump(), "at most 4096"}}) {
        std::string what;
        const double s = timed([&] { weft::grammar::parse(weft::json_schema_to_grammar(text)); }, what);
        EXPECT_NE(what.find(says), std::string::npos) << what;
        // minutes before the size checks; a generous bound, since a loaded 2-core machine is slow
        EXPECT_LT(s, 30.0) << says;
    }
    // within the limits: 4,000 required properties and a 4,000-string enum become grammars that parse
    json allowed = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
    for (int i = 0; i < 4000; ++i) {
        allowed["properties"]["p" + std::to_string(i)] = {{"enum", {"a", "b"}}};
        allowed["required"].push_back("p" + std::to_string(i));
    }
    allowed["properties"]["e"] = {{"enum", json::array()}};
    for (int i = 0; i < 4000; ++i) allowed["properties"]["e"]["enum"].push_back("v" + std::to_string(i));
    std::string what;
    const double s = timed([&] { weft::grammar::parse(weft::json_schema_to_grammar(allowed.dump())); }, what);
    EXPECT_EQ(what, "");
    EXPECT_LT(s, 30.0);
}

// Item 3: cancel_grammar_work() (what `weft serve` calls on SIGTERM) stops conversions and parses,
// so a shutdown does not wait for them. It is irreversible, so it runs in a child process.
TEST(HostileGrammars, GrammarWorkIsCancellable) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        int failures = 0;
        weft::cancel_grammar_work();
        for (int which = 0; which < 2; ++which) {
            try {
                if (which == 0)
                    weft::json_schema_to_grammar(
                        R"({"type": "object", "properties": {"a": {"type": "string"}}})");
                else
                    weft::grammar::parse("root ::= \"a\"");
                ++failures;
            } catch (const weft::error &e) {
                if (std::string(e.what()).find("cancelled") == std::string::npos) ++failures;
            }
        }
        std::_Exit(failures);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "a conversion or parse went on after cancel_grammar_work()";
}

class HostileFiles : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("weft-hostile-files-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        const auto r = weft::test::run_weft({"synth", path("model.gguf"), "--embd", "32", "--layers", "1",
                                             "--heads", "2", "--kv-heads", "1", "--ff", "64", "--vocab",
                                             "300", "--lora", path("adapter.gguf"), "--rank", "2"});
        ASSERT_EQ(r.status, 0) << r.err;
        ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string &name) const { return (dir_ / name).string(); }

    fs::path dir_;
};

// Item 5: export-lora never writes onto one of its inputs, however the output path is spelled (the
// same path, another spelling, a hard link, a symbolic link): compared by inode.
TEST_F(HostileFiles, ExportLoraOutputIsNeverAnInput) {
    const std::string model = path("model.gguf"), adapter = path("adapter.gguf");
    const auto size_before = fs::file_size(model);
    fs::create_hard_link(model, path("hard.gguf"));
    fs::create_symlink(model, path("soft.gguf"));
    for (const std::string &out :
         {model, dir_.string() + "/./model.gguf", path("hard.gguf"), path("soft.gguf"), adapter}) {
        const auto r = weft::test::run_weft({"export-lora", "-m", model, "--lora", adapter, "-o", out});
        EXPECT_NE(r.status, 0) << out;
        EXPECT_NE(r.err.find("is the input"), std::string::npos) << out << ": " << r.err;
    }
    EXPECT_EQ(fs::file_size(model), size_before);
    EXPECT_TRUE(fs::is_symlink(path("soft.gguf")));
    const auto ok =
        weft::test::run_weft({"export-lora", "-m", model, "--lora", adapter, "-o", path("merged.gguf")});
    EXPECT_EQ(ok.status, 0) << ok.err;
}

// Item 6: a FIFO given as any file argument of any command is refused at once (quantize --imatrix on
// one used to wait for a writer forever).
TEST_F(HostileFiles, FifoFileArgumentsAreRefusedAtOnce) {
    const std::string model = shell_quote(path("model.gguf")), fifo = shell_quote(path("fifo"));
    const std::string out = shell_quote(path("out.gguf"));
    for (const std::string &args :
         {"quantize " + model + " " + out + " Q8_0 --imatrix " + fifo,
          "quantize " + fifo + " " + out + " Q8_0", "imatrix -m " + model + " -f " + fifo,
          "perplexity -m " + model + " -f " + fifo, "tokenize -m " + model + " -f " + fifo, "inspect " + fifo,
          "run -m " + model + " -p hi --grammar-file " + fifo, "run -m " + model + " -p hi --lora " + fifo,
          "run -m " + model + " -p hi --lora-scaled " + fifo + " 1",
          "run -m " + model + " -p hi --prompt-cache " + fifo, "run -m " + model + " -p hi --mmproj " + fifo,
          "run -m " + fifo + " -p hi", "chat -m " + model + " --load " + fifo,
          "export-lora -m " + model + " --lora " + fifo + " -o " + out, "serve -m " + fifo + " --port 0"}) {
        SCOPED_TRACE(args);
        const auto t0 = std::chrono::steady_clock::now();
        const auto r = weft::test::run_weft_launched("timeout -s KILL 20", args);
        EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
        EXPECT_NE(r.status, 0);
        EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
    }
}

}  // namespace hostile_input_tests
