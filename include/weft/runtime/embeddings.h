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

// 0 none (the tokens' rows only), 1 mean, 2 CLS (the first token's row), 3 last (the last token's).
enum class pooling_kind { none = 0, mean = 1, cls = 2, last = 3 };
const char *pooling_name(pooling_kind p);  // "none", "mean", "cls", "last"
std::optional<pooling_kind> pooling_from_name(std::string_view name);

struct embedding_result {
    std::vector<std::vector<float>> token_embeddings;  // one n_embd row per token
    std::vector<float> pooled;                         // empty for pooling none
};

// Runs `tokens` as one sequence through ctx (its memory cleared first; the model must be an
// encoder and the tokens must fit one ubatch) and pools them; with normalize, every row and the
// pooled vector are scaled to unit L2 norm. Throws weft::error naming the problem.
embedding_result compute_embeddings(inference_context &ctx, std::span<const token> tokens,
                                    pooling_kind pooling, bool normalize);

// The pooling of an n x n_embd row set (rows[i] is token i), in double.
std::vector<float> pool_rows(const std::vector<std::vector<float>> &rows, pooling_kind pooling);
void normalize_l2(std::vector<float> &v);  // a zero vector stays zero

}  // namespace weft
