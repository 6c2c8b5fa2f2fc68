// src/model/arch_lfm2.cpp — LFM2 (Liquid AI): a hybrid of short-convolution blocks and attention
// blocks (per-head Q/K RMS norms, NeoX RoPE), each followed by a SwiGLU FFN. A layer with 0 KV heads
// is a convolution layer: it keeps the last l_cache - 1 inputs of each sequence as its state (the
// recurrent part of a hybrid memory), the attention layers a KV cache.
#include <cmath>
#include <string>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_lfm2 final : public architecture {
  public:
    const char *name() const override { return "lfm2"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
        const auto l_cache = f.get_int("lfm2.shortconv.l_cache");
        if (!l_cache || *l_cache < 2 || *l_cache > 64)
            throw error(f.path() + ": lfm2.shortconv.l_cache must be in [2, 64]" +
                        (l_cache ? ", is " + std::to_string(*l_cache) : std::string(" (missing)")));
        hp.ssm_d_conv = *l_cache;
        hp.recurrent_layers.assign(size_t(hp.n_layer), false);
        for (int64_t il = 0; il < hp.n_layer; ++il) hp.recurrent_layers[size_t(il)] = hp.n_head_kv(il) == 0;
        hp.n_embd_r = (hp.ssm_d_conv - 1) * hp.n_embd;  // the convolution's last inputs, no scan state
        hp.n_embd_s = 0;
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        w.tok_embd = tl.create("token_embd.weight", {hp.n_embd, hp.n_vocab});
        // the final norm carries the name "token_embd_norm" in LFM2's files
        w.output_norm = tl.create("token_embd_norm.weight", {hp.n_embd});
        w.output = tl.create_optional("output.weight", {hp.n_embd, hp.n_vocab});
        if (!w.output) w.output = w.tok_embd;
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            l.attn_norm = tl.create(block_tensor_name(il, "attn_norm"), {hp.n_embd});
            if (hp.is_recurrent(il)) {
                l.shortconv_conv =
                    tl.create(block_tensor_name(il, "shortconv.conv"), {hp.ssm_d_conv, hp.n_embd});
                l.shortconv_in_proj =
                    tl.create(block_tensor_name(il, "shortconv.in_proj"), {hp.n_embd, 3 * hp.n_embd});
                l.shortconv_out_proj =
                    tl.create(block_tensor_name(il, "shortconv.out_proj"), {hp.n_embd, hp.n_embd});
            } else {
                create_attn_weights(tl, hp, il, l, false);
                l.attn_q_norm = tl.create(block_tensor_name(il, "attn_q_norm"), {hp.n_embd_head_k});
                l.attn_k_norm = tl.create(block_tensor_name(il, "attn_k_norm"), {hp.n_embd_head_k});
            }
            l.ffn_norm = tl.create(block_tensor_name(il, "ffn_norm"), {hp.n_embd});
            create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        const float kq_scale = 1.0f / std::sqrt(float(hp.n_embd_head_k));
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_norm(x, l.attn_norm, "attn_norm", il);
            if (hp.is_recurrent(il)) {
                cur = build_shortconv(b, l, cur, il);
            } else {
                auto [q, k, v] = b.build_qkv_rope(l, cur, il);  // RMS norms over each head's dims
                cur = b.build_attn(il, l.wo, q, k, v, kq_scale);
            }
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu);
        }
        return b.finish(x);
    }

    // A hybrid's states cannot move: no context shift (the memory says so).
    std::optional<cached_k_rope> k_rope_layout(const model_hparams &) const override { return std::nullopt; }

  private:
    // out_proj(C * conv(B * x)) on the normed x [n_embd, n_tokens].
    static tensor *build_shortconv(graph_builder &b, const layer_weights &l, tensor *x, int64_t il) {
        context &ctx = b.ctx;
        const int64_t n = b.hp.n_embd;
        tensor *bcx =
            b.build_mm(l.shortconv_in_proj, x, nullptr, "shortconv_in_proj", il);  // [3 n, n_tokens]
        auto rows = [&](int64_t k) {
            return view_2d(ctx, bcx, n, bcx->ne[1], bcx->nb[1], size_t(k * n) * sizeof(float));
        };
        tensor *bx = b.named(mul(ctx, rows(0), rows(2)), "shortconv_bx", il);
        tensor *conv = b.build_recurrent_conv(bx, l.shortconv_conv, il);
        tensor *y = b.named(mul(ctx, rows(1), conv), "shortconv_y", il);
        return b.build_mm(l.shortconv_out_proj, y, nullptr, "shortconv_out_proj", il);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_lfm2() {
    return std::make_unique<arch_lfm2>();
}

}  // namespace weft
