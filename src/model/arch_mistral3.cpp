// src/model/arch_mistral3.cpp — the text model of Mistral Small 3.x / Ministral 3 (mistral3): the Llama
// block (a mixture of experts where the file has a router) with the file's RoPE scaling (Ministral 3:
// YaRN, rotated as the shared rope takes it: checked against the reference at factor 4).
//
// Llama-4-style attention temperature (<arch>.attention.temperature_scale: Q × 1 + s·ln(1 +
// floor(pos / temperature_length)) per token) is refused: weft has no per-token scale input yet.
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
        if (read_hparam_float(f, hp, "attention.temperature_scale", 0.0f) != 0.0f)
            throw error(f.path() + ": " + hp.arch +
                        ".attention.temperature_scale: attention temperature scaling is not supported yet");
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        if (hp.n_expert == 0) return create_llama_tensors(tl, hp, w);
        create_llama_moe_tensors(tl, hp, w);
    }

    graph_inputs build_graph(graph_builder &b) const override { return build_llama_graph(b); }
};

}  // namespace

std::unique_ptr<architecture> make_arch_mistral3() {
    return std::make_unique<arch_mistral3>();
}

}  // namespace weft
