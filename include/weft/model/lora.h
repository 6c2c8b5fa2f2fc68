// weft/model/lora.h — LoRA adapters in GGUF as the reference engine writes them (general.type
// "adapter", adapter.type "lora", adapter.lora.alpha, for each adapted weight W the pair
// "<W name without .weight>.lora_a" [n_in, r] and ".lora_b" [r, n_out], any weight type), applied at
// run time without touching the base weights: W·x + scale·(alpha/r)·B·(A·x) for every product of a
// weight the adapter has a pair for; and merged into a new file (export-lora).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "weft/core/context.h"
#include "weft/core/tensor.h"

namespace weft {

class backend_buffer;
class gguf_set;
class model;

class lora_adapter {
  public:
    // Reads the adapter at `path` for `base`: checks general.type, adapter.type, the architecture,
    // that every lora_a has its lora_b (and the other way), that each pair adapts a weight of the
    // base with its shape ([n_in, r] and [r, n_out] for a weight [n_in, n_out]) and that r agrees.
    // Throws weft::error naming the file and the problem.
    static std::unique_ptr<lora_adapter> load(const std::string &path, const model &base);
    ~lora_adapter();
    lora_adapter(const lora_adapter &) = delete;
    lora_adapter &operator=(const lora_adapter &) = delete;

    struct pair {
        tensor *a = nullptr;  // [n_in, r]
        tensor *b = nullptr;  // [r, n_out]
        int64_t rank = 0;
    };
    // The pair adapting the base weight named `weight_name` ("blk.0.attn_q.weight"), or null.
    const pair *find(const std::string &weight_name) const;
    const std::unordered_map<std::string, pair> &pairs() const { return pairs_; }
    const std::string &path() const { return path_; }
    // adapter.lora.alpha; 0 (absent) means alpha = r, a factor of 1
    float alpha() const { return alpha_; }
    // scale·alpha/r for one pair: what multiplies B·(A·x)
    float factor(const pair &p, float scale) const {
        return scale * (alpha_ > 0.0f ? alpha_ / float(p.rank) : 1.0f);
    }

  private:
    lora_adapter() = default;
    std::string path_;
    float alpha_ = 0.0f;
    std::unique_ptr<gguf_set> file_;
    std::unique_ptr<context> ctx_;
    std::vector<std::unique_ptr<backend_buffer>> buffers_;
    std::unordered_map<std::string, pair> pairs_;
};

// The bounds every path that takes a LoRA scale or alpha holds them to (the command line, the
// server's requests and /lora-adapters, the engine, the adapter loader, export-lora): a scale is
// finite with |scale| <= lora_max_scale, an alpha finite in [0, lora_max_alpha]. Adapters are
// trained for scales around 1 and alphas around their rank (8-256); far beyond, B·A·x overflows
// float and every logit becomes NaN.
constexpr double lora_max_scale = 100.0;
constexpr double lora_max_alpha = 65536.0;
// Throw weft::error, beginning with `what` ("--lora-scaled a.gguf", "'lora[0].scale'"), naming the
// value and the bound, unless it is within them.
void check_lora_scale(double scale, const std::string &what);
void check_lora_alpha(double alpha, const std::string &what);

// An adapter in use and its scale (--lora: 1, --lora-scaled FILE S: S).
struct lora_use {
    const lora_adapter *adapter = nullptr;
    float scale = 1.0f;
};

// Writes `base` (a GGUF model file) with every adapter merged into its weights to out, atomically:
// W' = W + Σ scale·(alpha/r)·B·A, computed in float and stored in W's type (quantized weights are
// quantized again). The adapters must have been loaded for this base. Returns the weights changed.
int64_t lora_merge_write(const std::string &base_path, std::span<const lora_use> loras,
                         const std::string &out_path);

}  // namespace weft
