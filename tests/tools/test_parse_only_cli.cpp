// tests/tools/test_parse_only_cli.cpp — WEFT_PARSE_ONLY=1 (tools/weft/command.h, parse_only): every
// command stops once its arguments are parsed and checked, exit 0, having loaded, read and written
// nothing; a bad argument still fails with CLI11's message. The docs_commands test
// (scripts/check-docs-commands.py) runs every `./build/weft` command of README.md and docs/ this way.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/run_weft.h"

namespace {

using weft::test::run_shell;
using weft::test::shell_quote;

weft::test::run_result run_parse_only(const std::string &args) {
    return run_shell("WEFT_PARSE_ONLY=1 " + shell_quote(WEFT_BINARY) + " " + args);
}

// Every command of `weft --help`, each with arguments that parse (placeholder files that do not
// exist: parse-only mode does not look at them).
const std::vector<std::string> &commands_that_parse() {
    static const std::vector<std::string> lines = {
        "run -m /nonexistent/M.gguf -p hi -n 4 --temp 0",
        "chat -m /nonexistent/M.gguf --system hi",
        "serve -m /nonexistent/M.gguf --port 1",
        "bench -m /nonexistent/M.gguf -p 8 -n 8",
        "quantize /nonexistent/IN.gguf /nonexistent/OUT.gguf q4_0",
        "inspect /nonexistent/M.gguf",
        "tokenize -m /nonexistent/M.gguf -p hi",
        "logits -m /nonexistent/M.gguf -p hi",
        "graph --demo",
        "synth /nonexistent/dir/out.gguf --arch llama",
        "embed -m /nonexistent/M.gguf -p hi",
        "perplexity -m /nonexistent/M.gguf -f /nonexistent/text.txt",
        "imatrix -m /nonexistent/M.gguf -f /nonexistent/text.txt",
        "export-lora -m /nonexistent/M.gguf --lora /nonexistent/A.gguf -o /nonexistent/out.gguf",
        "devices",
        "run -m /nonexistent/M.gguf -p hi --lora-scaled /nonexistent/a.gguf 0.5 --lora-scaled "
        "/nonexistent/b.gguf 1.2",
        "gguf-split --merge /nonexistent/a-00001-of-00002.gguf /nonexistent/out.gguf",
    };
    return lines;
}

TEST(ParseOnlyCli, EveryCommandStopsAfterItsArgumentsWithoutTouchingFiles) {
    const auto help = weft::test::run_weft({"--help"});
    ASSERT_EQ(help.status, 0) << help.err;
    for (const std::string &line : commands_that_parse()) {
        const std::string name = line.substr(0, line.find(' '));
        EXPECT_NE(help.out.find("  " + name + " "), std::string::npos)
            << name << " is not a command any more";
        const auto r = run_parse_only(line);
        EXPECT_EQ(r.status, 0) << line << "\n" << r.err;
        EXPECT_EQ(r.out, "") << line;  // nothing generated, listed or printed
        // the same arguments without parse-only: each fails on its missing file
        if (name != "graph" && name != "devices") {
            const auto real = weft::test::run_weft_shell(line);
            EXPECT_NE(real.status, 0) << line;
        }
    }
    // and every command of `weft --help` is in the list above
    std::set<std::string> listed;
    for (const std::string &line : commands_that_parse())
        if (help.out.find("  " + line.substr(0, line.find(' ')) + " ") != std::string::npos)
            listed.insert(line.substr(0, line.find(' ')));
    size_t in_help = 0;
    for (size_t at = help.out.find("commands:\n"); (at = help.out.find("\n  ", at)) != std::string::npos;
         ++at)
        ++in_help;
    EXPECT_EQ(listed.size(), in_help) << help.out;
}

TEST(ParseOnlyCli, WritesNothing) {
    const std::filesystem::path out = std::filesystem::temp_directory_path() / "weft-parse-only-synth.gguf";
    std::filesystem::remove(out);
    const auto r = run_parse_only("synth " + shell_quote(out.string()) + " --arch llama --layers 1");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(ParseOnlyCli, BadArgumentsStillFail) {
    for (const std::string &line :
         {std::string("run --no-such-option"), std::string("run -n not-a-number"),
          std::string("quantize only-one-file"), std::string("synth x.gguf --layers 0"),
          std::string("synth x.gguf --arch lama"), std::string("serve -ctk q9_9")}) {
        const auto r = run_parse_only(line);
        EXPECT_NE(r.status, 0) << line;
        EXPECT_NE(r.err, "") << line;
    }
    const auto unknown = run_parse_only("no-such-command");
    EXPECT_NE(unknown.status, 0);
}

TEST(ParseOnlyCli, ZeroOrEmptyMeansOff) {
    for (const std::string value : {"0", ""}) {
        const auto r = run_shell("WEFT_PARSE_ONLY=" + value + " " + shell_quote(WEFT_BINARY) +
                                 " run -m /nonexistent/M.gguf -p hi");
        EXPECT_NE(r.status, 0) << "WEFT_PARSE_ONLY=" << value;
    }
}

}  // namespace
