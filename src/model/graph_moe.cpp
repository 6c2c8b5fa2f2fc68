// src/model/graph_moe.cpp — the mixture-of-experts FFN (see graph_moe.h): router, top-k picking,
// the picked experts through mul_mat_id, their weighted sum, and the gated shared expert.
#include "model/graph_moe.h"

#include <string>

#include "model/tensor_loader.h"
#include "weft/core/checked.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

// down(silu(gate · x) * up · x), each step named "<prefix>_<step>-<il>"
tensor *build_shared_expert(graph_builder &b, tensor *x, const layer_weights &l, int64_t il) {
    const auto [gate, up] = b.build_mms<2>(
        {{{l.ffn_gate_shexp, nullptr, "ffn_shexp_gate"}, {l.ffn_up_shexp, nullptr, "ffn_shexp_up"}}}, x, il);
    tensor *act = b.named(swiglu(b.ctx, gate, up), "ffn_shexp_swiglu", il);
    tensor *out = b.build_mm(l.ffn_down_shexp, act, nullptr, "ffn_shexp_down", il);
    if (!l.ffn_gate_inp_shexp) return out;
    // the shared expert's share: sigmoid of one dot product per token, [1, n]
    tensor *share = b.build_mm(l.ffn_gate_inp_shexp, x, nullptr, "ffn_shexp_share_logit", il);
    share = b.named(sigmoid(b.ctx, share), "ffn_shexp_share", il);
    return b.named(mul(b.ctx, out, share), "ffn_shexp_out", il);
}

}  // namespace

void read_v3_routing_hparams(const gguf_file &f, model_hparams &hp,
                             model_hparams::expert_gating absent_gating) {
    const std::string p = hp.arch + ".";
    auto fail = [&](const std::string &key, const std::string &what) {
        throw error(f.path() + ": " + p + key + ": " + what);
    };
    hp.n_layer_dense_lead = f.get_int(p + "leading_dense_block_count").value_or(0);
    if (hp.n_layer_dense_lead < 0 || hp.n_layer_dense_lead > hp.n_layer)
        fail("leading_dense_block_count", "must be in [0, block_count]");
    if (hp.n_layer_dense_lead < hp.n_layer && hp.n_expert == 0)
        fail("expert_count", "missing or 0, but layers after the leading dense ones are mixtures of experts");
    if (hp.n_expert > 0 && hp.n_ff_exp == 0)
        fail("expert_feed_forward_length", "missing (required with experts)");
    hp.n_expert_shared = f.get_int(p + "expert_shared_count").value_or(0);
    if (hp.n_expert_shared < 0) fail("expert_shared_count", "must not be negative");
    if (hp.n_ff_shexp == 0)
        hp.n_ff_shexp = checked_mul(hp.n_ff_exp, hp.n_expert_shared,
                                    f.path() + ": " + p + "expert_feed_forward_length x expert_shared_count");
    hp.expert_weights_scale = read_hparam_float(f, hp, "expert_weights_scale", 0.0f);
    hp.expert_weights_norm = f.get_bool(p + "expert_weights_norm").value_or(false);
    const int64_t gating = f.get_int(p + "expert_gating_func").value_or(0);
    if (gating == 0)
        hp.expert_gating_func = absent_gating;
    else if (gating == 1)
        hp.expert_gating_func = model_hparams::expert_gating::softmax;
    else if (gating == 2)
        hp.expert_gating_func = model_hparams::expert_gating::sigmoid;
    else
        fail("expert_gating_func", std::to_string(gating) + " is not supported (1 softmax, 2 sigmoid)");
    const int64_t n_group = f.get_int(p + "expert_group_count").value_or(0);
    const int64_t n_group_used = f.get_int(p + "expert_group_used_count").value_or(n_group);
    if (n_group > 1 && n_group_used < n_group)
        fail("expert_group_used_count", "group-limited expert selection is not supported");
}

void create_moe_ffn(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                    moe_shared shared, const char *norm_name) {
    const int64_t n_embd = hp.n_embd, n_expert = hp.n_expert, n_ff = hp.n_ff_exp;
    l.ffn_norm = tl.create(block_tensor_name(il, norm_name), {n_embd});
    l.ffn_gate_inp = tl.create(block_tensor_name(il, "ffn_gate_inp"), {n_embd, n_expert});
    l.ffn_gate_exps = tl.create(block_tensor_name(il, "ffn_gate_exps"), {n_embd, n_ff, n_expert});
    l.ffn_up_exps = tl.create(block_tensor_name(il, "ffn_up_exps"), {n_embd, n_ff, n_expert});
    l.ffn_down_exps = tl.create(block_tensor_name(il, "ffn_down_exps"), {n_ff, n_embd, n_expert});
    l.ffn_exp_probs_b = tl.create_optional(block_tensor_name(il, "exp_probs_b", "bias"), {n_expert});
    if (shared == moe_shared::none) return;
    const int64_t n_ff_sh = hp.n_ff_shexp;
    if (shared == moe_shared::gated)
        l.ffn_gate_inp_shexp = tl.create(block_tensor_name(il, "ffn_gate_inp_shexp"), {n_embd});
    l.ffn_gate_shexp = tl.create(block_tensor_name(il, "ffn_gate_shexp"), {n_embd, n_ff_sh});
    l.ffn_up_shexp = tl.create(block_tensor_name(il, "ffn_up_shexp"), {n_embd, n_ff_sh});
    l.ffn_down_shexp = tl.create(block_tensor_name(il, "ffn_down_shexp"), {n_ff_sh, n_embd});
}

void create_llama_moe_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) {
    create_llama_globals(tl, hp, w);
    w.layers.resize(size_t(hp.n_layer));
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        create_llama_attn(tl, hp, il, w.layers[size_t(il)]);
        create_moe_ffn(tl, hp, il, w.layers[size_t(il)], moe_shared::none);
    }
}

tensor *build_moe_ffn(graph_builder &b, tensor *x, const layer_weights &l, int64_t il,
                      const moe_ffn_options &options) {
    context &ctx = b.ctx;
    const int64_t n_embd = x->ne[0], n = x->ne[1];  // n: the tokens, or the output rows of the last layer
    const int64_t n_expert = b.hp.n_expert, n_used = b.hp.n_expert_used;

    // 1. the router: each token's probability of each expert, and the n_used most probable
    // [n_expert, n] (+ the router's bias where the layer has one)
    tensor *logits = options.logits ? options.logits
                                    : b.build_mm(l.ffn_gate_inp, x, l.ffn_gate_inp_b, "ffn_moe_logits", il);
    const model_hparams::expert_gating gating = b.hp.expert_gating_func;
    tensor *probs = logits;  // softmax_weight picks by the logits themselves
    if (gating == model_hparams::expert_gating::sigmoid)
        probs = b.named(sigmoid(ctx, logits), "ffn_moe_probs", il);
    else if (gating == model_hparams::expert_gating::softmax)
        probs = b.named(soft_max(ctx, logits), "ffn_moe_probs", il);
    // the selection may add a bias to the probabilities; the weights are the probabilities
    tensor *selection = probs;
    if (l.ffn_exp_probs_b)
        selection = b.named(add(ctx, probs, l.ffn_exp_probs_b), "ffn_moe_probs_biased", il);
    tensor *picked = b.named(top_k(ctx, selection, n_used), "ffn_moe_topk", il);  // i32 [n_used, n]
    tensor *weights =
        b.named(get_rows(ctx, reshape_3d(ctx, probs, 1, n_expert, n), picked), "ffn_moe_weights",
                il);                                               // [1, n_used, n]
    if (gating == model_hparams::expert_gating::softmax_weight) {  // softmax over the picked logits
        tensor *w2 =
            b.named(soft_max(ctx, reshape_2d(ctx, weights, n_used, n)), "ffn_moe_weights_softmax", il);
        weights = reshape_3d(ctx, w2, 1, n_used, n);
    }
    if (b.hp.expert_weights_norm) {
        tensor *w2 = reshape_2d(ctx, weights, n_used, n);
        tensor *sum = b.named(sum_rows(ctx, w2), "ffn_moe_weights_sum", il);  // [1, n]
        w2 = b.named(div(ctx, w2, sum), "ffn_moe_weights_norm", il);
        weights = reshape_3d(ctx, w2, 1, n_used, n);
    }
    if (b.hp.expert_weights_scale != 0.0f)
        weights = b.named(scale(ctx, weights, b.hp.expert_weights_scale), "ffn_moe_weights_scaled", il);

    // 2. the picked experts on each token's one column: [n_ff_exp, n_used, n], then [n_embd, n_used, n]
    // (each + its expert's bias where the layer has them: gpt-oss)
    auto experts_mm = [&](tensor *mats, tensor *bias, tensor *in, const char *name, const char *biased_name) {
        tensor *out = b.named(mul_mat_id(ctx, mats, in, picked), name, il);
        return bias ? b.named(add_id(ctx, out, bias, picked), biased_name, il) : out;
    };
    tensor *x3 = reshape_3d(ctx, x, n_embd, 1, n);
    if (b.hp.expert_weights_before_ffn) {  // each pick reads x × its weight: [n_embd, n_used, n]
        tensor *copies = x3;
        for (int64_t i = 1; i < n_used; ++i) copies = concat(ctx, copies, x3, 1);
        x3 = b.named(mul(ctx, copies, weights), "ffn_moe_weighted_inp", il);
    }
    tensor *up = nullptr, *gate = nullptr;
    if (l.ffn_gate_up_exps) {  // one product, then each expert's gate rows and its up rows
        tensor *gate_up = b.named(mul_mat_id(ctx, l.ffn_gate_up_exps, x3, picked), "ffn_moe_gate_up", il);
        const int64_t n_ff = gate_up->ne[0] / 2;
        auto half = [&](int64_t i, const char *name) {
            return b.named(view_3d(ctx, gate_up, n_ff, n_used, n, gate_up->nb[1], gate_up->nb[2],
                                   size_t(i * n_ff) * gate_up->nb[0]),
                           name, il);
        };
        gate = half(0, "ffn_moe_gate");
        up = half(1, "ffn_moe_up");
    } else {
        up = experts_mm(l.ffn_up_exps, l.ffn_up_exps_b, x3, "ffn_moe_up", "ffn_moe_up_biased");
        gate = experts_mm(l.ffn_gate_exps, l.ffn_gate_exps_b, x3, "ffn_moe_gate", "ffn_moe_gate_biased");
    }
    tensor *act = nullptr;
    if (b.hp.expert_swiglu_limit > 0.0f)
        act = b.named(swiglu_oai(ctx, gate, up, b.hp.expert_swiglu_alpha, b.hp.expert_swiglu_limit),
                      "ffn_moe_swiglu_oai", il);
    else if (options.act == graph_builder::ffn_act::gelu)
        act = b.named(glu(ctx, gate, up, glu_kind::geglu), "ffn_moe_geglu", il);
    else
        act = b.named(swiglu(ctx, gate, up), "ffn_moe_swiglu", il);
    tensor *experts =
        experts_mm(l.ffn_down_exps, l.ffn_down_exps_b, act, "ffn_moe_down", "ffn_moe_down_biased");
    if (l.ffn_down_exps_s) {  // each pick × its expert's scale: [1, n_used, n]
        tensor *scales = get_rows(ctx, reshape_2d(ctx, l.ffn_down_exps_s, 1, n_expert),
                                  reshape(ctx, picked, {n_used * n}));
        experts =
            b.named(mul(ctx, experts, reshape_3d(ctx, scales, 1, n_used, n)), "ffn_moe_down_scaled", il);
    }
    if (!b.hp.expert_weights_before_ffn)
        experts = b.named(mul(ctx, experts, weights), "ffn_moe_weighted", il);

    // 3. their sum, in pick order (most probable first)
    auto pick = [&](int64_t i) {
        return view_2d(ctx, experts, n_embd, n, experts->nb[2], size_t(i) * experts->nb[1]);
    };
    tensor *out = n_used == 1 ? cont(ctx, pick(0)) : pick(0);
    for (int64_t i = 1; i < n_used; ++i) out = add(ctx, out, pick(i));
    if (l.ffn_down_shexp) {
        b.named(out, "ffn_moe_routed", il);
        out = add(ctx, out, build_shared_expert(b, x, l, il));
    }
    return b.named(out, "ffn_moe_out", il);
}

}  // namespace weft
