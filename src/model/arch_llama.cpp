// src/model/arch_llama.cpp — Llama (2/3, Mistral, TinyLlama, SmolLM): RMSNorm, GQA + RoPE, SwiGLU;
// with llama.expert_count > 0 (Mixtral) the FFN is a mixture of SwiGLU experts whose picked
// weights are renormalized to sum 1.
#include <cmath>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/graph_moe.h"
#include "model/tensor_loader.h"

namespace weft {

namespace {

class arch_llama final : public architecture {
  public:
    const char *name() const override { return "llama"; }

    void adjust_hparams(const gguf_file &, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_normal;
        hp.expert_weights_norm = true;
        if (hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff(0);
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        if (hp.n_expert == 0) return create_llama_tensors(tl, hp, w);
        create_llama_moe_tensors(tl, hp, w);
    }

    graph_inputs build_graph(graph_builder &b) const override { return build_llama_graph(b); }
};

}  // namespace

std::unique_ptr<architecture> make_arch_llama() {
    return std::make_unique<arch_llama>();
}

}  // namespace weft
