// src/model/arch_granite.cpp — IBM Granite (3.x dense): the Llama block with four scalar multipliers
// from the metadata: token embeddings × embedding_scale, attention.scale as the KQ scale, each
// block's attention and FFN outputs × residual_scale before their residual adds, logits ÷ logit_scale.
// Granite 4 hybrid (granitehybrid): the same multipliers over a hybrid stack: layers with 0 KV heads
// are Mamba-2 mixers (graph_mamba2.h, recurrent states), the others attention (RoPE only where
// rope.scaling.finetuned says so: Granite 4.0-H has none); each followed by a SwiGLU FFN or a mixture
// of experts with a shared expert.
#include <cmath>
#include <optional>
#include <string>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/graph_mamba2.h"
#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_granite final : public architecture {
  public:
    explicit arch_granite(bool hybrid) : hybrid_(hybrid) {}

    const char *name() const override { return hybrid_ ? "granitehybrid" : "granite"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_normal;
        // 0 (or absent) leaves the corresponding part of the graph as Llama's.
        hp.embedding_scale = read_hparam_float(f, hp, "embedding_scale", 0.0f);
        hp.residual_scale = read_hparam_float(f, hp, "residual_scale", 0.0f);
        hp.attention_scale = read_hparam_float(f, hp, "attention.scale", 0.0f);
        hp.logit_scale =
            read_hparam_float(f, hp, "logit_scale", hybrid_ ? std::optional<float>(0.0f) : std::nullopt);
        if (hp.logit_scale == 0.0f && !hybrid_)
            throw error(f.path() + ": " + hp.arch + ".logit_scale: must not be 0");
        // Granite reads rope.scaling.finetuned as "RoPE on" (default true)
        const bool rope = f.get_bool(hp.arch + ".rope.scaling.finetuned").value_or(true);
        if (!hybrid_) {
            // a file without RoPE would need a graph without rotation, which the dense family never has
            if (!rope)
                throw error(f.path() + ": " + hp.arch +
                            ".rope.scaling.finetuned is false (no RoPE), which is not supported");
            return;
        }
        hp.use_rope = rope;
        set_mamba2_hparams(f, hp);
        hp.recurrent_layers.assign(size_t(hp.n_layer), false);
        for (int64_t il = 0; il < hp.n_layer; ++il) hp.recurrent_layers[size_t(il)] = hp.n_head_kv(il) == 0;
        if (hp.n_expert > 0) {  // Granite MoE: softmax routing, the picked weights renormalized
            hp.expert_weights_norm = true;
            if (hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff(0);
        }
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        if (!hybrid_) return create_llama_tensors(tl, hp, w);
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            if (hp.is_recurrent(il)) {
                l.attn_norm = create_norm(tl, hp, il, "attn_norm");
                create_mamba2_mixer(tl, hp, il, l);
            } else {
                create_llama_attn(tl, hp, il, l);
            }
            if (hp.n_expert > 0)
                create_moe_ffn(tl, hp, il, l, hp.n_ff_shexp > 0 ? moe_shared::plain : moe_shared::none);
            else {
                l.ffn_norm = create_norm(tl, hp, il, "ffn_norm");
                create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
            }
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        const float kq_scale =
            hp.attention_scale != 0.0f ? hp.attention_scale : 1.0f / std::sqrt(float(hp.n_embd_head_k));
        const float residual_scale = hp.residual_scale != 0.0f ? hp.residual_scale : 1.0f;
        tensor *x = b.stage_input([&] {
            tensor *e = b.build_inp_embd();
            return hp.embedding_scale != 0.0f ? b.named(scale(b.ctx, e, hp.embedding_scale), "inp_scaled")
                                              : e;
        });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur;
            if (!hybrid_) {
                cur = b.build_llama_attn(l, x, il, kq_scale);
            } else if (hp.is_recurrent(il)) {
                cur = build_mamba2_mixer(b, l, b.build_norm(x, l.attn_norm, "attn_norm", il), il);
            } else {
                tensor *normed = b.build_norm(x, l.attn_norm, "attn_norm", il);
                auto [q, k, v] = hp.use_rope ? b.build_qkv_rope(l, normed, il) : b.build_qkv(l, normed, il);
                cur = b.build_attn(il, l.wo, q, k, v, kq_scale, l.bo);
            }
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu, residual_scale);
        }
        return b.finish(x, hp.logit_scale != 0.0f ? 1.0f / hp.logit_scale : 1.0f);
    }

    // A hybrid's recurrent states cannot move: no context shift (the memory says why).
    std::optional<cached_k_rope> k_rope_layout(const model_hparams &hp) const override {
        if (hybrid_) return std::nullopt;
        return cached_k_rope{0, hp.n_rot};
    }

  private:
    bool hybrid_;
};

}  // namespace

std::unique_ptr<architecture> make_arch_granite() {
    return std::make_unique<arch_granite>(false);
}
std::unique_ptr<architecture> make_arch_granitehybrid() {
    return std::make_unique<arch_granite>(true);
}

}  // namespace weft
