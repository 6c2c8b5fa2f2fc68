// tests/tools/test_mpi_pipeline_cli.cpp — `mpirun -np 2|3 weft logits ...`: the model's blocks split
// between MPI ranks give the single process's logits and greedy tokens byte for byte, a chosen
// split too, and a rank that cannot load its file ends the whole job with rank 0 naming it.
// Skips where weft was built without MPI or mpirun is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "common/run_weft.h"

namespace {

namespace fs = std::filesystem;
using weft::test::run_result;
using weft::test::shell_quote;

// One machine, ranks over shared memory; `timeout` so that a hang fails instead of blocking CI. In
// a sanitizer build the ranks keep every check but the leak check at exit: Open MPI's allocations
// outlive MPI_Finalize in components it has unloaded by then, whose frames LeakSanitizer cannot
// name (so no suppression matches them); other builds ignore ASAN_OPTIONS.
std::string mpirun(int n_ranks) {
    const char *asan = std::getenv("ASAN_OPTIONS");
    const std::string options = std::string(asan ? asan : "") + (asan && *asan ? ":" : "") + "detect_leaks=0";
    return "ASAN_OPTIONS=" + shell_quote(options) +
           " timeout 120 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np " +
           std::to_string(n_ranks);
}

#define WEFT_REQUIRE_MPI()                                                                 \
    do {                                                                                   \
        if (!WEFT_TEST_MPI) GTEST_SKIP() << "weft was built without MPI (libopenmpi-dev)"; \
        if (std::system("command -v mpirun > /dev/null 2>&1") != 0)                        \
            GTEST_SKIP() << "mpirun not found (openmpi-bin)";                              \
        WEFT_REQUIRE_FIXTURES();                                                           \
    } while (0)

std::string logits_args(const std::string &model, const std::string &extra = "") {
    return "logits -m " + shell_quote(weft::test::fixture("models/" + model)) +
           " -p 'Once upon a time' -n 6 -t 1 --json " + extra;
}

TEST(MpiPipelineCli, LogitsIdenticalOnTwoAndThreeRanks) {
    WEFT_REQUIRE_MPI();
    int checked = 0;
    for (const auto &entry : fs::directory_iterator(weft::test::fixtures_dir() / "models")) {
        const fs::path &p = entry.path();
        const std::string name = p.filename().string();
        if (p.extension() != ".gguf" || weft::test::fixture_has_unimplemented_types(p)) continue;
        if (name.rfind("tiny-bert", 0) == 0) continue;  // an encoder: `weft embed`, not logits
        // of tiny-llama's weight types, a float, a block and a K-quant one: a split moves blocks, and
        // every type loads and runs alike on a rank (each mpirun costs a second or two on 2 cores)
        const bool llama_types = name.rfind("tiny-llama-", 0) == 0 && name.rfind("tiny-llama-moe", 0) != 0;
        if (llama_types && name != "tiny-llama-F32.gguf" && name != "tiny-llama-F16.gguf" &&
            name != "tiny-llama-Q8_0.gguf" && name != "tiny-llama-Q4_K.gguf")
            continue;
        // the suite's share: every architecture in F32, tiny-llama in Q4_K too (WEFT_LONG_TESTS=1: the
        // other architectures' Q8_0 files and tiny-llama's F16 and Q8_0 as well)
        const bool in_share = name == "stories260K.gguf" || name == "tiny-llama-Q4_K.gguf" ||
                              (name.size() > 9 && name.compare(name.size() - 9, 9, "-F32.gguf") == 0);
        if (!in_share && !weft::test::long_tests()) continue;
        SCOPED_TRACE(name);
        const run_result alone = weft::test::run_weft_shell(logits_args(name));
        ASSERT_EQ(alone.status, 0) << alone.err;
        // every fixture has 2 blocks or more; the Llama ones 4 (stories260K 5): 3 ranks too
        const bool four_blocks = name.rfind("tiny-llama", 0) == 0 || name == "stories260K.gguf";
        for (int n_ranks : {2, 3}) {
            if (n_ranks == 3 && (!four_blocks || name.find("moe") != std::string::npos)) continue;
            const run_result piped = weft::test::run_weft_launched(mpirun(n_ranks), logits_args(name));
            ASSERT_EQ(piped.status, 0) << n_ranks << " ranks: " << piped.err;
            EXPECT_EQ(piped.out, alone.out) << n_ranks << " ranks";
            EXPECT_NE(piped.err.find("rank 1 of " + std::to_string(n_ranks)), std::string::npos) << piped.err;
            ++checked;
        }
    }
    EXPECT_GE(checked, weft::test::long_tests() ? 30 : 15);
}

TEST(MpiPipelineCli, ChosenSplitIsIdenticalToo) {
    WEFT_REQUIRE_MPI();
    const run_result alone = weft::test::run_weft_shell(logits_args("stories260K.gguf"));
    ASSERT_EQ(alone.status, 0) << alone.err;
    const run_result piped =
        weft::test::run_weft_launched(mpirun(2), logits_args("stories260K.gguf", "--split-layers 4,1"));
    ASSERT_EQ(piped.status, 0) << piped.err;
    EXPECT_EQ(piped.out, alone.out);
    EXPECT_NE(piped.err.find("rank 0 of 2: blocks [0, 4) of 5"), std::string::npos) << piped.err;
    EXPECT_NE(piped.err.find("rank 1 of 2: blocks [4, 5) of 5"), std::string::npos) << piped.err;
    const run_result bad =
        weft::test::run_weft_launched(mpirun(2), logits_args("stories260K.gguf", "--split-layers 1,2,3"));
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.err.find("--split-layers has 3 values for 2 ranks"), std::string::npos) << bad.err;
}

// A per-process weight limit that the whole model exceeds: refused alone, run on two ranks.
TEST(MpiPipelineCli, MaxMemoryRefusedAloneRunsOnTwoRanks) {
    WEFT_REQUIRE_MPI();
    const run_result alone = weft::test::run_weft_shell(logits_args("stories260K.gguf", "--max-memory 0.9M"));
    EXPECT_NE(alone.status, 0);
    EXPECT_NE(alone.err.find("blocks [0, 5) of 5 need 1.1 MiB of weights, more than the limit of 0.9 MiB"),
              std::string::npos)
        << alone.err;
    const run_result whole = weft::test::run_weft_shell(logits_args("stories260K.gguf"));
    const run_result piped =
        weft::test::run_weft_launched(mpirun(2), logits_args("stories260K.gguf", "--max-memory 0.9M"));
    ASSERT_EQ(piped.status, 0) << piped.err;
    EXPECT_EQ(piped.out, whole.out);
}

// A command that does not split a model refuses to run once per rank.
TEST(MpiPipelineCli, OtherCommandsRefuseSeveralRanks) {
    WEFT_REQUIRE_MPI();
    const run_result r = weft::test::run_weft_launched(
        mpirun(2),
        "tokenize -m " + shell_quote(weft::test::fixture("models/stories260K.gguf")) + " -p 'Hello'");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("weft tokenize: error: started by mpirun as one of several ranks"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
}

// Rank 1 given a truncated copy of the file (as a host with a broken download would be): the job
// ends with an error on rank 0 that names rank 1 and the problem, instead of hanging.
TEST(MpiPipelineCli, OneRankFailingEndsTheJobWithAMessage) {
    WEFT_REQUIRE_MPI();
    const fs::path good = weft::test::fixture("models/stories260K.gguf");
    const fs::path bad =
        fs::temp_directory_path() / ("weft-mpi-truncated-" + std::to_string(::getpid()) + ".gguf");
    {
        std::ifstream in(good, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ofstream(bad, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    }
    const std::string rank0 = logits_args("stories260K.gguf");
    std::string rank1 = rank0;
    rank1.replace(rank1.find(shell_quote(good.string())), shell_quote(good.string()).size(),
                  shell_quote(bad.string()));
    // MPMD: one process with each command line
    const std::string cmd = mpirun(1) + " " + shell_quote(WEFT_BINARY) + " " + rank0 + " : -np 1 " +
                            shell_quote(WEFT_BINARY) + " " + rank1;
    const run_result r = weft::test::run_shell(cmd);
    fs::remove(bad);
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.status, 124) << "the job hung until the timeout";
    EXPECT_NE(r.err.find("weft logits: error: rank 1: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("weft-mpi-truncated"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace
