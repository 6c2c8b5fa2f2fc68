// tests/tools/test_gguf_split_cli.cpp — `weft gguf-split` end to end on a fixture model: split, load
// (the same logits as the single file), inspect, merge back byte for byte; and, where the 2026
// reference engine is present, sets its gguf-split writes load in weft and ours merge with it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "common/run_weft.h"
#include "weft/gguf/gguf.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using test::run_shell;
using test::run_weft;
using test::shell_quote;

#define WEFT_SPLIT_REQUIRE_BINARY()                                               \
    do {                                                                          \
        if (!fs::exists(WEFT_BINARY))                                             \
            GTEST_SKIP() << "the weft executable is not built at " << WEFT_BINARY \
                         << " (cmake --build <dir> --target weft)";               \
    } while (0)

// A fresh directory, removed at scope exit.
struct split_scratch_dir {
    fs::path path = fs::temp_directory_path() /
                    ("weft-gguf-split-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    split_scratch_dir() { fs::create_directories(path); }
    ~split_scratch_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string file(const std::string &name) const { return (path / name).string(); }
    static inline int counter = 0;
};

std::string split_fixture_model() {
    return test::fixture("models/tiny-llama-F32.gguf");
}

// `weft logits --json`: every prompt position's logits and greedy tokens, as text.
std::string split_logits_json(const std::string &model) {
    const auto r = run_weft({"logits", "--json", "-m", model, "-p", "Once upon a time", "-n", "4"});
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out;
}

std::vector<std::string> split_files_in(const split_scratch_dir &dir) {
    std::vector<std::string> names;
    for (const auto &e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

TEST(GgufSplitCli, HelpDocumentsSplitMergeAndDryRun) {
    WEFT_SPLIT_REQUIRE_BINARY();
    const auto r = run_weft({"gguf-split", "--help"});
    EXPECT_EQ(r.status, 0);
    for (const char *expected : {"--split-max-size", "--split-max-tensors", "--merge", "--dry-run",
                                 "-00001-of-0000N.gguf", "split.tensors.count"})
        EXPECT_NE(r.out.find(expected), std::string::npos) << expected << " missing in\n" << r.out;
}

TEST(GgufSplitCli, SplitSetLoadsWithTheSameLogitsAndMergesBackByteForByte) {
    WEFT_SPLIT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    split_scratch_dir dir;
    const std::string out = dir.file("tiny");

    // a dry run prints the plan and writes nothing
    auto r = run_weft({"gguf-split", "--split-max-tensors", "10", "--dry-run", split_fixture_model(), out});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("n_split: 4"), std::string::npos) << r.out;  // 39 tensors
    EXPECT_NE(r.out.find("split 00004: n_tensors = 9"), std::string::npos) << r.out;
    EXPECT_TRUE(split_files_in(dir).empty());

    r = run_weft({"gguf-split", "--split-max-tensors", "10", split_fixture_model(), out});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(split_files_in(dir),
              (std::vector<std::string>{"tiny-00001-of-00004.gguf", "tiny-00002-of-00004.gguf",
                                        "tiny-00003-of-00004.gguf", "tiny-00004-of-00004.gguf"}));
    const std::string first = dir.file("tiny-00001-of-00004.gguf");
    EXPECT_EQ(split_logits_json(first), split_logits_json(split_fixture_model()));

    r = run_weft({"inspect", first});
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char *expected : {"split set:  4 parts", "tensors (39)", "blk.3.ffn_down.weight"})
        EXPECT_NE(r.out.find(expected), std::string::npos) << expected << " missing in\n" << r.out;

    const std::string merged = dir.file("merged.gguf");
    r = run_weft({"gguf-split", "--merge", first, merged});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(test::read_text_file(merged), test::read_text_file(split_fixture_model()));

    // outputs that are inputs are refused, and nothing is left half-written
    r = run_weft({"gguf-split", "--merge", first, dir.file("tiny-00003-of-00004.gguf")});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("refusing to overwrite"), std::string::npos) << r.err;
    const std::string one = dir.file("one-00001-of-00001.gguf");  // its own single part's name
    fs::copy_file(merged, one);
    r = run_weft({"gguf-split", "--split-max-tensors", "39", one, dir.file("one")});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("refusing to overwrite"), std::string::npos) << r.err;
    EXPECT_EQ(test::read_text_file(one), test::read_text_file(merged));
    fs::remove(dir.file("tiny-00002-of-00004.gguf"));
    r = run_weft({"logits", "-m", first});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("tiny-00002-of-00004.gguf: missing"), std::string::npos) << r.err;
    // a FIFO is not a model
    const std::string fifo = dir.file("fifo.gguf");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    r = run_weft({"gguf-split", "--split-max-tensors", "5", fifo, dir.file("x")});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
}

// The 2026 reference engine's gguf-split, runnable: its shared libraries' links are kept as small text
// files naming their targets in ../shared, so a directory of real links is made for LD_LIBRARY_PATH.
// Empty when the reference is not there.
std::string split_reference_tool(const split_scratch_dir &dir) {
    const fs::path ref = fs::path(WEFT_SOURCE_DIR) / ".." / "shared" / "bench" / "reference-2026";
    if (!fs::exists(ref / "llama-gguf-split")) return "";
    const fs::path libs = dir.path / "reference-libs";
    fs::create_directories(libs);
    for (const auto &e : fs::directory_iterator(ref)) {
        const std::string name = e.path().filename().string();
        if (name.find(".so") == std::string::npos) continue;
        std::string target = name;
        if (fs::file_size(e.path()) < 256) {  // a link kept as text
            target = test::read_text_file(e.path());
            while (!target.empty() && std::isspace(static_cast<unsigned char>(target.back())))
                target.pop_back();
        }
        fs::create_symlink(ref / target, libs / name);
    }
    return "LD_LIBRARY_PATH=" + shell_quote(libs.string()) + " " +
           shell_quote((ref / "llama-gguf-split").string());
}

TEST(GgufSplitCli, ReferenceSetsLoadAndTheReferenceMergesOurs) {
    WEFT_SPLIT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    split_scratch_dir dir;
    const std::string reference = split_reference_tool(dir);
    if (reference.empty()) GTEST_SKIP() << "../shared/bench/reference-2026/llama-gguf-split is not there";
    const std::string model = split_fixture_model();

    // a set the reference writes loads in weft with the same logits
    auto r = run_shell(reference + " --split-max-tensors 12 " + shell_quote(model) + " " +
                       shell_quote(dir.file("ref")));
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_EQ(split_logits_json(dir.file("ref-00001-of-00004.gguf")), split_logits_json(model));

    // weft writes the same parts, byte for byte
    r = run_weft({"gguf-split", "--split-max-tensors", "12", model, dir.file("ours")});
    ASSERT_EQ(r.status, 0) << r.err;
    for (int i = 1; i <= 4; ++i) {
        const std::string suffix = "-0000" + std::to_string(i) + "-of-00004.gguf";
        EXPECT_EQ(test::read_text_file(dir.file("ours" + suffix)),
                  test::read_text_file(dir.file("ref" + suffix)))
            << "part " << i;
    }
    // by size too (the reference counts decimal megabytes of padded tensor data)
    const auto plan = [&](const std::string &cmd) {
        const auto p = run_shell(cmd + " --split-max-size 3M --dry-run " + shell_quote(model) + " " +
                                 shell_quote(dir.file("plan")));
        EXPECT_EQ(p.status, 0) << p.err;
        std::string lines;  // the plan lines alone
        std::istringstream in(p.out);
        for (std::string line; std::getline(in, line);)
            if (line.starts_with("n_split") || line.starts_with("split 0")) lines += line + "\n";
        return lines;
    };
    const std::string ours_plan = plan(shell_quote(WEFT_BINARY) + " gguf-split");
    EXPECT_NE(ours_plan.find("n_split: 5"), std::string::npos) << ours_plan;
    EXPECT_EQ(ours_plan, plan(reference));

    // the reference merges weft's set into the original's tensors and metadata (it keeps the split
    // keys, with split.count 0)
    r = run_shell(reference + " --merge " + shell_quote(dir.file("ours-00001-of-00004.gguf")) + " " +
                  shell_quote(dir.file("ref-merged.gguf")));
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    const auto original = gguf_file::open(model), merged = gguf_file::open(dir.file("ref-merged.gguf"));
    EXPECT_EQ(merged->get_int("split.count"), 0);
    std::vector<std::string> keys;
    for (const auto &kv : merged->kvs())
        if (!gguf_is_split_key(kv.key)) keys.push_back(kv.key);
    std::vector<std::string> original_keys;
    for (const auto &kv : original->kvs()) original_keys.push_back(kv.key);
    EXPECT_EQ(keys, original_keys);
    ASSERT_EQ(merged->tensors().size(), original->tensors().size());
    for (const auto &t : original->tensors()) {
        const gguf_tensor_info *m = merged->find_tensor(t.name);
        ASSERT_NE(m, nullptr) << t.name;
        ASSERT_EQ(m->nbytes, t.nbytes);
        EXPECT_EQ(0, std::memcmp(merged->tensor_data(*m), original->tensor_data(t), t.nbytes)) << t.name;
    }
    // and weft loads the reference's merged file as one model (split.count 0: not a set)
    EXPECT_EQ(split_logits_json(dir.file("ref-merged.gguf")), split_logits_json(model));
}

}  // namespace
}  // namespace weft
