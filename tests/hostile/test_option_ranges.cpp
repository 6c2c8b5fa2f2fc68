// tests/hostile/test_option_ranges.cpp — numeric options out of range are refused before anything
// is allocated or spawned (100000 threads, a 4-billion-token context, a wrapped synth context).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/run_weft.h"

namespace {

using namespace std::chrono_literals;

TEST(OptionRanges, HugeValuesAreRefusedQuickly) {
    for (const std::string &args :
         {std::string("chat -t 100000"), std::string("chat -c 4294967295"),
          std::string("run -c 4294967295 -p hi"), std::string("serve -c 4294967295 --port 0"),
          // (a regular file: /dev/null is now refused as a file argument before the range is checked)
          "logits -m " + weft::test::shell_quote(WEFT_SOURCE_DIR "/README.md") + " -c 4294967295",
          std::string("synth /tmp/never.gguf --ctx 99999999999"),
          std::string("synth /tmp/never.gguf --embd 0"), std::string("synth /tmp/never.gguf --vocab 10")}) {
        SCOPED_TRACE(args);
        const auto t0 = std::chrono::steady_clock::now();
        const weft::test::run_result r = weft::test::run_weft_shell(args);
        EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
        EXPECT_NE(r.status, 0);
        EXPECT_NE(r.err.find("not in range"), std::string::npos) << r.err;
    }
}

}  // namespace
