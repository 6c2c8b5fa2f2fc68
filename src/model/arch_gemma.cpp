// src/model/arch_gemma.cpp — Gemma and Gemma 2. Both: token embeddings × √n_embd, RMS norms, NeoX
// RoPE, Q scaled before the scores, a GELU-gated FFN, the output tied to the embeddings. Gemma 2
// adds RMS norms of the attention and FFN outputs before their residual adds, soft caps of the
// attention scores and of the logits, and sliding-window attention on the even layers. Gemma 3 keeps
// the post norms, drops the soft caps, adds per-head RMS norms of Q and K, and slides the window in
// five layers of every six, whose RoPE has a base of its own (10000, unscaled).
#include <cmath>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_gemma final : public architecture {
  public:
    explicit arch_gemma(int version) : version_(version) {}

    const char *name() const override {
        return version_ == 3 ? "gemma3" : version_ == 2 ? "gemma2" : "gemma";
    }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
        if (version_ == 1) return;
        hp.swa_layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il)
            hp.swa_layers[size_t(il)] = version_ == 2 ? il % 2 == 0 : il % 6 < 5;
        if (version_ == 3) {
            if (hp.n_swa <= 0)
                throw error(f.path() +
                            ": gemma3.attention.sliding_window: missing or 0 (gemma3 slides a "
                            "window in five layers of six)");
            hp.rope_freq_base_swa = read_hparam_float(f, hp, "rope.freq_base_swa", 10000.0f);
        }
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            l.attn_norm = create_norm(tl, hp, il, "attn_norm");
            create_attn_weights(tl, hp, il, l, /*biases=*/false);
            l.ffn_norm = create_norm(tl, hp, il, "ffn_norm");
            create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
            if (version_ >= 2) {
                l.attn_post_norm = create_norm(tl, hp, il, "post_attention_norm");
                l.ffn_post_norm = create_norm(tl, hp, il, "post_ffw_norm");
            }
            if (version_ == 3) {
                l.attn_q_norm = tl.create(block_tensor_name(il, "attn_q_norm"), {hp.n_embd_head_k});
                l.attn_k_norm = tl.create(block_tensor_name(il, "attn_k_norm"), {hp.n_embd_head_k});
            }
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        // the 27B models (Gemma 2: 46 layers, Gemma 3: 62) scale Q by 1/√(n_embd / n_head), the
        // others by 1/√head_k
        const bool q_by_width = (version_ == 2 && hp.n_layer == 46) || (version_ == 3 && hp.n_layer == 62);
        const float q_scale =
            1.0f / std::sqrt(q_by_width ? float(hp.n_embd / hp.n_head()) : float(hp.n_embd_head_k));
        tensor *x = b.stage_input([&] {
            return b.named(scale(b.ctx, b.build_inp_embd(), std::sqrt(float(hp.n_embd))), "inp_scaled");
        });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_norm(x, l.attn_norm, "attn_norm", il);
            auto [q, k, v] = b.build_qkv_rope(l, cur, il);
            q = b.named(scale(b.ctx, q, q_scale), "Qcur_scaled", il);
            cur = b.build_attn(il, l.wo, q, k, v, 1.0f);
            if (l.attn_post_norm) cur = b.build_norm(cur, l.attn_post_norm, "attn_post_norm", il);
            if (il == hp.n_layer - 1) {
                cur = b.select_outputs(cur);
                x = b.select_outputs(x);
            }
            tensor *sa_out = b.named(add(b.ctx, cur, x), "ffn_inp", il);
            cur = b.build_norm(sa_out, l.ffn_norm, "ffn_norm", il);
            cur = b.build_ffn(cur, l, il, graph_builder::ffn_act::gelu);
            if (l.ffn_post_norm) cur = b.build_norm(cur, l.ffn_post_norm, "ffn_post_norm", il);
            x = b.named(add(b.ctx, cur, sa_out), "l_out", il);
        }
        return b.finish(x);
    }

  private:
    int version_;  // 1, 2 or 3
};

}  // namespace

std::unique_ptr<architecture> make_arch_gemma() {
    return std::make_unique<arch_gemma>(1);
}
std::unique_ptr<architecture> make_arch_gemma2() {
    return std::make_unique<arch_gemma>(2);
}
std::unique_ptr<architecture> make_arch_gemma3() {
    return std::make_unique<arch_gemma>(3);
}

}  // namespace weft
