// src/model/arch_mistral3.cpp — the text model of Mistral Small 3.x / Ministral 3 (mistral3): the Llama
// block (a mixture of experts where the file has a router) with the file's RoPE scaling (Ministral 3:
// YaRN, rotated as the shared rope takes it: checked against the reference at factor 4).
//
// With <arch>.attention.temperature_scale s (Ministral 3: 0.1, its llama_4_scaling_beta), every layer
// multiplies Q after RoPE by Llama 4's attention temperature 1 + s·ln(1 + floor(pos / n)), n the
// YaRN original context (rope.scaling.original_context_length): 1 within it, growing past it.
//
// With rope.scaling.yarn_log_multiplier L (Ministral 3 and Devstral 2 write 1.0), the YaRN magnitude
// of the rotated Q and K is the reference's get_mscale(f, 1) / get_mscale(f, L), f the scaling factor
// and get_mscale(f, m) = 1 + 0.1 m ln f (1 for f <= 1), times rope.scaling.attn_factor: at L = 1 no
// magnitude at all. Without the key it stays the shared rope's 1 + 0.1 ln f.
#include <cmath>
#include <string>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_mistral3 final : public architecture {
  public:
    const char *name() const override { return "mistral3"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_normal;
        hp.expert_weights_norm = true;
        if (hp.n_expert > 0 && hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff(0);
        hp.rope_yarn_log_mul = read_hparam_float(f, hp, "rope.scaling.yarn_log_multiplier", 0.0f);
        if (hp.rope_scaling == rope_scaling_kind::yarn && hp.rope_yarn_log_mul != 0.0f) {
            // the shared rope multiplies by 1 + 0.1 ln f itself: the factor it is given divides
            // that back out, leaving attn_factor / get_mscale(f, L) after it
            const float factor = 1.0f / hp.rope_freq_scale;
            if (!std::isfinite(hp.rope_yarn_log_mul))
                throw error(f.path() + ": " + hp.arch + ".rope.scaling.yarn_log_multiplier: must be finite");
            const float mscale_all_dims =
                factor <= 1.0f ? 1.0f : 1.0f + 0.1f * hp.rope_yarn_log_mul * std::log(factor);
            if (!(mscale_all_dims > 0.0f))
                throw error(f.path() + ": " + hp.arch +
                            ".rope.scaling.yarn_log_multiplier: makes the YaRN magnitude " +
                            std::to_string(mscale_all_dims) + ", must be positive");
            hp.yarn_attn_factor /= mscale_all_dims;
        }
        hp.attn_temp_scale = read_hparam_float(f, hp, "attention.temperature_scale", 0.0f);
        if (hp.attn_temp_scale != 0.0f) {
            hp.attn_temp_floor = hp.n_ctx_orig;
            hp.attn_temp_offset = 0.0f;
            if (hp.attn_temp_floor <= 0)
                throw error(f.path() + ": " + hp.arch +
                            ".rope.scaling.original_context_length: must be positive with "
                            "attention.temperature_scale");
        }
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        if (hp.n_expert == 0) return create_llama_tensors(tl, hp, w);
        create_llama_moe_tensors(tl, hp, w);
    }

    // Q × the attention temperature where the file has a scale: build_llama_attn (graph_helpers.h)
    graph_inputs build_graph(graph_builder &b) const override { return build_llama_graph(b); }
};

}  // namespace

std::unique_ptr<architecture> make_arch_mistral3() {
    return std::make_unique<arch_mistral3>();
}

}  // namespace weft
