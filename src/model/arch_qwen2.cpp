// src/model/arch_qwen2.cpp — Qwen2: the Llama block with Q/K/V biases and NeoX RoPE.
#include <cmath>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"

namespace weft {

namespace {

class arch_qwen2 final : public architecture {
  public:
    const char *name() const override { return "qwen2"; }

    void adjust_hparams(const gguf_file &, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            create_llama_attn(tl, hp, il, l, /*biases=*/true);
            l.ffn_norm = create_norm(tl, hp, il, "ffn_norm");
            create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
        }
    }

    graph_inputs build_graph(graph_builder &b) const override { return build_llama_graph(b); }
};

}  // namespace

std::unique_ptr<architecture> make_arch_qwen2() {
    return std::make_unique<arch_qwen2>();
}

}  // namespace weft
