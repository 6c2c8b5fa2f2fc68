// src/model/arch_command_r.cpp — Command-R (Cohere): one LayerNorm (weight only) per block feeds the
// attention (normal RoPE, optional per-head LayerNorms of Q and K) and the SiLU-gated FFN in
// parallel; both outputs join the residual. Tied output; logits × logit_scale.
#include <cmath>
#include <optional>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_command_r final : public architecture {
  public:
    const char *name() const override { return "command-r"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_normal;
        hp.layer_norm = true;
        hp.logit_scale = read_hparam_float(f, hp, "logit_scale", 1.0f);
        if (hp.logit_scale == 0.0f) throw error(f.path() + ": " + hp.arch + ".logit_scale: must not be 0");
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            l.attn_norm = create_norm(tl, hp, il, "attn_norm");
            create_attn_weights(tl, hp, il, l, /*biases=*/false);
            // Command-R+: per-head Q and K norms [head_k, n_head(_kv)]
            l.attn_q_norm =
                tl.create_optional(block_tensor_name(il, "attn_q_norm"), {hp.n_embd_head_k, hp.n_head(il)});
            l.attn_k_norm = tl.create_optional(block_tensor_name(il, "attn_k_norm"),
                                               {hp.n_embd_head_k, hp.n_head_kv(il)});
            create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        const float kq_scale = 1.0f / std::sqrt(float(hp.n_embd_head_k));
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *normed = b.build_norm(x, l.attn_norm, "attn_norm", il);
            auto [q, k, v] = b.build_qkv_rope(l, normed, il);
            tensor *attn_out = b.build_attn(il, l.wo, q, k, v, kq_scale);
            if (il == hp.n_layer - 1) {
                attn_out = b.select_outputs(attn_out);
                x = b.select_outputs(x);
                normed = b.select_outputs(normed);
            }
            tensor *cur = b.build_ffn(normed, l, il, graph_builder::ffn_act::silu);
            cur = b.named(add(b.ctx, cur, x), "ffn_res", il);
            x = b.named(add(b.ctx, cur, attn_out), "l_out", il);
        }
        return b.finish(x, hp.logit_scale);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_command_r() {
    return std::make_unique<arch_command_r>();
}

}  // namespace weft
