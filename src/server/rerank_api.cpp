// src/server/rerank_api.cpp — /v1/rerank: read the body, score every document with the query
// through the reranker (all of them batched, runtime/embeddings.h), answer in llama-server's shape.
#include "server/rerank_api.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "server/openai_request.h"
#include "weft/runtime/embeddings.h"

namespace weft::server {

namespace {

// "documents" (or TEI's "texts"): a non-empty array of strings.
std::vector<std::string> documents_of(const json &body) {
    const auto it = body.contains("documents") ? body.find("documents") : body.find("texts");
    static const char *const wrong = "\"documents\" must be a non-empty string array";
    if (it == body.end() || !it->is_array() || it->empty()) throw request_error(wrong);
    std::vector<std::string> documents;
    for (const json &d : *it) {
        if (!d.is_string()) throw request_error(wrong);
        documents.push_back(d.get<std::string>());
    }
    return documents;
}

// "top_n": absent or null, every document; an integer >= 0, at most that many (more than there
// are: all of them).
size_t top_n_of(const json &body, size_t n_documents) {
    const auto it = body.find("top_n");
    if (it == body.end() || it->is_null()) return n_documents;
    if (!it->is_number_integer()) throw request_error("\"top_n\" must be an integer, got " + json_kind(*it));
    if (it->is_number_unsigned()) return size_t(std::min<uint64_t>(it->get<uint64_t>(), n_documents));
    const int64_t n = it->get<int64_t>();
    if (n < 0) throw request_error("\"top_n\" must not be negative, got " + std::to_string(n));
    return size_t(std::min<int64_t>(n, int64_t(n_documents)));
}

}  // namespace

json rerank_service::answer(const json &body, const std::string &model_id) {
    if (!enabled_)
        throw request_error(
            model_.hparams().ranks()
                ? "This server does not support reranking. Start it with `--reranking`"
                : "This server does not support reranking: the model '" + model_id +
                      "' is not a reranker (a bert with a classification head and pooling rank)",
            501);
    const auto query = body.find("query");
    if (query == body.end()) throw request_error("\"query\" must be provided");
    if (!query->is_string()) throw request_error("\"query\" must be a string");
    const std::vector<std::string> documents = documents_of(body);
    const size_t top_n = top_n_of(body, documents.size());
    const bool tei = body.contains("texts");  // Text Embeddings Inference's request and answer
    const auto return_text = body.find("return_text");
    if (return_text != body.end() && !return_text->is_boolean() && !return_text->is_null())
        throw request_error("\"return_text\" must be a boolean, got " + json_kind(*return_text));
    const bool with_text =
        tei && return_text != body.end() && return_text->is_boolean() && return_text->get<bool>();

    std::vector<std::vector<token>> sequences;
    int64_t n_tokens = 0;
    const std::string query_text = query->get<std::string>();
    for (size_t i = 0; i < documents.size(); ++i) {
        std::vector<token> t = rerank_tokens(model_, query_text, documents[i]);
        if (t.empty())
            throw request_error("document " + std::to_string(i) + " makes no tokens with the query");
        if (t.size() > ctx_->n_ctx())
            throw request_error("document " + std::to_string(i) + ": input (" + std::to_string(t.size()) +
                                " tokens) is larger than the max context size (" +
                                std::to_string(ctx_->n_ctx()) + " tokens)");
        n_tokens += int64_t(t.size());
        sequences.push_back(std::move(t));
    }
    std::vector<std::vector<float>> scores;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        scores = compute_rank_scores(*ctx_, sequences);
    }

    std::vector<size_t> order(documents.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return scores[a].front() > scores[b].front(); });
    order.resize(top_n);
    json results = json::array();
    for (const size_t i : order) {
        json item = {{"index", i}, {tei ? "score" : "relevance_score", scores[i].front()}};
        if (with_text) item["text"] = documents[i];
        results.push_back(std::move(item));
    }
    if (tei) return results;
    const auto model = body.find("model");
    return {{"model", model != body.end() && model->is_string() ? model->get<std::string>() : model_id},
            {"object", "list"},
            {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}},
            {"results", std::move(results)}};
}

}  // namespace weft::server
