// src/model/arch_qwen3.cpp — Qwen3 and Qwen3-MoE: the Llama block with per-head Q/K RMS norms and
// NeoX RoPE; Qwen3-MoE's FFN is a mixture of SwiGLU experts (no shared expert) whose picked
// probabilities are renormalized to sum to 1.
#include <cmath>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_qwen3 final : public architecture {
  public:
    explicit arch_qwen3(bool moe) : moe_(moe) {}

    const char *name() const override { return moe_ ? "qwen3moe" : "qwen3"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
        if (!moe_) return;
        hp.expert_weights_norm = true;
        if (hp.n_expert == 0)
            throw error(f.path() + ": qwen3moe.expert_count: missing or 0 (a qwen3moe model has experts)");
        if (hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff(0) / hp.n_expert_used;
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            if (moe_) {
                create_llama_attn(tl, hp, il, l);
                create_moe_ffn(tl, hp, il, l, moe_shared::none);
            } else {
                create_llama_block(tl, hp, il, l);
            }
            l.attn_q_norm = tl.create(block_tensor_name(il, "attn_q_norm"), {hp.n_embd_head_k});
            l.attn_k_norm = tl.create(block_tensor_name(il, "attn_k_norm"), {hp.n_embd_head_k});
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        const float kq_scale = 1.0f / std::sqrt(float(hp.n_embd_head_k));
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_norm(x, l.attn_norm, "attn_norm", il);
            auto [q, k, v] = b.build_qkv_rope(l, cur, il);  // RMS norms over each head's dims
            cur = b.build_attn(il, l.wo, q, k, v, kq_scale);
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu);
        }
        return b.finish(x);
    }

  private:
    bool moe_;
};

}  // namespace

std::unique_ptr<architecture> make_arch_qwen3() {
    return std::make_unique<arch_qwen3>(false);
}
std::unique_ptr<architecture> make_arch_qwen3moe() {
    return std::make_unique<arch_qwen3>(true);
}

}  // namespace weft
