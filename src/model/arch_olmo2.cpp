// src/model/arch_olmo2.cpp — OLMo 2: no pre-norms; RMS norms of the whole Q and K rows (all heads
// together) before RoPE (NeoX), and RMS norms of the attention and FFN outputs before each residual
// add; SwiGLU FFN.
#include <cmath>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"

namespace weft {

namespace {

class arch_olmo2 final : public architecture {
  public:
    const char *name() const override { return "olmo2"; }

    void adjust_hparams(const gguf_file &, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            create_attn_weights(tl, hp, il, l, /*biases=*/false);
            l.attn_q_norm =
                tl.create(block_tensor_name(il, "attn_q_norm"), {hp.n_embd_head_k * hp.n_head(il)});
            l.attn_k_norm = tl.create(block_tensor_name(il, "attn_k_norm"), {hp.n_embd_k_gqa(il)});
            l.attn_post_norm = create_norm(tl, hp, il, "post_attention_norm");
            create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
            l.ffn_post_norm = create_norm(tl, hp, il, "post_ffw_norm");
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        const float kq_scale = 1.0f / std::sqrt(float(hp.n_embd_head_k));
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            // Q and K normed as whole rows, then split into heads
            auto [q, k, v] = b.build_mms<3>(
                {{{l.wq, nullptr, "Qcur"}, {l.wk, nullptr, "Kcur"}, {l.wv, nullptr, "Vcur"}}}, x, il);
            q = b.build_norm(q, l.attn_q_norm, "Qcur_norm", il);
            k = b.build_norm(k, l.attn_k_norm, "Kcur_norm", il);
            q = reshape_3d(b.ctx, q, hp.n_embd_head_k, hp.n_head(il), b.n_tokens);
            k = reshape_3d(b.ctx, k, hp.n_embd_head_k, hp.n_head_kv(il), b.n_tokens);
            v = reshape_3d(b.ctx, v, hp.n_embd_head_v, hp.n_head_kv(il), b.n_tokens);
            q = b.build_rope(q, "Qcur_rope", il);
            k = b.build_rope(k, "Kcur_rope", il);
            tensor *cur = b.build_attn(il, l.wo, q, k, v, kq_scale);
            cur = b.build_norm(cur, l.attn_post_norm, "attn_post_norm", il);
            if (il == hp.n_layer - 1) {
                cur = b.select_outputs(cur);
                x = b.select_outputs(x);
            }
            tensor *ffn_inp = b.named(add(b.ctx, cur, x), "ffn_inp", il);
            cur = b.build_ffn(ffn_inp, l, il, graph_builder::ffn_act::silu);
            cur = b.build_norm(cur, l.ffn_post_norm, "ffn_post_norm", il);
            x = b.named(add(b.ctx, cur, ffn_inp), "l_out", il);
        }
        return b.finish(x);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_olmo2() {
    return std::make_unique<arch_olmo2>();
}

}  // namespace weft
