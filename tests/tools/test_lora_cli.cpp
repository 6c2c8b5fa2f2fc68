// tests/tools/test_lora_cli.cpp — LoRA from the command line as a user runs it: `weft synth --lora`
// writes an adapter, `weft run --lora` generates what the model merged by `weft export-lora` does,
// `--lora-scaled F 0` what the base does, `logits`/`perplexity` take the flags, and a bad adapter is
// an error naming it, with no output file left behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/run_weft.h"
#include "model/model_test_util.h"

namespace {

using weft::test::run_result;
using weft::test::shell_quote;
namespace fs = std::filesystem;

run_result weft_cmd(const std::string &args) {
    return weft::test::run_weft_shell(args);
}

struct files {
    weft::test::temp_file base{"lora-cli-base"}, adapter{"lora-cli-adapter"}, merged{"lora-cli-merged"};
    files() {
        const run_result r =
            weft_cmd("synth " + shell_quote(base.path()) +
                     " --arch llama --embd 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 300"
                     " --lora " +
                     shell_quote(adapter.path()) + " --rank 4");
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_NE(r.err.find("a LoRA adapter of rank 4"), std::string::npos) << r.err;
    }
};

std::string generate(const std::string &model, const std::string &extra) {
    const run_result r =
        weft_cmd("run -m " + shell_quote(model) + " -p 'Once upon a time' -n 24 --temp 0 -t 1 " + extra);
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out;
}

TEST(LoraCli, RunWithTheAdapterEqualsTheMergedModel) {
    files f;
    const run_result e = weft_cmd("export-lora -m " + shell_quote(f.base.path()) + " --lora " +
                                  shell_quote(f.adapter.path()) + " -o " + shell_quote(f.merged.path()));
    ASSERT_EQ(e.status, 0) << e.err;
    EXPECT_NE(e.err.find("14 weights merged"), std::string::npos) << e.err;
    const std::string base = generate(f.base.path(), "");
    const std::string adapted = generate(f.base.path(), "--lora " + shell_quote(f.adapter.path()));
    EXPECT_NE(adapted, base);
    EXPECT_EQ(adapted, generate(f.merged.path(), ""));
    EXPECT_EQ(generate(f.base.path(), "--lora-scaled " + shell_quote(f.adapter.path()) + " 0"), base);
    const run_result logits = weft_cmd("logits -m " + shell_quote(f.base.path()) +
                                       " -p 'Hello' -n 2 --lora " + shell_quote(f.adapter.path()));
    EXPECT_EQ(logits.status, 0) << logits.err;
    EXPECT_NE(logits.err.find("LoRA adapter"), std::string::npos) << logits.err;
}

TEST(LoraCli, BadAdaptersAreErrorsAndLeaveNoFile) {
    files f;
    // the model itself given as an adapter
    const run_result r =
        weft_cmd("run -m " + shell_quote(f.base.path()) + " -p hi -n 2 --lora " + shell_quote(f.base.path()));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("not a LoRA adapter"), std::string::npos) << r.err;
    // an adapter of another shape, through export-lora: an error, and no output file
    weft::test::temp_file wide_base("lora-cli-wide"), wide("lora-cli-wide-adapter");
    ASSERT_EQ(
        weft_cmd("synth " + shell_quote(wide_base.path()) +
                 " --arch llama --embd 128 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 300 --lora " +
                 shell_quote(wide.path()))
            .status,
        0);
    const run_result e = weft_cmd("export-lora -m " + shell_quote(f.base.path()) + " --lora " +
                                  shell_quote(wide.path()) + " -o " + shell_quote(f.merged.path()));
    EXPECT_NE(e.status, 0);
    EXPECT_NE(e.err.find("has shape"), std::string::npos) << e.err;
    EXPECT_FALSE(fs::exists(f.merged.path()));
    // --lora-scaled needs a number
    const run_result s = weft_cmd("run -m " + shell_quote(f.base.path()) + " -p hi -n 2 --lora-scaled " +
                                  shell_quote(f.adapter.path()) + " much");
    EXPECT_NE(s.status, 0);
    EXPECT_NE(s.err.find("not a number"), std::string::npos) << s.err;
}

}  // namespace
