// src/model/arch_qwen2moe.cpp — Qwen2-MoE: the Qwen2 attention (Q/K/V biases, NeoX RoPE) and a
// mixture-of-experts FFN whose picked weights are not renormalized, plus a shared expert scaled by
// sigmoid(ffn_gate_inp_shexp · x).
#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_qwen2moe final : public architecture {
  public:
    const char *name() const override { return "qwen2moe"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
        hp.expert_weights_norm = false;
        if (hp.n_expert == 0)
            throw error(f.path() + ": qwen2moe.expert_count: missing or 0 (a qwen2moe model has experts)");
        // the established defaults when the file leaves the expert sizes out
        if (hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff(0) / hp.n_expert_used;
        if (hp.n_ff_shexp == 0) hp.n_ff_shexp = hp.n_ff(0);
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            create_llama_attn(tl, hp, il, l, /*biases=*/true);
            create_moe_ffn(tl, hp, il, l, moe_shared::gated);
        }
    }

    graph_inputs build_graph(graph_builder &b) const override { return build_llama_graph(b); }
};

}  // namespace

std::unique_ptr<architecture> make_arch_qwen2moe() {
    return std::make_unique<arch_qwen2moe>();
}

}  // namespace weft
