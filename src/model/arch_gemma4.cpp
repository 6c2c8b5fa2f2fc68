// src/model/arch_gemma4.cpp — Gemma 4 (text). Gemma 3's block (RMS norms before and after the
// attention and the FFN, per-head Q and K norms, a GELU-gated FFN, NeoX RoPE, sliding windows on the
// layers sliding_window_pattern marks, with a RoPE base of their own) with these changes:
//   - the scores are not scaled (kq_scale 1), V is RMS-normed per head without a weight, and a layer
//     without attn_v uses its K projection (before the K norm) as V;
//   - the window's layers and the others have heads of their own sizes (key_length_swa ...) and KV
//     head counts (head_count_kv per layer); the global layers rotate part of each head
//     (rope_freqs: 1 for the rotated pairs, 1e30 for the others);
//   - the last attention.shared_kv_layers layers keep no KV rows: they attend over those of the last
//     layer of their kind before them (the reference's rule: the layer before the shared ones for a
//     global layer, the one before that for a window layer);
//   - per-layer inputs (embedding_length_per_layer_input > 0): per token, n_layer vectors looked up
//     in per_layer_token_embd (× √n) plus an RMS-normed projection of the scaled embeddings (÷ √n_embd),
//     the sum ÷ √2; after each block's FFN, proj(gelu(inp_gate · x) × that layer's vector) is RMS-normed
//     and added to the residual stream;
//   - each block's output × layer_output_scale where the file has it; the logits soft-capped;
//   - a layer with a router (ffn_gate_inp; the 26B-A4B has one on every layer) adds experts beside
//     its dense FFN: the FFN's output RMS-normed by post_ffw_norm_1, plus the mixture of experts on
//     the pre_ffw_norm_2-normed residual (GELU-gated experts of expert_feed_forward_length rows,
//     gate and up fused in ffn_gate_up_exps or apart, each expert's output × ffn_down_exps.scale
//     where the file has it), RMS-normed by post_ffw_norm_2; the sum goes through post_ffw_norm as
//     the dense FFN's output does. The router reads the residual RMS-normed without a weight,
//     ÷ √n_embd, × ffn_gate_inp.scale; softmax over the experts, the picked weights renormalized.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

// <arch>.attention.sliding_window_pattern: one bool (or integer) per layer, or one for every layer.
std::vector<bool> read_window_layers(const gguf_file &f, const model_hparams &hp) {
    const std::string key = hp.arch + ".attention.sliding_window_pattern";
    const gguf_kv *kv = f.find(key);
    if (!kv) throw error(f.path() + ": " + key + ": missing (required)");
    std::vector<bool> flags;
    if (kv->element_type() == gguf_type::boolean) {
        for (uint64_t i = 0; i < kv->n; ++i) flags.push_back(kv->raw.at(size_t(i)) != 0);
    } else {
        const std::vector<int64_t> values = f.get_int_array(key).value();
        for (int64_t v : values) flags.push_back(v != 0);
    }
    if (flags.size() == 1) flags.assign(size_t(hp.n_layer), flags.front());
    if (int64_t(flags.size()) != hp.n_layer)
        throw error(f.path() + ": " + key + ": has " + std::to_string(flags.size()) +
                    " entries, expected one per layer (" + std::to_string(hp.n_layer) + ")");
    return flags;
}

class arch_gemma4 final : public architecture {
  public:
    const char *name() const override { return "gemma4"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        const std::string p = f.path() + ": " + hp.arch + ".";
        hp.rope_mode = rope_mode_neox;
        if (hp.n_swa <= 0) throw error(p + "attention.sliding_window: missing or 0 (required)");
        hp.swa_layers = read_window_layers(f, hp);
        hp.rope_freq_base_swa = read_hparam_float(f, hp, "rope.freq_base_swa", hp.rope_freq_base);
        auto required = [&](const char *suffix) {
            const auto v = f.get_int(hp.arch + "." + suffix);
            if (!v) throw error(p + suffix + ": missing (required)");
            return *v;
        };
        hp.n_embd_head_k_swa = required("attention.key_length_swa");
        hp.n_embd_head_v_swa = required("attention.value_length_swa");
        hp.n_rot_swa = f.get_int(hp.arch + ".rope.dimension_count_swa").value_or(hp.n_rot);
        if (hp.n_embd_head_k != hp.n_embd_head_v || hp.n_embd_head_k_swa != hp.n_embd_head_v_swa)
            throw error(p + "attention: gemma4 needs keys and values of one size (key_length " +
                        std::to_string(hp.n_embd_head_k) + ", value_length " +
                        std::to_string(hp.n_embd_head_v) + ", key_length_swa " +
                        std::to_string(hp.n_embd_head_k_swa) + ", value_length_swa " +
                        std::to_string(hp.n_embd_head_v_swa) + ")");
        if (hp.n_embd_head_k_swa <= 0 || hp.n_embd_head_k_swa > (int64_t(1) << 16))
            throw error(p + "attention.key_length_swa: must be in [1, 65536], is " +
                        std::to_string(hp.n_embd_head_k_swa));
        if (hp.n_rot_swa <= 0 || hp.n_rot_swa > hp.n_embd_head_k_swa || hp.n_rot_swa % 2 != 0)
            throw error(p + "rope.dimension_count_swa: " + std::to_string(hp.n_rot_swa) +
                        " must be even and in [2, key_length_swa " + std::to_string(hp.n_embd_head_k_swa) +
                        "]");
        if (hp.n_expert > 0) {  // the experts: softmax routing, the picks' weights renormalized
            if (hp.n_ff_exp <= 0)
                throw error(p + "expert_feed_forward_length: missing (required with experts)");
            hp.expert_gating_func = model_hparams::expert_gating::softmax;
            hp.expert_weights_norm = true;
        }
        hp.n_embd_per_layer = required("embedding_length_per_layer_input");
        if (hp.n_embd_per_layer < 0 || hp.n_embd_per_layer > (int64_t(1) << 16))
            throw error(p + "embedding_length_per_layer_input: must be in [0, 65536], is " +
                        std::to_string(hp.n_embd_per_layer));

        // The shared KV layers read the rows of the last layer of their kind before them.
        const int64_t n_shared = f.get_int(hp.arch + ".attention.shared_kv_layers").value_or(0);
        if (n_shared < 0 || n_shared >= hp.n_layer)
            throw error(p + "attention.shared_kv_layers: must be in [0, block_count), is " +
                        std::to_string(n_shared));
        const int64_t first_shared = hp.n_layer - n_shared;
        hp.kv_source.clear();
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            if (il < first_shared) {
                hp.kv_source.push_back(il);
                continue;
            }
            const int64_t source = first_shared - (hp.is_swa(il) ? 2 : 1);
            if (source < 0 || hp.is_swa(source) != hp.is_swa(il) || hp.n_head_kv(source) != hp.n_head_kv(il))
                throw error(p + "attention.shared_kv_layers: layer " + std::to_string(il) +
                            " would attend over the KV rows of layer " + std::to_string(source) +
                            ", which is not a layer of the same kind and KV heads");
            hp.kv_source.push_back(source);
        }
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        const int64_t n_embd = hp.n_embd, n_pl = hp.n_embd_per_layer;
        w.tok_embd = tl.create("token_embd.weight", {n_embd, hp.n_vocab});
        w.output_norm = tl.create("output_norm.weight", {n_embd});
        w.output = tl.create_optional("output.weight", {n_embd, hp.n_vocab});
        if (!w.output) w.output = w.tok_embd;  // tied embeddings
        bool any_global = false;
        for (int64_t il = 0; il < hp.n_layer; ++il) any_global = any_global || !hp.is_swa(il);
        if (any_global) w.rope_freqs = tl.create("rope_freqs.weight", {hp.n_rot / 2});
        if (n_pl > 0) {
            w.per_layer_tok_embd = tl.create("per_layer_token_embd.weight", {n_pl * hp.n_layer, hp.n_vocab});
            w.per_layer_model_proj = tl.create("per_layer_model_proj.weight", {n_embd, n_pl * hp.n_layer});
            w.per_layer_proj_norm = tl.create("per_layer_proj_norm.weight", {n_pl});
        }
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            const int64_t head = hp.head_k(il), n_k = hp.n_embd_k_gqa(il);
            const bool own_kv = hp.has_own_kv(il);
            auto kv_tensor = [&](const char *what, std::initializer_list<int64_t> ne) {
                return own_kv ? tl.create(block_tensor_name(il, what), ne)
                              : tl.create_optional(block_tensor_name(il, what), ne);
            };
            l.attn_norm = create_norm(tl, hp, il, "attn_norm");
            l.wq = tl.create(block_tensor_name(il, "attn_q"), {n_embd, head * hp.n_head(il)});
            l.wk = kv_tensor("attn_k", {n_embd, n_k});
            l.wv = tl.create_optional(block_tensor_name(il, "attn_v"), {n_embd, hp.n_embd_v_gqa(il)});
            l.wo = tl.create(block_tensor_name(il, "attn_output"), {head * hp.n_head(il), n_embd});
            l.attn_q_norm = tl.create(block_tensor_name(il, "attn_q_norm"), {head});
            l.attn_k_norm = kv_tensor("attn_k_norm", {head});
            l.attn_post_norm = create_norm(tl, hp, il, "post_attention_norm");
            l.layer_out_scale = tl.create_optional(block_tensor_name(il, "layer_output_scale"), {1});
            l.ffn_norm = create_norm(tl, hp, il, "ffn_norm");
            create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
            l.ffn_post_norm = create_norm(tl, hp, il, "post_ffw_norm");
            if (tl.has(block_tensor_name(il, "ffn_gate_inp"))) create_expert_weights(tl, hp, il, l);
            if (n_pl > 0) {
                l.per_layer_inp_gate = tl.create(block_tensor_name(il, "inp_gate"), {n_embd, n_pl});
                l.per_layer_proj = tl.create(block_tensor_name(il, "proj"), {n_pl, n_embd});
                l.per_layer_post_norm = create_norm(tl, hp, il, "post_norm");
            }
        }
    }

    // Keys rotate with the global layers' frequency factors, which a shift cannot apply per layer.
    std::optional<cached_k_rope> k_rope_layout(const model_hparams &) const override { return std::nullopt; }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        context &ctx = b.ctx;
        tensor *per_layer = nullptr;  // [n_embd_per_layer, n_tokens, n_layer]
        tensor *x = b.stage_input([&] {
            tensor *embd = b.build_inp_embd();
            if (b.params.shape.embd_input && hp.n_embd_per_layer > 0)
                throw error("gemma4: a model with per-layer inputs takes token ids, not embeddings");
            // embeddings given as input (images) are not scaled
            return b.named(b.params.shape.embd_input ? embd : scale(ctx, embd, std::sqrt(float(hp.n_embd))),
                           "inp_scaled");
        });
        if (hp.n_embd_per_layer > 0) {
            // on a later pipeline stage the embeddings are gone: refuse rather than guess
            if (!b.first_stage())
                throw error(
                    "gemma4: per-layer inputs need the embeddings, which only the first pipeline stage has");
            per_layer = build_per_layer_inputs(b, x);
        }
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_norm(x, l.attn_norm, "attn_norm", il);
            cur = build_attention(b, l, cur, il);
            if (il == hp.n_layer - 1) {  // only the rows that produce logits go on
                cur = b.select_outputs(cur);
                x = b.select_outputs(x);
            }
            cur = b.build_norm(cur, l.attn_post_norm, "attn_post_norm", il);
            tensor *attn_out = b.named(add(ctx, cur, x), "attn_out", il);
            cur = build_ffn(b, l, attn_out, il);
            cur = b.build_norm(cur, l.ffn_post_norm, "ffn_post_norm", il);
            cur = b.named(add(ctx, cur, attn_out), "ffn_out_res", il);
            if (per_layer) {
                const int64_t n_pl = hp.n_embd_per_layer;
                tensor *input = view_2d(ctx, per_layer, n_pl, b.n_tokens, per_layer->nb[1],
                                        size_t(il) * per_layer->nb[2]);
                if (il == hp.n_layer - 1) input = b.select_outputs(input);
                tensor *g = gelu(ctx, b.build_mm(l.per_layer_inp_gate, cur, nullptr, "per_layer_gate", il));
                g = b.named(mul(ctx, g, input), "per_layer_gated", il);
                g = b.build_mm(l.per_layer_proj, g, nullptr, "per_layer_proj", il);
                g = b.build_norm(g, l.per_layer_post_norm, "per_layer_embd_out", il);
                cur = b.named(add(ctx, cur, g), "per_layer_res", il);
            }
            if (l.layer_out_scale) cur = mul(ctx, cur, l.layer_out_scale);
            x = b.named(cur, "l_out", il);
        }
        return b.finish(x);
    }

  private:
    // A layer's router, experts, their norms and the experts' scales (see the file's comment).
    static void create_expert_weights(tensor_loader &tl, const model_hparams &hp, int64_t il,
                                      layer_weights &l) {
        const int64_t n_embd = hp.n_embd, n_expert = hp.n_expert, n_ff = hp.n_ff_exp;
        if (n_expert <= 0)
            throw error("gemma4: layer " + std::to_string(il) +
                        " has a router (ffn_gate_inp) but the file gives no gemma4.expert_count");
        l.ffn_gate_inp = tl.create(block_tensor_name(il, "ffn_gate_inp"), {n_embd, n_expert});
        l.ffn_gate_inp_s = tl.create(block_tensor_name(il, "ffn_gate_inp", "scale"), {n_embd});
        l.ffn_pre_norm_2 = create_norm(tl, hp, il, "pre_ffw_norm_2");
        l.ffn_post_norm_1 = create_norm(tl, hp, il, "post_ffw_norm_1");
        l.ffn_post_norm_2 = create_norm(tl, hp, il, "post_ffw_norm_2");
        l.ffn_gate_up_exps =
            tl.create_optional(block_tensor_name(il, "ffn_gate_up_exps"), {n_embd, 2 * n_ff, n_expert});
        if (!l.ffn_gate_up_exps) {
            l.ffn_gate_exps = tl.create(block_tensor_name(il, "ffn_gate_exps"), {n_embd, n_ff, n_expert});
            l.ffn_up_exps = tl.create(block_tensor_name(il, "ffn_up_exps"), {n_embd, n_ff, n_expert});
        }
        l.ffn_down_exps = tl.create(block_tensor_name(il, "ffn_down_exps"), {n_ff, n_embd, n_expert});
        l.ffn_down_exps_s = tl.create_optional(block_tensor_name(il, "ffn_down_exps", "scale"), {n_expert});
    }

    // The FFN of the residual stream attn_out: the dense one, and beside it the experts where the
    // layer has a router; before ffn_post_norm.
    static tensor *build_ffn(graph_builder &b, const layer_weights &l, tensor *attn_out, int64_t il) {
        context &ctx = b.ctx;
        tensor *dense = b.build_norm(attn_out, l.ffn_norm, "ffn_norm", il);
        dense = b.build_ffn(dense, l, il, graph_builder::ffn_act::gelu);
        if (!l.ffn_gate_inp) return dense;
        dense = b.build_norm(dense, l.ffn_post_norm_1, "ffn_mlp", il);
        // the router reads the residual, RMS-normed without a weight
        tensor *route = b.build_norm(attn_out, nullptr, "ffn_moe_route_norm", il);
        route = mul(ctx, scale(ctx, route, 1.0f / std::sqrt(float(b.hp.n_embd))), l.ffn_gate_inp_s);
        tensor *logits = b.build_mm(l.ffn_gate_inp, route, nullptr, "ffn_moe_logits", il);
        tensor *experts = b.build_norm(attn_out, l.ffn_pre_norm_2, "ffn_norm_2", il);
        experts = build_moe_ffn(b, experts, l, il, {.logits = logits, .act = graph_builder::ffn_act::gelu});
        experts = b.build_norm(experts, l.ffn_post_norm_2, "ffn_moe", il);
        return b.named(add(ctx, dense, experts), "ffn_moe_combined", il);
    }

    // Q (normed, rotated), and where the layer has rows of its own K (normed, rotated) and V (normed
    // without a weight; K's projection where the layer has no attn_v); the attention, unscaled.
    static tensor *build_attention(graph_builder &b, const layer_weights &l, tensor *x, int64_t il) {
        const model_hparams &hp = b.hp;
        context &ctx = b.ctx;
        const int64_t head = hp.head_k(il), n_tokens = x->ne[1];
        // the global layers rotate part of each head: the others' factors are 1e30
        tensor *factors = hp.is_swa(il) ? nullptr : b.w.rope_freqs;
        auto rotate = [&](tensor *t, const char *name) {
            return b.named(rope(ctx, t, b.build_inp_pos(), model_rope_params(hp, il), factors), name, il);
        };
        tensor *q = reshape_3d(ctx, b.build_mm(l.wq, x, nullptr, "Qcur", il), head, hp.n_head(il), n_tokens);
        q = rotate(b.build_norm(q, l.attn_q_norm, "Qcur_normed", il), "Qcur_pos");
        if (!hp.has_own_kv(il)) return b.build_attn(il, l.wo, q, nullptr, nullptr, 1.0f);
        const int64_t n_head_kv = hp.n_head_kv(il);
        tensor *k_proj = b.build_mm(l.wk, x, nullptr, "Kcur", il);
        tensor *v_proj = l.wv ? b.build_mm(l.wv, x, nullptr, "Vcur", il) : k_proj;
        tensor *k = reshape_3d(ctx, k_proj, head, n_head_kv, n_tokens);
        tensor *v = reshape_3d(ctx, v_proj, head, n_head_kv, n_tokens);
        k = rotate(b.build_norm(k, l.attn_k_norm, "Kcur_normed", il), "Kcur_pos");
        v = b.build_norm(v, nullptr, "Vcur_normed", il);
        return b.build_attn(il, l.wo, q, k, v, 1.0f);
    }

    // The per-layer inputs of the tokens: [n_embd_per_layer, n_tokens, n_layer].
    static tensor *build_per_layer_inputs(graph_builder &b, tensor *embd) {
        const model_hparams &hp = b.hp;
        context &ctx = b.ctx;
        const int64_t n_pl = hp.n_embd_per_layer, n_tokens = b.n_tokens;
        WEFT_ASSERT(b.inp_tokens());
        tensor *looked_up = get_rows(ctx, b.w.per_layer_tok_embd, b.inp_tokens());
        looked_up =
            scale(ctx, reshape_3d(ctx, looked_up, n_pl, hp.n_layer, n_tokens), std::sqrt(float(n_pl)));
        tensor *proj = b.build_mm(b.w.per_layer_model_proj, embd, nullptr, "per_layer_model_proj", -1);
        proj =
            reshape_3d(ctx, scale(ctx, proj, 1.0f / std::sqrt(float(hp.n_embd))), n_pl, hp.n_layer, n_tokens);
        proj = b.build_norm(proj, b.w.per_layer_proj_norm, "per_layer_proj", -1);
        tensor *sum = scale(ctx, add(ctx, proj, looked_up), 1.0f / std::sqrt(2.0f));
        return b.named(cont(ctx, permute(ctx, sum, 0, 2, 1, 3)), "inp_per_layer");
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_gemma4() {
    return std::make_unique<arch_gemma4>();
}

}  // namespace weft
