// src/runtime/embeddings.cpp — an encoder's token rows and their pooling.
#include "weft/runtime/embeddings.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

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
        case pooling_kind::rank:
            return "rank";
    }
    return "?";
}

std::optional<pooling_kind> pooling_from_name(std::string_view name) {
    for (pooling_kind p :
         {pooling_kind::none, pooling_kind::mean, pooling_kind::cls, pooling_kind::last, pooling_kind::rank})
        if (name == pooling_name(p)) return p;
    return std::nullopt;
}

std::vector<float> pool_rows(const std::vector<std::vector<float>> &rows, pooling_kind pooling) {
    if (rows.empty() || pooling == pooling_kind::none) return {};
    if (pooling == pooling_kind::cls || pooling == pooling_kind::rank) return rows.front();
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

namespace {

void require_encoder(const model &m) {
    if (!m.hparams().encoder)
        throw error(m.path() + ": architecture '" + m.hparams().arch +
                    "' produces logits, not embeddings (embedding models: bert)");
}

}  // namespace

embedding_result compute_embeddings(inference_context &ctx, std::span<const token> tokens,
                                    pooling_kind pooling, bool normalize) {
    const model_hparams &hp = ctx.model().hparams();
    require_encoder(ctx.model());
    if (tokens.empty()) throw error("embeddings of an empty input: there are no tokens");
    if (hp.ranks() || pooling == pooling_kind::rank) {
        if (pooling != pooling_kind::rank || !hp.ranks())
            throw error(ctx.model().path() + (hp.ranks()
                                                  ? ": a reranker's rows are scores; its pooling is rank"
                                                  : ": pooling rank needs a reranker (a classification "
                                                    "head and <arch>.pooling_type 4)"));
        const std::vector<std::vector<token>> one = {std::vector<token>(tokens.begin(), tokens.end())};
        embedding_result r;
        r.pooled = compute_rank_scores(ctx, one).front();
        return r;
    }
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

std::vector<token> rerank_tokens(const model &m, std::string_view query, std::string_view document) {
    const vocab &v = m.vocab();
    if (const auto tmpl = m.files().metadata().get_string("tokenizer.chat_template.rerank")) {
        // one pass over the template, so that a placeholder inside the query is not replaced again
        std::string prompt;
        std::vector<text_span> literal;
        for (size_t at = 0; at < tmpl->size();) {
            const bool is_query = tmpl->compare(at, 7, "{query}") == 0;
            if (is_query || tmpl->compare(at, 10, "{document}") == 0) {
                const std::string_view text = is_query ? query : document;
                literal.push_back({prompt.size(), text.size()});
                prompt += text;
                at += is_query ? 7 : 10;
            } else {
                prompt += (*tmpl)[at++];
            }
        }
        return v.tokenize(prompt, false, true, literal);
    }
    const token eos = v.eos() != token_null ? v.eos() : v.sep();
    std::vector<token> out;
    if (v.add_bos() && v.bos() != token_null) out.push_back(v.bos());
    const std::vector<token> q = v.tokenize(query, false, false);
    out.insert(out.end(), q.begin(), q.end());
    if (v.add_eos() && eos != token_null) out.push_back(eos);
    if (v.add_sep() && v.sep() != token_null) out.push_back(v.sep());
    const std::vector<token> d = v.tokenize(document, false, false);
    out.insert(out.end(), d.begin(), d.end());
    if (v.add_eos() && eos != token_null) out.push_back(eos);
    return out;
}

std::vector<std::vector<float>> compute_rank_scores(inference_context &ctx,
                                                    std::span<const std::vector<token>> sequences) {
    const model &m = ctx.model();
    require_encoder(m);
    if (!m.hparams().ranks())
        throw error(m.path() +
                    ": not a reranker (it needs a classification head and <arch>.pooling_type 4, rank)");
    const size_t room = std::min<size_t>(ctx.n_ubatch(), ctx.n_ctx());
    for (size_t i = 0; i < sequences.size(); ++i) {
        if (sequences[i].empty()) throw error("rank sequence " + std::to_string(i) + " has no tokens");
        if (sequences[i].size() > room)
            throw error("rank sequence " + std::to_string(i) + " has " + std::to_string(sequences[i].size()) +
                        " tokens; the context takes at most " + std::to_string(room) + " at once");
    }
    const size_t n_cls_out = size_t(m.hparams().n_cls_out);
    std::vector<std::vector<float>> scores;
    ctx.kv_clear();
    for (size_t first = 0; first < sequences.size();) {
        // the sequences that fit one decode together
        batch b;
        std::vector<int32_t> starts;
        size_t n_tokens = 0, next = first;
        for (; next < sequences.size() && next - first < ctx.n_seq_max() &&
               n_tokens + sequences[next].size() <= room;
             ++next) {
            const std::vector<token> &seq = sequences[next];
            starts.push_back(int32_t(n_tokens));
            for (size_t i = 0; i < seq.size(); ++i)
                b.add(seq[i], llm_pos(i), {seq_id(next - first)}, /*wants_output=*/i == 0);
            n_tokens += seq.size();
        }
        if (const int rc = ctx.decode(b); rc != decode_ok)
            throw error("ranking " + std::to_string(next - first) + " sequences (" +
                        std::to_string(n_tokens) + " tokens) failed: " + ctx.last_error());
        for (const int32_t start : starts) {
            const float *row = ctx.get_embeddings_ith(start);
            scores.emplace_back(row, row + n_cls_out);
        }
        ctx.kv_clear();
        first = next;
    }
    return scores;
}

}  // namespace weft
