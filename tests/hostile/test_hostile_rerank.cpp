// tests/hostile/test_hostile_rerank.cpp — `weft serve --reranking` (issue 41, item 4): the routes
// /v1/rerank, /rerank, /v1/reranking and /reranking answer in the reference server's shapes with
// the scores the reference gives (tests/data/rerank/reranker-F32.json), and bad requests — no
// query, documents that are not an array of strings, a huge or negative top_n, a document longer
// than the context — get a 4xx in OpenAI's error shape, never a 500. A server of a model that is not
// a reranker, or one started without --reranking, answers 501 as the reference does; a reranker
// refuses chat and embeddings; --reranking with a model that is not a reranker does not start.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/run_weft.h"
#include "common/served_model.h"

namespace hostile_rerank_tests {

using json = nlohmann::json;
namespace fs = std::filesystem;
using weft::test::served_model;

class RerankServer : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new fs::path(fs::temp_directory_path() / ("weft-rerank-serve-" + std::to_string(::getpid())));
        fs::create_directories(*dir_);
        fixture_ =
            json::parse(std::ifstream(std::string(WEFT_SOURCE_DIR) + "/tests/data/rerank/reranker-F32.json"),
                        nullptr, false);
        // the reranker of the fixture (its recorded synth flags) and a plain embedding model
        const std::string flags = fixture_.is_object() ? fixture_.value("synth_args", "") : "";
        synth_ok_ =
            !flags.empty() &&
            weft::test::run_weft_shell("synth " + weft::test::shell_quote(path("rr.gguf")) + " " + flags)
                    .status == 0 &&
            weft::test::run_weft_shell(
                "synth " + weft::test::shell_quote(path("emb.gguf")) +
                " --arch bert --embd 64 --layers 2 --heads 4 --ff 128 --vocab 512 --ctx 128")
                    .status == 0;
    }
    static void TearDownTestSuite() {
        fs::remove_all(*dir_);
        delete dir_;
    }
    void SetUp() override { ASSERT_TRUE(synth_ok_) << "weft synth failed (or the fixture is missing)"; }

    static std::string path(const std::string &name) { return (*dir_ / name).string(); }
    static std::vector<std::string> args(const std::string &model, std::vector<std::string> more = {}) {
        std::vector<std::string> a = {"-m", path(model), "--host", "127.0.0.1", "--port", "0", "-t", "1"};
        a.insert(a.end(), more.begin(), more.end());
        return a;
    }
    static json post(served_model &s, const std::string &route, const std::string &body, int *status) {
        auto res = s.client().Post(route, body, "application/json");
        *status = res ? res->status : -1;
        return res ? json::parse(res->body, nullptr, false) : json();
    }

    static inline fs::path *dir_ = nullptr;
    static inline bool synth_ok_ = false;
    static inline json fixture_;
};

TEST_F(RerankServer, AnswersAsTheReferenceServer) {
    served_model server(*dir_, args("rr.gguf", {"--reranking"}));
    ASSERT_TRUE(server.healthy()) << server.log();
    const json request = {{"model", "m"}, {"query", fixture_["query"]}, {"documents", fixture_["documents"]}};
    int status = 0;
    const json got = post(server, "/v1/rerank", request.dump(), &status);
    ASSERT_EQ(status, 200) << got.dump();
    EXPECT_EQ(got["model"], "m");
    EXPECT_EQ(got["object"], "list");
    const json &want = fixture_["answer"];
    EXPECT_EQ(got["usage"], want["usage"]);
    ASSERT_EQ(got["results"].size(), want["results"].size());
    double err = 0, ref = 0;
    for (size_t i = 0; i < want["results"].size(); ++i) {  // the reference's order, best first
        EXPECT_EQ(got["results"][i]["index"], want["results"][i]["index"]) << i;
        const double a = got["results"][i]["relevance_score"], b = want["results"][i]["relevance_score"];
        err += (a - b) * (a - b);
        ref += b * b;
    }
    EXPECT_LE(err / ref, 1e-6);

    // top_n keeps the best; more than there are is all of them; every alias route answers the same
    json two = request;
    two["top_n"] = 2;
    const json best = post(server, "/rerank", two.dump(), &status);
    ASSERT_EQ(status, 200);
    ASSERT_EQ(best["results"].size(), 2u);
    EXPECT_EQ(best["results"][0], got["results"][0]);
    two["top_n"] = uint64_t(1) << 63;
    EXPECT_EQ(post(server, "/v1/reranking", two.dump(), &status)["results"], got["results"]);
    EXPECT_EQ(status, 200);
    EXPECT_EQ(post(server, "/reranking", request.dump(), &status)["results"], got["results"]);

    // Text Embeddings Inference's request ("texts") gets its answer: a bare array, "score", the text
    const json tei = post(
        server, "/rerank",
        json{{"query", fixture_["query"]}, {"texts", fixture_["documents"]}, {"return_text", true}}.dump(),
        &status);
    ASSERT_EQ(status, 200) << tei.dump();
    ASSERT_TRUE(tei.is_array());
    ASSERT_EQ(tei.size(), fixture_["documents"].size());
    EXPECT_EQ(tei[0]["index"], got["results"][0]["index"]);
    EXPECT_EQ(tei[0]["score"], got["results"][0]["relevance_score"]);
    EXPECT_EQ(tei[0]["text"], fixture_["documents"][tei[0]["index"].get<size_t>()]);

    // a reranker neither generates nor embeds
    EXPECT_EQ(
        post(server, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})", &status)
            .contains("error"),
        true);
    EXPECT_EQ(status, 400);
    EXPECT_TRUE(post(server, "/v1/embeddings", R"({"input": "hi"})", &status).contains("error"));
    EXPECT_EQ(status, 400);
    EXPECT_FALSE(server.log_has({"-> 500"})) << server.log();
    EXPECT_TRUE(server.stop()) << server.log();
}

TEST_F(RerankServer, BadRequestsGetA4xxInOpenAisShape) {
    served_model server(*dir_, args("rr.gguf", {"--rerank"}));
    ASSERT_TRUE(server.healthy()) << server.log();
    std::string many_words;
    for (int i = 0; i < 400; ++i) many_words += "word ";
    const std::vector<std::string> bodies = {
        "{not json",
        "[1]",
        R"("text")",
        R"({"documents": ["a"]})",
        R"({"query": 5, "documents": ["a"]})",
        R"({"query": null, "documents": ["a"]})",
        R"({"query": "q"})",
        R"({"query": "q", "documents": "a"})",
        R"({"query": "q", "documents": []})",
        R"({"query": "q", "documents": [1, 2]})",
        R"({"query": "q", "documents": ["a", 5]})",
        R"({"query": "q", "documents": [{"text": "a"}]})",
        R"({"query": "q", "documents": [null]})",
        R"({"query": "q", "texts": 5})",
        R"({"query": "q", "documents": ["a"], "top_n": -1})",
        R"({"query": "q", "documents": ["a"], "top_n": -9223372036854775808})",
        R"({"query": "q", "documents": ["a"], "top_n": "2"})",
        R"({"query": "q", "documents": ["a"], "top_n": 1.5})",
        R"({"query": "q", "documents": ["a"], "top_n": 1e308})",
        R"({"query": "q", "texts": ["a"], "return_text": "yes"})",
        json{{"query", "q"}, {"documents", {"a", many_words}}}.dump(),  // longer than the context (128)
        json{{"query", many_words}, {"documents", {"a"}}}.dump(),       // so is the query
        "{\"query\": \"\xff\xfe\", \"documents\": [\"a\"]}",            // not UTF-8
        "{\"query\": \"q\", \"documents\": [\"\\ud800\"]}",             // a lone surrogate
    };
    for (const char *route : {"/v1/rerank", "/rerank"})
        for (const std::string &body : bodies) {
            SCOPED_TRACE(std::string(route) + " " + body.substr(0, 120));
            auto res = server.client().Post(route, body, "application/json");
            ASSERT_TRUE(res) << "no answer; log:\n" << server.log();
            EXPECT_GE(res->status, 400) << res->body;
            EXPECT_LT(res->status, 500) << res->body;
            const json e = json::parse(res->body, nullptr, false);
            EXPECT_TRUE(e.is_object() && e["error"].is_object() && e["error"]["message"].is_string())
                << res->body;
        }
    // still serving, and nothing was a 500
    int status = 0;
    post(server, "/v1/rerank", R"({"query": "q", "documents": ["a", ""]})", &status);
    EXPECT_EQ(status, 200);
    EXPECT_FALSE(server.log_has({"-> 500"})) << server.log();
    EXPECT_TRUE(server.stop()) << server.log();
}

TEST_F(RerankServer, ServersThatDoNotRerankAnswer501) {
    for (const std::vector<std::string> &a : {args("rr.gguf"), args("emb.gguf")}) {
        served_model server(*dir_, a);
        ASSERT_TRUE(server.healthy()) << server.log();
        int status = 0;
        const json e = post(server, "/v1/rerank", R"({"query": "q", "documents": ["a"]})", &status);
        EXPECT_EQ(status, 501) << e.dump();
        EXPECT_EQ(e["error"]["type"], "not_supported_error") << e.dump();
        EXPECT_NE(e["error"]["message"].get<std::string>().find("reranking"), std::string::npos) << e.dump();
        EXPECT_TRUE(server.stop()) << server.log();
    }
    // --reranking with a model that is not a reranker: a clear error at the start
    const auto r = weft::test::run_weft(
        {"serve", "-m", path("emb.gguf"), "--reranking", "--host", "127.0.0.1", "--port", "0", "-t", "1"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("--reranking needs a reranker"), std::string::npos) << r.err;
}

}  // namespace hostile_rerank_tests
