// tools/weft/cmd_embed.cpp — `weft embed -m MODEL -p TEXT`: an embedding model's vector for a text.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/file_arguments.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/embeddings.h"

namespace weft::tool {
namespace {

// `--rerank QUERY --document TEXT ...`: a reranker's score of each document, all batched.
int rerank_main(const std::string &model_path, const std::string &query,
                const std::vector<std::string> &documents, bool json, int n_threads) {
    if (documents.empty()) throw error("--rerank needs at least one --document");
    auto model = weft::model::load(model_path);
    const model_hparams &hp = model->hparams();
    if (!hp.ranks())
        throw error(model_path +
                    ": --rerank needs a reranker (a bert with a classification head, pooling rank)");
    std::vector<std::vector<token>> sequences;
    for (const std::string &d : documents) sequences.push_back(rerank_tokens(*model, query, d));
    inference_params ip;
    ip.n_ctx = uint32_t(hp.n_ctx_train);
    ip.n_batch = ip.n_ubatch = ip.n_ctx;
    ip.n_seq_max = 16;
    ip.n_threads = ip.n_threads_batch = n_threads;
    inference_context ctx(*model, ip);
    const std::vector<std::vector<float>> scores = compute_rank_scores(ctx, sequences);
    size_t n_tokens = 0;
    nlohmann::json results = nlohmann::json::array();
    for (size_t i = 0; i < documents.size(); ++i) {
        n_tokens += sequences[i].size();
        if (json)
            results.push_back(
                {{"index", i}, {"relevance_score", scores[i].front()}, {"document", documents[i]}});
        else
            std::printf("%.7g\n", double(scores[i].front()));
    }
    if (json) std::printf("%s\n", nlohmann::json{{"query", query}, {"results", results}}.dump().c_str());
    std::fprintf(stderr, "%zu documents, %zu tokens, pooling rank\n", documents.size(), n_tokens);
    return 0;
}

int embed_main(int argc, char **argv) {
    CLI::App app{
        "The embedding of a text by an embedding model (bert): every token's last hidden state and\n"
        "their pooling (the model's own, from pooling_type, unless --pooling says otherwise).\n"
        "Prints the pooled vector, or with --json an object with prompt_tokens, pooled_embedding and\n"
        "token_embeddings. A reranker (pooling rank) prints its score of the text; with --rerank QUERY\n"
        "and --document TEXT (repeated) its score of each document for the query, one line each in\n"
        "the documents' order (tokenized as the reference server's /v1/rerank does).",
        "weft embed"};
    std::string model_path, prompt, pooling_arg, query;
    std::vector<std::string> documents;
    bool normalize = false, json = false;
    int n_threads = 2;
    app.add_option("-m,--model", model_path, "embedding model (GGUF)")
        ->required()
        ->check(weft::tool::input_file());
    auto *prompt_opt = app.add_option("-p,--prompt", prompt, "the text");
    auto *rerank_opt =
        app.add_option("--rerank", query, "a reranker: the query the --document texts are scored for")
            ->excludes(prompt_opt);
    app.add_option("--document", documents, "a reranker: a document to score for --rerank (repeat it)")
        ->needs(rerank_opt);
    app.add_option("--pooling", pooling_arg, "none, mean, cls, last or rank (default: the model's)");
    app.add_flag("--normalize", normalize, "scale every vector to unit length (L2)");
    app.add_flag("--json", json, "print JSON (prompt_tokens, pooled_embedding, token_embeddings)");
    app.add_option("-t,--threads", n_threads, "threads")->capture_default_str()->check(CLI::Range(1, 512));
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
    if (rerank_opt->count() == 0 && prompt_opt->count() == 0)
        throw error("give the text with -p, or --rerank");
    if (rerank_opt->count() > 0) return rerank_main(model_path, query, documents, json, n_threads);

    auto model = weft::model::load(model_path);
    const model_hparams &hp = model->hparams();
    pooling_kind pooling = pooling_kind(hp.pooling_type);
    if (!pooling_arg.empty()) {
        const auto p = pooling_from_name(pooling_arg);
        if (!p) throw error("--pooling " + pooling_arg + ": not one of none, mean, cls, last, rank");
        pooling = *p;
    }
    const std::vector<token> tokens = model->vocab().tokenize(prompt, true, true);
    if (tokens.empty()) throw error("the prompt gives no tokens");
    if (int64_t(tokens.size()) > hp.n_ctx_train)
        throw error("the prompt has " + std::to_string(tokens.size()) + " tokens; the model takes at most " +
                    std::to_string(hp.n_ctx_train));
    inference_params ip;
    ip.n_ctx = uint32_t(hp.n_ctx_train);
    ip.n_batch = ip.n_ubatch = ip.n_ctx;
    ip.n_threads = ip.n_threads_batch = n_threads;
    inference_context ctx(*model, ip);
    const embedding_result r = compute_embeddings(ctx, tokens, pooling, normalize);

    if (json) {
        nlohmann::json j;
        j["prompt"] = prompt;
        j["prompt_tokens"] = tokens;
        j["n_embd"] = hp.n_embd;
        j["pooling"] = pooling_name(pooling);
        j["normalized"] = normalize;
        j["pooled_embedding"] = r.pooled;
        j["token_embeddings"] = r.token_embeddings;
        std::printf("%s\n", j.dump().c_str());
    } else {
        const std::vector<float> &v = pooling == pooling_kind::none ? r.token_embeddings.back() : r.pooled;
        std::string line;
        for (size_t i = 0; i < v.size(); ++i) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%s%.7g", i ? " " : "", double(v[i]));
            line += buf;
        }
        std::printf("%s\n", line.c_str());
    }
    std::fprintf(stderr, "%zu tokens, %lld dims, pooling %s%s\n", tokens.size(),
                 static_cast<long long>(hp.n_embd), pooling_name(pooling), normalize ? ", normalized" : "");
    return 0;
}

const bool registered_embed =
    register_command({"embed", "an embedding model's vector for a text (bert)", &embed_main});

}  // namespace
}  // namespace weft::tool
