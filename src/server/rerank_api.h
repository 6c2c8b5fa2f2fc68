// src/server/rerank_api.h — the reference server's reranking routes (POST /v1/rerank, /rerank,
// /v1/reranking, /reranking) for a reranker served with --reranking: a query and its documents in,
// each document's relevance score out, best first. The body and the answer follow llama-server's
// (Jina's shape: {model, object "list", usage, results: [{index, relevance_score}]}; with "texts"
// instead of "documents", Text Embeddings Inference's: a bare array of {index, score[, text]}).
// Errors are OpenAI's shape; a server that does not rerank answers 501.
#pragma once

#include <nlohmann/json.hpp>

#include <mutex>
#include <string>

#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft::server {

// The sequences one decode of a reranker takes at most (its context's n_seq_max).
inline constexpr uint32_t rerank_max_sequences = 16;

class rerank_service {
  public:
    // ctx: the served encoder's context (null for a model that generates text), shared with the
    // embeddings routes under `mutex`; enabled: --reranking was given (the model must then be a
    // reranker: checked by the caller at startup).
    rerank_service(const model &m, inference_context *ctx, std::mutex &mutex, bool enabled)
        : model_(m), ctx_(ctx), mutex_(mutex), enabled_(enabled && ctx != nullptr && m.hparams().ranks()) {}

    // The answer to a rerank body; model_id is reported when the body names no model. Throws
    // request_error: 400 for a bad body or a document longer than the context, 501 when the server
    // does not rerank.
    nlohmann::json answer(const nlohmann::json &body, const std::string &model_id);

  private:
    const model &model_;
    inference_context *ctx_;
    std::mutex &mutex_;
    bool enabled_;
};

}  // namespace weft::server
