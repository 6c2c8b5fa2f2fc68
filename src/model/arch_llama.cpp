// src/model/arch_llama.cpp — Llama (2/3, Mistral, TinyLlama, SmolLM): RMSNorm, GQA + RoPE, SwiGLU.
#include <cmath>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"

namespace weft {

namespace {

class arch_llama final : public architecture {
  public:
    const char *name() const override { return "llama"; }

    void adjust_hparams(const gguf_file &, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_normal;
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_tensors(tl, hp, w);
    }

    graph_inputs build_graph(graph_builder &b) const override { return build_llama_graph(b); }
};

}  // namespace

std::unique_ptr<architecture> make_arch_llama() {
    return std::make_unique<arch_llama>();
}

}  // namespace weft
