// weft/runtime/embeddings.h — embeddings from an encoder (bert): every token's last hidden state,
// pooled into one vector per text.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/runtime/context.h"

namespace weft {

// 0 none (the tokens' rows only), 1 mean, 2 CLS (the first token's row), 3 last (the last token's),
// 4 rank (a reranker's scores: its classification head on the first token's row).
enum class pooling_kind { none = 0, mean = 1, cls = 2, last = 3, rank = 4 };
const char *pooling_name(pooling_kind p);  // "none", "mean", "cls", "last", "rank"
std::optional<pooling_kind> pooling_from_name(std::string_view name);

struct embedding_result {
    std::vector<std::vector<float>> token_embeddings;  // one n_embd row per token
    std::vector<float> pooled;                         // empty for pooling none
};

// Runs `tokens` as one sequence through ctx (its memory cleared first; the model must be an
// encoder and the tokens must fit one ubatch) and pools them; with normalize, every row and the
// pooled vector are scaled to unit L2 norm. A reranker takes pooling rank only (its rows are
// scores, not hidden states): pooled is then its n_cls_out scores, never normalized, and
// token_embeddings is empty. Throws weft::error naming the problem.
embedding_result compute_embeddings(inference_context &ctx, std::span<const token> tokens,
                                    pooling_kind pooling, bool normalize);

// The tokens of one query-document pair for a reranker, as the reference's server builds them: the
// model's rerank template (tokenizer.chat_template.rerank) with "{query}" and "{document}" replaced,
// tokenized with its special tokens; without one [BOS] query [EOS] [SEP] document [EOS], each
// special token where the vocabulary adds it (add_bos, add_eos, add_sep; EOS is SEP when the
// vocabulary has no EOS). Query and document are plain text (control tokens in them stay text).
std::vector<token> rerank_tokens(const model &m, std::string_view query, std::string_view document);

// A reranker's scores (its n_cls_out outputs; the first is the relevance score) of each token
// sequence, in order. Several sequences go through one decode, as many as fit ctx's n_seq_max
// sequences and its ubatch (and n_ctx) tokens; each sequence's score is the same whichever others
// share its decode. ctx's memory is cleared before and after. Throws weft::error naming the
// problem: a model that is not a reranker, an empty sequence or one longer than a ubatch.
std::vector<std::vector<float>> compute_rank_scores(inference_context &ctx,
                                                    std::span<const std::vector<token>> sequences);

// The pooling of an n x n_embd row set (rows[i] is token i), in double.
std::vector<float> pool_rows(const std::vector<std::vector<float>> &rows, pooling_kind pooling);
void normalize_l2(std::vector<float> &v);  // a zero vector stays zero

}  // namespace weft
