// src/model/arch_deepseek2.cpp — DeepSeek-V2/V3: multi-head latent attention and a mixture of experts
// with shared experts after the leading dense layers.
//
// Attention: Q through a low-rank bottleneck (attn_q_a, RMS norm, attn_q_b; "Lite" models have a plain
// attn_q), each head's query the qk_nope dims then the n_rot rotary dims. attn_kv_a_mqa makes a
// kv_lora_rank latent and one rotary key of n_rot dims shared by every head; the normed latent
// through attn_kv_b gives each head's k_nope and V. A head's key is k_nope then the shared rotary key
// (key_length = qk_nope + n_rot), its value value_length wide. Computed as ordinary multi-head
// attention over a cache of the decompressed K and V (the reference's non-absorbed path).
#include <cmath>
#include <string>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/checked.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

// 1 + 0.1 ln(1 / freq_scale): the magnitude the rope kernel applies under YaRN
float yarn_rope_mscale(const model_hparams &hp) {
    return 1.0f + 0.1f * std::log(1.0f / hp.rope_freq_scale);
}

class arch_deepseek2 final : public architecture {
  public:
    const char *name() const override { return "deepseek2"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        const std::string p = hp.arch + ".";
        auto fail = [&](const std::string &key, const std::string &what) {
            throw error(f.path() + ": " + p + key + ": " + what);
        };
        hp.rope_mode = rope_mode_normal;
        if (f.get_int(p + "attention.key_length_mla"))
            fail("attention.key_length_mla",
                 "files with the latent attention split into attn_k_b / attn_v_b are not supported "
                 "(convert with attn_kv_b)");
        hp.n_lora_q = f.get_int(p + "attention.q_lora_rank").value_or(0);
        const auto kv_rank = f.get_int(p + "attention.kv_lora_rank");
        if (!kv_rank || *kv_rank <= 0) fail("attention.kv_lora_rank", "missing or not positive (required)");
        hp.n_lora_kv = *kv_rank;
        if (hp.n_lora_q < 0) fail("attention.q_lora_rank", "must not be negative");
        if (hp.n_rot >= hp.n_embd_head_k)
            fail("rope.dimension_count", std::to_string(hp.n_rot) + " must be less than key_length " +
                                             std::to_string(hp.n_embd_head_k));
        for (int64_t il = 0; il < hp.n_layer; ++il)
            if (hp.n_head_kv(il) != hp.n_head(il))
                fail("attention.head_count_kv", "must equal head_count (the attention runs per head)");
        // the widths create_tensors derives: they must fit in int64 before a shape is made of them
        const std::string keys = f.path() + ": " + p + "attention.";
        checked_add(hp.n_lora_kv, hp.n_rot, keys + "kv_lora_rank + rope.dimension_count");
        const int64_t head_kv_b = checked_add(hp.n_embd_head_k - hp.n_rot, hp.n_embd_head_v,
                                              keys + "key_length - rope.dimension_count + value_length");
        for (int64_t il = 0; il < hp.n_layer; ++il)
            checked_mul(hp.n_head(il), head_kv_b, keys + "head_count x (key_length - rope + value_length)");

        // expert_gating_func is absent in older V2 files: softmax
        read_v3_routing_hparams(f, hp, model_hparams::expert_gating::softmax);

        // The GGUF stores yarn_log_multiplier as 0.1 × mscale_all_dim; the reference divides it back.
        hp.rope_yarn_log_mul = read_hparam_float(f, hp, "rope.scaling.yarn_log_multiplier", 0.0f) / 0.1f;
        if (hp.rope_scaling == rope_scaling_kind::yarn) {
            // The attention magnitude goes into the KQ scale (mscale², see build_graph); the rope
            // gets the factor that its own 1 + 0.1 ln(1/freq_scale) turns back into attn_factor.
            const float attn_factor = hp.rope_yarn_log_mul != 0.0f ? 1.0f : yarn_rope_mscale(hp);
            hp.yarn_attn_factor = attn_factor / yarn_rope_mscale(hp);
        }
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        const int64_t n_embd = hp.n_embd, head_k = hp.n_embd_head_k, head_v = hp.n_embd_head_v;
        const int64_t n_nope = head_k - hp.n_rot;
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            const int64_t n_head = hp.n_head(il);
            auto name = [&](const char *what) { return block_tensor_name(il, what); };
            l.attn_norm = create_norm(tl, hp, il, "attn_norm");
            if (hp.n_lora_q > 0) {
                l.wq_a = tl.create(name("attn_q_a"), {n_embd, hp.n_lora_q});
                l.attn_q_a_norm = tl.create(name("attn_q_a_norm"), {hp.n_lora_q});
                l.wq_b = tl.create(name("attn_q_b"), {hp.n_lora_q, n_head * head_k});
            } else {
                l.wq = tl.create(name("attn_q"), {n_embd, n_head * head_k});
            }
            l.wkv_a_mqa = tl.create(name("attn_kv_a_mqa"), {n_embd, hp.n_lora_kv + hp.n_rot});
            l.attn_kv_a_norm = tl.create(name("attn_kv_a_norm"), {hp.n_lora_kv});
            l.wkv_b = tl.create(name("attn_kv_b"), {hp.n_lora_kv, n_head * (n_nope + head_v)});
            l.wo = tl.create(name("attn_output"), {n_head * head_v, n_embd});
            if (il < hp.n_layer_dense_lead) {
                l.ffn_norm = create_norm(tl, hp, il, "ffn_norm");
                create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
            } else {
                create_moe_ffn(tl, hp, il, l, hp.n_expert_shared > 0 ? moe_shared::plain : moe_shared::none);
            }
        }
    }

    // The cache holds each head's decompressed key: k_nope, then the shared rope key (rotated once
    // per head, so every head's copy turns alike).
    std::optional<cached_k_rope> k_rope_layout(const model_hparams &hp) const override {
        return cached_k_rope{hp.n_embd_head_k - hp.n_rot, hp.n_rot};
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        context &ctx = b.ctx;
        const int64_t n_tokens = b.n_tokens;
        const int64_t head_k = hp.n_embd_head_k, head_v = hp.n_embd_head_v, n_rot = hp.n_rot;
        const int64_t n_nope = head_k - n_rot, n_lora_kv = hp.n_lora_kv;
        const size_t f = sizeof(float);

        // the attention magnitude of YaRN (1 without it) squared, on the KQ scale
        float mscale = 1.0f;
        if (hp.rope_scaling == rope_scaling_kind::yarn)
            mscale = hp.yarn_attn_factor * yarn_rope_mscale(hp) *
                     (1.0f + 0.1f * hp.rope_yarn_log_mul * std::log(1.0f / hp.rope_freq_scale));
        const float kq_scale = mscale * mscale / std::sqrt(float(head_k));

        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            const int64_t n_head = hp.n_head(il);
            tensor *cur = b.build_norm(x, l.attn_norm, "attn_norm", il);

            // queries [head_k * n_head, n_tokens]: per head the no-rope dims, then the rope dims
            tensor *q;
            if (l.wq_a) {
                q = b.build_mm(l.wq_a, cur, nullptr, "q_a", il);
                q = b.build_norm(q, l.attn_q_a_norm, "q_a_norm", il);
                q = b.build_mm(l.wq_b, q, nullptr, "q", il);
            } else {
                q = b.build_mm(l.wq, cur, nullptr, "q", il);
            }
            tensor *q_nope = b.named(
                view_3d(ctx, q, n_nope, n_head, n_tokens, size_t(head_k) * f, q->nb[1], 0), "q_nope", il);
            tensor *q_pe =
                view_3d(ctx, q, n_rot, n_head, n_tokens, size_t(head_k) * f, q->nb[1], size_t(n_nope) * f);

            // the latent [n_lora_kv] and the one rotary key [n_rot] of each token
            tensor *kv_pe = b.build_mm(l.wkv_a_mqa, cur, nullptr, "kv_cmpr_pe", il);
            tensor *kv_cmpr = view_2d(ctx, kv_pe, n_lora_kv, n_tokens, kv_pe->nb[1], 0);
            // the rotary key seen by every head (a stride-0 head axis): rotated once per head, the
            // same values as rotating it once and repeating it
            tensor *k_pe =
                view_3d(ctx, kv_pe, n_rot, n_head, n_tokens, 0, kv_pe->nb[1], size_t(n_lora_kv) * f);
            q_pe = b.build_rope(q_pe, "q_pe", il);
            k_pe = b.build_rope(k_pe, "k_pe", il);
            kv_cmpr = b.build_norm(kv_cmpr, l.attn_kv_a_norm, "kv_cmpr", il);

            // each head's k_nope then V, [n_nope + head_v] per head
            tensor *kv = b.build_mm(l.wkv_b, kv_cmpr, nullptr, "kv", il);
            const size_t head_row = size_t(n_nope + head_v) * f;
            tensor *k_nope = view_3d(ctx, kv, n_nope, n_head, n_tokens, head_row, kv->nb[1], 0);
            tensor *v = view_3d(ctx, kv, head_v, n_head, n_tokens, head_row, kv->nb[1], size_t(n_nope) * f);
            v = b.named(cont(ctx, v), "Vcur", il);
            tensor *qcur = b.named(concat(ctx, q_nope, q_pe, 0), "Qcur", il);
            tensor *kcur = b.named(concat(ctx, k_nope, k_pe, 0), "Kcur", il);

            cur = b.build_attn(il, l.wo, qcur, kcur, v, kq_scale);
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu);
        }
        return b.finish(x);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_deepseek2() {
    return std::make_unique<arch_deepseek2>();
}

}  // namespace weft
