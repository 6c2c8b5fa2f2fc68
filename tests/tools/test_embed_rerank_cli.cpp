// tests/tools/test_embed_rerank_cli.cpp — `weft embed --rerank QUERY --document TEXT ...`: a
// reranker's score of each document, one line each in the documents' order, as the reference
// server scored them (tests/data/rerank/reranker-F32.json; NMSE <= 1e-6); a model that is not a
// reranker is refused with a clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/run_weft.h"

namespace {

using weft::test::run_weft;
using weft::test::run_weft_shell;
using weft::test::shell_quote;

TEST(EmbedRerankCli, ScoresEachDocumentAsTheReference) {
    const nlohmann::json fx = nlohmann::json::parse(
        std::ifstream(std::string(WEFT_SOURCE_DIR) + "/tests/data/rerank/reranker-F32.json"), nullptr, false);
    ASSERT_TRUE(fx.is_object()) << "tests/data/rerank/reranker-F32.json is missing";
    const auto dir =
        std::filesystem::temp_directory_path() / ("weft-embed-rerank-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string rr = (dir / "rr.gguf").string(), emb = (dir / "emb.gguf").string();
    ASSERT_EQ(run_weft_shell("synth " + shell_quote(rr) + " " + fx["synth_args"].get<std::string>()).status,
              0);

    std::vector<std::string> args = {"embed", "-m", rr, "--rerank", fx["query"].get<std::string>()};
    for (const auto &d : fx["documents"]) args.insert(args.end(), {"--document", d.get<std::string>()});
    const auto r = run_weft(args);
    ASSERT_EQ(r.status, 0) << r.err;
    std::vector<double> got;
    std::istringstream lines(r.out);
    for (double v; lines >> v;) got.push_back(v);
    ASSERT_EQ(got.size(), fx["documents"].size()) << r.out;
    double err = 0, ref = 0;
    for (const auto &res : fx["answer"]["results"]) {
        const double want = res["relevance_score"], have = got.at(res["index"].get<size_t>());
        err += (have - want) * (have - want);
        ref += want * want;
    }
    EXPECT_LE(err / ref, 1e-6) << r.out;

    // an embedding model is not a reranker; --document without --rerank is a usage error
    ASSERT_EQ(run_weft_shell("synth " + shell_quote(emb) +
                             " --arch bert --embd 64 --layers 2 --heads 4 --ff 128 --vocab 512 --ctx 128")
                  .status,
              0);
    const auto refused = run_weft({"embed", "-m", emb, "--rerank", "q", "--document", "a"});
    EXPECT_NE(refused.status, 0);
    EXPECT_NE(refused.err.find("needs a reranker"), std::string::npos) << refused.err;
    EXPECT_NE(run_weft({"embed", "-m", rr, "-p", "x", "--document", "a"}).status, 0);
    std::filesystem::remove_all(dir);
}

}  // namespace
