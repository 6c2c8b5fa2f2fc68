// src/model/arch_qwen35.cpp — Qwen3-Next (qwen3next), Qwen3.5 (qwen35) and Qwen3.5-MoE (qwen35moe):
// hybrids of gated delta net layers and, every full_attention_interval-th layer, gated full attention
// (graph_delta_net.h). Each block: RMS norm, the mixer, residual add, RMS norm ("post_attention_norm"),
// the FFN, residual add. qwen3next and qwen35moe's FFN is a mixture of SwiGLU experts (softmax router,
// the picked probabilities renormalized) plus a shared expert scaled by sigmoid(ffn_gate_inp_shexp · x);
// qwen35's a dense SwiGLU. RoPE is NeoX's over the first rope.dimension_count dims of each head:
// Qwen3.5's multi-section rotation (rope.dimension_sections) gives text positions the same angles in
// every section, which is that rotation.
#include <string>

#include "model/architecture.h"
#include "model/graph_delta_net.h"
#include "model/graph_helpers.h"
#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

enum class qwen35_kind { qwen3next, qwen35, qwen35moe };

class arch_qwen35 final : public architecture {
  public:
    explicit arch_qwen35(qwen35_kind kind) : kind_(kind) {}

    const char *name() const override {
        switch (kind_) {
            case qwen35_kind::qwen3next:
                return "qwen3next";
            case qwen35_kind::qwen35:
                return "qwen35";
            case qwen35_kind::qwen35moe:
                return "qwen35moe";
        }
        return "qwen35";
    }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
        hp.attention_scale = read_hparam_float(f, hp, "attention.scale", 0.0f);
        set_delta_net_hparams(f, hp);
        if (kind_ == qwen35_kind::qwen35) return;
        if (hp.n_expert == 0)
            throw error(f.path() + ": " + hp.arch + ".expert_count: missing or 0 (a " + hp.arch +
                        " model has experts)");
        hp.expert_weights_norm = true;
        if (hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff(0) / hp.n_expert_used;
        if (hp.n_ff_shexp == 0) hp.n_ff_shexp = hp.n_ff(0);
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        const auto beta_alpha =
            kind_ == qwen35_kind::qwen3next ? delta_net_beta_alpha::fused : delta_net_beta_alpha::separate;
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            l.attn_norm = create_norm(tl, hp, il, "attn_norm");
            if (hp.is_recurrent(il))
                create_delta_net_mixer(tl, hp, il, l, beta_alpha);
            else
                create_gated_attention(tl, hp, il, l);
            if (kind_ == qwen35_kind::qwen35) {
                l.ffn_norm = create_norm(tl, hp, il, "post_attention_norm");
                create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
            } else {
                create_moe_ffn(tl, hp, il, l, moe_shared::gated, "post_attention_norm");
            }
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_norm(x, l.attn_norm, "attn_norm", il);
            cur = hp.is_recurrent(il) ? build_delta_net_mixer(b, l, cur, il, kind_ == qwen35_kind::qwen3next)
                                      : build_gated_attention(b, l, cur, il);
            // post_attention_norm is the FFN's norm (l.ffn_norm)
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu);
        }
        return b.finish(x);
    }

    // A hybrid's recurrent states cannot move: no context shift (the memory says why).
    std::optional<cached_k_rope> k_rope_layout(const model_hparams &) const override { return std::nullopt; }

  private:
    qwen35_kind kind_;
};

}  // namespace

std::unique_ptr<architecture> make_arch_qwen3next() {
    return std::make_unique<arch_qwen35>(qwen35_kind::qwen3next);
}
std::unique_ptr<architecture> make_arch_qwen35() {
    return std::make_unique<arch_qwen35>(qwen35_kind::qwen35);
}
std::unique_ptr<architecture> make_arch_qwen35moe() {
    return std::make_unique<arch_qwen35>(qwen35_kind::qwen35moe);
}

}  // namespace weft
