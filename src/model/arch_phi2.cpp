// src/model/arch_phi2.cpp — Phi-2: one LayerNorm (with bias) per block feeds the attention (fused or
// separate Q/K/V with biases, partial NeoX RoPE over the first rope.dimension_count dims of each
// head, Q scaled before the scores) and the GELU FFN (with biases) in parallel; the output matrix
// has a bias.
#include <cmath>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"

namespace weft {

namespace {

class arch_phi2 final : public architecture {
  public:
    const char *name() const override { return "phi2"; }

    void adjust_hparams(const gguf_file &, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
        hp.layer_norm = true;
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.output_norm_b = tl.create("output_norm.bias", {hp.n_embd});
        w.output_b = tl.create_optional("output.bias", {hp.n_vocab});
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            l.attn_norm = create_norm(tl, hp, il, "attn_norm");
            l.attn_norm_b = tl.create(block_tensor_name(il, "attn_norm", "bias"), {hp.n_embd});
            create_attn_weights(tl, hp, il, l, /*biases=*/true);
            l.bo = tl.create(block_tensor_name(il, "attn_output", "bias"), {hp.n_embd});
            create_ffn_weights(tl, hp, il, l, ffn_layout::plain);
            l.ffn_up_b = tl.create(block_tensor_name(il, "ffn_up", "bias"), {hp.n_ff(il)});
            l.ffn_down_b = tl.create(block_tensor_name(il, "ffn_down", "bias"), {hp.n_embd});
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *normed = b.build_norm(x, l.attn_norm, "attn_norm", il, l.attn_norm_b);
            auto [q, k, v] = b.build_qkv_rope(l, normed, il);
            // the scale applied to Q (as the reference does, for precision), not to the scores
            q = b.named(scale(b.ctx, q, 1.0f / std::sqrt(float(hp.n_embd_head_k))), "Qcur_scaled", il);
            tensor *attn_out = b.build_attn(il, l.wo, q, k, v, 1.0f, l.bo);
            if (il == hp.n_layer - 1) {
                attn_out = b.select_outputs(attn_out);
                x = b.select_outputs(x);
                normed = b.select_outputs(normed);
            }
            tensor *ffn_out = b.build_ffn(normed, l, il, graph_builder::ffn_act::gelu);
            tensor *cur = b.named(add(b.ctx, attn_out, ffn_out), "attn_ffn", il);
            x = b.named(add(b.ctx, cur, x), "l_out", il);
        }
        return b.finish(x);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_phi2() {
    return std::make_unique<arch_phi2>();
}

}  // namespace weft
