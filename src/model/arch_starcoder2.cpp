// src/model/arch_starcoder2.cpp — StarCoder2: pre-norm blocks with LayerNorm (weight and bias), biases
// on Q/K/V, the attention output and both FFN matrices, NeoX RoPE, GQA, and an FFN without a gate:
// down(gelu(up(x))). The output matrix is separate, or tied to token_embd when absent.
#include <cmath>
#include <string>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_starcoder2 final : public architecture {
  public:
    const char *name() const override { return "starcoder2"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
        hp.layer_norm = true;
        const std::string key = hp.arch + ".attention.layer_norm_epsilon";
        if (!f.get_float(key)) throw error(f.path() + ": " + key + ": missing (required)");
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        // the Llama set without ffn_gate, plus a bias for every norm and projection
        create_llama_globals(tl, hp, w);
        w.output_norm_b = tl.create("output_norm.bias", {hp.n_embd});
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            create_llama_block(tl, hp, il, l, /*gated=*/false);
            auto bias = [&](const char *name, int64_t n) {
                return tl.create(block_tensor_name(il, name, "bias"), {n});
            };
            l.attn_norm_b = bias("attn_norm", hp.n_embd);
            l.bq = bias("attn_q", hp.n_embd_head_k * hp.n_head(il));
            l.bk = bias("attn_k", hp.n_embd_k_gqa(il));
            l.bv = bias("attn_v", hp.n_embd_v_gqa(il));
            l.bo = bias("attn_output", hp.n_embd);
            l.ffn_norm_b = bias("ffn_norm", hp.n_embd);
            l.ffn_up_b = bias("ffn_up", hp.n_ff(il));
            l.ffn_down_b = bias("ffn_down", hp.n_embd);
        }
    }

    graph_inputs build_graph(graph_builder &b) const override { return build_llama_graph(b); }
};

}  // namespace

std::unique_ptr<architecture> make_arch_starcoder2() {
    return std::make_unique<arch_starcoder2>();
}

}  // namespace weft
