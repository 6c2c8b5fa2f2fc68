// src/model/arch_phi3.cpp — Phi-3 / Phi-4: the Llama block with Q/K/V fused into attn_qkv (or
// separate), the FFN's gate and up rows fused into ffn_up, NeoX RoPE (with the long / short
// frequency factors of the 128K models), Q scaled before the scores, and sliding-window attention
// on every layer when attention.sliding_window > 0.
#include <cmath>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"

namespace weft {

namespace {

class arch_phi3 final : public architecture {
  public:
    const char *name() const override { return "phi3"; }

    void adjust_hparams(const gguf_file &, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
        hp.swa_layers.assign(size_t(hp.n_layer), true);
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.output_b = tl.create_optional("output.bias", {hp.n_vocab});
        // the 128K models' factors; the long ones apply beyond the original context (weft runs
        // with the short ones, as the reference does up to n_ctx_orig)
        if (!w.rope_freqs) {
            w.rope_freqs = tl.create_optional("rope_factors_short.weight", {hp.n_rot / 2});
            tl.create_optional("rope_factors_long.weight", {hp.n_rot / 2});
        }
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            l.attn_norm = create_norm(tl, hp, il, "attn_norm");
            create_attn_weights(tl, hp, il, l, /*biases=*/false);
            l.ffn_norm = create_norm(tl, hp, il, "ffn_norm");
            create_ffn_weights(
                tl, hp, il, l,
                tl.has(block_tensor_name(il, "ffn_gate")) ? ffn_layout::gated : ffn_layout::fused_gate_up);
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_norm(x, l.attn_norm, "attn_norm", il);
            auto [q, k, v] = b.build_qkv_rope(l, cur, il);
            q = b.named(scale(b.ctx, q, 1.0f / std::sqrt(float(hp.n_embd_head_k))), "Qcur_scaled", il);
            cur = b.build_attn(il, l.wo, q, k, v, 1.0f);
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu);
        }
        return b.finish(x);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_phi3() {
    return std::make_unique<arch_phi3>();
}

}  // namespace weft
