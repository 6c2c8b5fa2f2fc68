// src/model/graph_delta_net.cpp — Qwen3-Next's and Qwen3.5's linear and gated full attention (see
// graph_delta_net.h).
#include "model/graph_delta_net.h"

#include <cmath>
#include <string>

#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

// The delta net's sizes from the ssm hparams (checked by set_delta_net_hparams).
struct delta_net_shape {
    int64_t head_k, n_head_k, head_v, n_head_v;
    int64_t key_dim() const { return head_k * n_head_k; }
    int64_t value_dim() const { return head_v * n_head_v; }
    int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }
};

delta_net_shape delta_net_of(const model_hparams &hp) {
    return {hp.ssm_d_state, hp.ssm_n_group, hp.ssm_d_inner / hp.ssm_dt_rank, hp.ssm_dt_rank};
}

// x [n_heads * head, n_tokens] (contiguous) with each head repeated r times in place:
// [n_heads * r * head, n_tokens], head g's copies at g * r ... g * r + r - 1.
tensor *repeat_heads_interleaved(context &ctx, tensor *x, int64_t head, int64_t n_heads, int64_t r) {
    const int64_t n_tokens = x->ne[1];
    tensor *one = reshape_4d(ctx, x, head, 1, n_heads, n_tokens);
    tensor *all = one;
    for (int64_t i = 1; i < r; ++i) all = concat(ctx, all, one, 1);
    return reshape_2d(ctx, cont(ctx, all), head * n_heads * r, n_tokens);
}

}  // namespace

void set_delta_net_hparams(const gguf_file &f, model_hparams &hp) {
    auto fail = [&](const char *key, const std::string &what) {
        throw error(f.path() + ": " + hp.arch + "." + key + ": " + what);
    };
    if (hp.ssm_d_state <= 0) fail("ssm.state_size", "missing or 0: the delta net needs its ssm keys");
    if (hp.ssm_n_group <= 0) fail("ssm.group_count", "missing or 0 (the delta net's q/k heads)");
    if (hp.ssm_dt_rank <= 0) fail("ssm.time_step_rank", "missing or 0 (the delta net's value heads)");
    if (hp.ssm_dt_rank % hp.ssm_n_group != 0)
        fail("ssm.group_count", std::to_string(hp.ssm_n_group) + " q/k heads do not divide " +
                                    std::to_string(hp.ssm_dt_rank) + " value heads");
    // the reference engine shapes each state as [state_size, state_size]: value heads as wide as keys
    if (hp.ssm_d_inner != hp.ssm_d_state * hp.ssm_dt_rank)
        fail("ssm.inner_size", "is " + std::to_string(hp.ssm_d_inner) +
                                   ", must be state_size x time_step_rank = " +
                                   std::to_string(hp.ssm_d_state * hp.ssm_dt_rank));
    if (hp.ssm_d_conv < 2) fail("ssm.conv_kernel", "must be at least 2, is " + std::to_string(hp.ssm_d_conv));
    const int64_t interval = f.get_int(hp.arch + ".full_attention_interval").value_or(4);
    if (interval < 1) fail("full_attention_interval", "must be at least 1, is " + std::to_string(interval));
    hp.recurrent_layers.assign(size_t(hp.n_layer), false);
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.recurrent_layers[size_t(il)] = (il + 1) % interval != 0;
    const delta_net_shape s = delta_net_of(hp);
    hp.n_embd_r = (hp.ssm_d_conv - 1) * s.conv_channels();
    hp.n_embd_s = gated_delta_net_state_floats(s.head_k, s.head_v) * s.n_head_v;
}

void create_delta_net_mixer(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                            delta_net_beta_alpha beta_alpha) {
    const delta_net_shape s = delta_net_of(hp);
    const int64_t n_embd = hp.n_embd;
    if (!tl.has(block_tensor_name(il, "attn_qkv")) && tl.has(block_tensor_name(il, "ssm_in")))
        throw error(block_tensor_name(il, "ssm_in") +
                    ": the legacy fused q/k/v/z projection of early qwen3next files is not supported "
                    "(convert the model again: attn_qkv and attn_gate)");
    l.wqkv = tl.create(block_tensor_name(il, "attn_qkv"), {n_embd, s.conv_channels()});
    l.wqkv_gate = tl.create(block_tensor_name(il, "attn_gate"), {n_embd, s.value_dim()});
    l.ssm_conv1d = tl.create(block_tensor_name(il, "ssm_conv1d"), {hp.ssm_d_conv, s.conv_channels()});
    l.ssm_dt_b = tl.create(block_tensor_name(il, "ssm_dt", "bias"), {s.n_head_v});
    l.ssm_a = tl.create("blk." + std::to_string(il) + ".ssm_a", {s.n_head_v});
    if (beta_alpha == delta_net_beta_alpha::fused) {
        l.ssm_beta_alpha = tl.create(block_tensor_name(il, "ssm_ba"), {n_embd, 2 * s.n_head_v});
    } else {
        l.ssm_beta = tl.create(block_tensor_name(il, "ssm_beta"), {n_embd, s.n_head_v});
        l.ssm_alpha = tl.create(block_tensor_name(il, "ssm_alpha"), {n_embd, s.n_head_v});
    }
    l.ssm_norm = tl.create(block_tensor_name(il, "ssm_norm"), {s.head_v});
    l.ssm_out = tl.create(block_tensor_name(il, "ssm_out"), {s.value_dim(), n_embd});
}

void create_gated_attention(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l) {
    const int64_t n_embd = hp.n_embd, head_k = hp.n_embd_head_k, n_head = hp.n_head(il);
    l.wq = tl.create(block_tensor_name(il, "attn_q"), {n_embd, 2 * head_k * n_head});
    l.wk = tl.create(block_tensor_name(il, "attn_k"), {n_embd, hp.n_embd_k_gqa(il)});
    l.wv = tl.create(block_tensor_name(il, "attn_v"), {n_embd, hp.n_embd_v_gqa(il)});
    l.attn_q_norm = tl.create(block_tensor_name(il, "attn_q_norm"), {head_k});
    l.attn_k_norm = tl.create(block_tensor_name(il, "attn_k_norm"), {head_k});
    l.wo = tl.create(block_tensor_name(il, "attn_output"), {hp.n_embd_head_v * n_head, n_embd});
}

tensor *build_delta_net_mixer(graph_builder &b, const layer_weights &l, tensor *x, int64_t il,
                              bool kv_heads_interleaved) {
    context &ctx = b.ctx;
    const model_hparams &hp = b.hp;
    const delta_net_shape s = delta_net_of(hp);
    const int64_t n_tokens = b.n_tokens, n_seqs = b.params.shape.n_seqs;
    const int64_t r = s.n_head_v / s.n_head_k;  // value heads per q/k head
    const size_t f = sizeof(float);
    const recurrent_layer &states = b.params.recurrent[size_t(il)];
    auto as_f32 = [&](tensor *t) { return t->type == dtype::f32 ? t : cast(ctx, t, dtype::f32); };

    const auto [qkv, z] = b.build_mms<2>(
        {{{l.wqkv, nullptr, "linear_attn_qkv"}, {l.wqkv_gate, nullptr, "linear_attn_z"}}}, x, il);

    // beta (each value head's write strength) and alpha (its decay's step), [n_head_v, n_tokens]
    tensor *beta, *alpha;
    if (l.ssm_beta_alpha) {
        // per q/k head g: the betas of its value heads g r .. g r + r - 1, then their alphas
        tensor *ba = b.build_mm(l.ssm_beta_alpha, x, nullptr, "linear_attn_ba", il);
        auto half = [&](int64_t first) {
            tensor *v =
                view_3d(ctx, ba, r, s.n_head_k, n_tokens, size_t(2 * r) * f, ba->nb[1], size_t(first) * f);
            return reshape_2d(ctx, cont(ctx, v), s.n_head_v, n_tokens);
        };
        beta = half(0);
        alpha = half(r);
    } else {
        const auto [bt, al] = b.build_mms<2>(
            {{{l.ssm_beta, nullptr, "linear_attn_beta"}, {l.ssm_alpha, nullptr, "linear_attn_alpha"}}}, x,
            il);
        beta = bt;
        alpha = al;
    }
    beta = b.named(sigmoid(ctx, beta), "linear_attn_beta_sigmoid", il);
    // the log of each head's decay: A softplus(alpha + dt bias), A = -exp(A_log) as stored
    tensor *step = b.named(softplus(ctx, add(ctx, alpha, as_f32(l.ssm_dt_b))), "linear_attn_step", il);
    tensor *g = b.named(mul(ctx, step, as_f32(l.ssm_a)), "linear_attn_decay", il);

    // the causal convolution over q, k and v, continuing each sequence's last inputs
    tensor *conv = b.named(silu(ctx, b.build_recurrent_conv(qkv, l.ssm_conv1d, il)), "linear_attn_conv", il);
    auto key_heads = [&](int64_t offset, const char *name) {
        tensor *v = view_3d(ctx, conv, s.head_k, s.n_head_k, n_tokens, size_t(s.head_k) * f, conv->nb[1],
                            size_t(offset) * f);
        tensor *t = reshape_2d(ctx, l2_norm(ctx, v, hp.norm_rms_eps), s.key_dim(), n_tokens);
        if (kv_heads_interleaved && r > 1) t = repeat_heads_interleaved(ctx, t, s.head_k, s.n_head_k, r);
        return b.named(t, name, il);
    };
    tensor *q = key_heads(0, "linear_attn_q");
    tensor *k = key_heads(s.key_dim(), "linear_attn_k");
    tensor *v = view_2d(ctx, conv, s.value_dim(), n_tokens, conv->nb[1], size_t(2 * s.key_dim()) * f);

    // the delta rule, continuing each sequence's state
    const int64_t state_floats = gated_delta_net_state_floats(s.head_k, s.head_v);
    tensor *state_in = reshape_3d(ctx, b.build_recurrent_rows(states.ssm), state_floats, s.n_head_v, n_seqs);
    tensor *out = b.named(gated_delta_net(ctx, q, k, v, g, beta, state_in, b.build_inp_rs_token_seq(),
                                          1.0f / std::sqrt(float(s.head_k))),
                          "linear_attn_delta", il);
    b.store_recurrent_rows(states.ssm, out, s.value_dim() * n_tokens, state_floats * s.n_head_v,
                           "ssm_state_store", il);

    // each value head RMS-normed, times the weight, times silu(z)
    tensor *y = view_2d(ctx, out, s.head_v, s.n_head_v * n_tokens, size_t(s.head_v) * f, 0);
    y = mul(ctx, rms_norm(ctx, y, hp.norm_rms_eps), l.ssm_norm);
    y = glu(ctx, reshape_2d(ctx, z, s.head_v, s.n_head_v * n_tokens), y, glu_kind::swiglu);
    y = b.named(reshape_2d(ctx, y, s.value_dim(), n_tokens), "linear_attn_gated_norm", il);
    return b.build_mm(l.ssm_out, y, nullptr, "linear_attn_out", il);
}

tensor *build_gated_attention(graph_builder &b, const layer_weights &l, tensor *x, int64_t il) {
    context &ctx = b.ctx;
    const model_hparams &hp = b.hp;
    const int64_t head = hp.n_embd_head_k, n_head = hp.n_head(il), n_head_kv = hp.n_head_kv(il);
    const int64_t n_tokens = b.n_tokens;
    const size_t f = sizeof(float);

    const auto [qg, k, v] = b.build_mms<3>(
        {{{l.wq, nullptr, "Qcur_full"}, {l.wk, nullptr, "Kcur"}, {l.wv, nullptr, "Vcur"}}}, x, il);
    // each head's query, then its gate
    auto half = [&](int64_t first) {
        return view_3d(ctx, qg, head, n_head, n_tokens, size_t(2 * head) * f, qg->nb[1], size_t(first) * f);
    };
    tensor *q = b.build_norm(half(0), l.attn_q_norm, "Qcur_norm", il);
    tensor *kn = b.build_norm(reshape_3d(ctx, k, head, n_head_kv, n_tokens), l.attn_k_norm, "Kcur_norm", il);
    q = b.build_rope(q, "Qcur_rope", il);
    kn = b.build_rope(kn, "Kcur_rope", il);
    const float kq_scale = hp.attention_scale != 0.0f ? hp.attention_scale : 1.0f / std::sqrt(float(head));
    tensor *heads =
        b.build_attn(il, nullptr, q, kn, reshape_3d(ctx, v, hp.n_embd_head_v, n_head_kv, n_tokens), kq_scale);
    tensor *gate = sigmoid(ctx, reshape_2d(ctx, cont(ctx, half(head)), head * n_head, n_tokens));
    tensor *gated = b.named(mul(ctx, heads, b.named(gate, "attn_gate", il)), "attn_gated", il);
    return b.build_mm(l.wo, gated, nullptr, "attn_out", il);
}

}  // namespace weft
