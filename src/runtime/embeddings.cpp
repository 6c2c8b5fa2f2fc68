// src/runtime/embeddings.cpp — an encoder's token rows and their pooling.
#include "weft/runtime/embeddings.h"

#include <cmath>

#include "weft/core/error.h"

namespace weft {

const char *pooling_name(pooling_kind p) {
    switch (p) {
        case pooling_kind::none:
            return "none";
        case pooling_kind::mean:
            return "mean";
        case pooling_kind::cls:
            return "cls";
        case pooling_kind::last:
            return "last";
    }
    return "?";
}

std::optional<pooling_kind> pooling_from_name(std::string_view name) {
    for (pooling_kind p : {pooling_kind::none, pooling_kind::mean, pooling_kind::cls, pooling_kind::last})
        if (name == pooling_name(p)) return p;
    return std::nullopt;
}

std::vector<float> pool_rows(const std::vector<std::vector<float>> &rows, pooling_kind pooling) {
    if (rows.empty() || pooling == pooling_kind::none) return {};
    if (pooling == pooling_kind::cls) return rows.front();
    if (pooling == pooling_kind::last) return rows.back();
    std::vector<double> sum(rows.front().size(), 0.0);
    for (const auto &r : rows)
        for (size_t d = 0; d < sum.size(); ++d) sum[d] += r[d];
    std::vector<float> mean(sum.size());
    for (size_t d = 0; d < sum.size(); ++d) mean[d] = float(sum[d] / double(rows.size()));
    return mean;
}

void normalize_l2(std::vector<float> &v) {
    double ss = 0;
    for (float x : v) ss += double(x) * double(x);
    if (ss <= 0) return;
    const double inv = 1.0 / std::sqrt(ss);
    for (float &x : v) x = float(x * inv);
}

embedding_result compute_embeddings(inference_context &ctx, std::span<const token> tokens,
                                    pooling_kind pooling, bool normalize) {
    const model_hparams &hp = ctx.model().hparams();
    if (!hp.encoder)
        throw error(ctx.model().path() + ": architecture '" + hp.arch +
                    "' produces logits, not embeddings (embedding models: bert)");
    if (tokens.empty()) throw error("embeddings of an empty input: there are no tokens");
    ctx.kv_clear();
    batch b;
    for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], llm_pos(i), {0}, true);
    if (const int rc = ctx.decode(b); rc != decode_ok)
        throw error("embedding " + std::to_string(tokens.size()) + " tokens failed: " + ctx.last_error());
    embedding_result r;
    const size_t n_embd = size_t(hp.n_embd);
    for (size_t i = 0; i < tokens.size(); ++i) {
        const float *row = ctx.get_embeddings_ith(int32_t(i));
        r.token_embeddings.emplace_back(row, row + n_embd);
    }
    r.pooled = pool_rows(r.token_embeddings, pooling);
    ctx.kv_clear();
    if (normalize) {
        for (auto &row : r.token_embeddings) normalize_l2(row);
        normalize_l2(r.pooled);
    }
    return r;
}

}  // namespace weft
