// src/model/graph_helpers.cpp — shared graph pieces: inputs, norm, QKV, rope, attention, SwiGLU FFN, output.
#include "model/graph_helpers.h"
#include <cmath>

#include <string>

#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"

namespace weft {

namespace {

// x as a [ne0, ne1] matrix. When x is itself a reshape of such a matrix (V is split into heads by
// build_qkv and goes back to rows for the cache), that matrix is used rather than a reshape of
// the reshape: both are views of the same data.
tensor *as_matrix(context &ctx, tensor *x, int64_t ne0, int64_t ne1) {
    tensor *s = x->op == op_kind::reshape ? x->src[0] : nullptr;
    if (s && s->ne[0] == ne0 && s->ne[1] == ne1 && s->ne[2] == 1 && s->ne[3] == 1) return s;
    return reshape_2d(ctx, x, ne0, ne1);
}

}  // namespace

graph_builder::graph_builder(const model_hparams &hp_, const model_weights &w_, context &ctx_, graph &g,
                             const graph_build_params &p)
    : hp(hp_),
      w(w_),
      ctx(ctx_),
      gf(g),
      params(p),
      n_tokens(p.shape.n_tokens),
      n_outputs(p.shape.n_outputs),
      n_kv(p.shape.n_kv) {
    WEFT_ASSERT(n_tokens > 0 && n_outputs > 0 && n_outputs <= n_tokens && n_kv > 0);
    WEFT_ASSERT(int64_t(p.kv.size()) == hp.n_layer);
    inputs_.kv_idxs = make_input(dtype::i64, {n_tokens}, "inp_kv_idxs");
    inputs_.kq_mask = make_input(dtype::f32, {n_kv, n_tokens}, "inp_kq_mask");
    if (n_outputs < n_tokens) inputs_.out_ids = make_input(dtype::i32, {n_outputs}, "inp_out_ids");
}

tensor *graph_builder::named(tensor *t, const char *base, int64_t il) {
    if (il >= 0)
        t->format_name("%s-%lld", base, static_cast<long long>(il));
    else
        t->set_name(base);
    return t;
}

tensor *graph_builder::make_input(dtype t, std::initializer_list<int64_t> ne, const char *name) {
    tensor *x = ctx.new_tensor(t, ne);
    x->flags |= tensor_flag_input;
    x->set_name(name);
    return x;
}

tensor *graph_builder::build_inp_embd() {
    if (params.shape.embd_input) {
        inputs_.embd = make_input(dtype::f32, {hp.n_embd, n_tokens}, "inp_embd");
        return inputs_.embd;
    }
    inputs_.tokens = make_input(dtype::i32, {n_tokens}, "inp_tokens");
    return named(get_rows(ctx, w.tok_embd, inputs_.tokens), "inp_embd");
}

tensor *graph_builder::build_inp_pos() {
    if (!inputs_.pos) inputs_.pos = make_input(dtype::i32, {n_tokens}, "inp_pos");
    return inputs_.pos;
}

tensor *graph_builder::build_norm(tensor *x, tensor *weight, const char *name, int64_t il, tensor *bias) {
    tensor *cur = hp.layer_norm ? norm(ctx, x, hp.norm_eps) : rms_norm(ctx, x, hp.norm_rms_eps);
    if (weight) {
        named(cur, (std::string(name) + "_raw").c_str(), il);  // normalized, before the weight
        cur = mul(ctx, cur, weight);
    }
    if (bias) {
        named(cur, (std::string(name) + "_nobias").c_str(), il);
        cur = add(ctx, cur, bias);
    }
    return named(cur, name, il);
}

tensor *graph_builder::build_mm(tensor *weight, tensor *x, tensor *bias, const char *name, int64_t il) {
    tensor *cur = mul_mat(ctx, weight, x);
    if (bias) {
        named(cur, (std::string(name) + "_mm").c_str(), il);
        cur = add(ctx, cur, bias);
    }
    return named(cur, name, il);
}

graph_builder::qkv graph_builder::build_qkv(const layer_weights &l, tensor *x, int64_t il) {
    tensor *q = build_mm(l.wq, x, l.bq, "Qcur", il);
    tensor *k = build_mm(l.wk, x, l.bk, "Kcur", il);
    tensor *v = build_mm(l.wv, x, l.bv, "Vcur", il);
    return {reshape_3d(ctx, q, hp.n_embd_head_k, hp.n_head(il), n_tokens),
            reshape_3d(ctx, k, hp.n_embd_head_k, hp.n_head_kv(il), n_tokens),
            reshape_3d(ctx, v, hp.n_embd_head_v, hp.n_head_kv(il), n_tokens)};
}

tensor *graph_builder::build_rope(tensor *x, const char *name, int64_t il) {
    rope_params rp;
    rp.n_dims = int32_t(hp.n_rot);
    rp.mode = hp.rope_mode;
    rp.n_ctx_orig = int32_t(hp.n_ctx_orig);
    rp.freq_base = hp.rope_freq_base;
    rp.freq_scale = hp.rope_freq_scale;
    rp.ext_factor = hp.yarn_ext_factor;
    rp.attn_factor = hp.yarn_attn_factor;
    rp.beta_fast = hp.yarn_beta_fast;
    rp.beta_slow = hp.yarn_beta_slow;
    return named(rope(ctx, x, build_inp_pos(), rp, w.rope_freqs), name, il);
}

tensor *graph_builder::build_attn(int64_t il, tensor *wo, tensor *q, tensor *k, tensor *v, float kq_scale,
                                  tensor *bo) {
    const kv_layer &cache = params.kv[size_t(il)];
    const int64_t n_head = hp.n_head(il);
    const int64_t n_head_kv = hp.n_head_kv(il);
    const int64_t head_k = hp.n_embd_head_k;
    const int64_t head_v = hp.n_embd_head_v;
    WEFT_ASSERT(cache.k->ne[0] == head_k * n_head_kv && cache.v->ne[0] == head_v * n_head_kv);
    WEFT_ASSERT(n_kv <= cache.k->ne[1]);

    // Write this ubatch's K and V rows into their cells. The attention reads views *of the
    // write's result*, so the write is ordered before the reads in the graph.
    tensor *k_rows = as_matrix(ctx, k, head_k * n_head_kv, n_tokens);
    tensor *v_rows = as_matrix(ctx, v, head_v * n_head_kv, n_tokens);
    tensor *k_stored = named(set_rows(ctx, cache.k, k_rows, inputs_.kv_idxs), "k_cache_store", il);
    tensor *v_stored = named(set_rows(ctx, cache.v, v_rows, inputs_.kv_idxs), "v_cache_store", il);

    const size_t k_elt = type_traits(cache.k->type).type_size;
    const size_t v_elt = type_traits(cache.v->type).type_size;
    // [head_k, n_kv, n_head_kv]: cells of one KV head
    tensor *k_view = named(view_3d(ctx, k_stored, head_k, n_kv, n_head_kv, cache.k->nb[1], head_k * k_elt, 0),
                           "k_cache_view", il);
    // [head_v, n_kv, n_head_kv]: the cells as rows, read in place by the fused attention
    tensor *v_view = named(view_3d(ctx, v_stored, head_v, n_kv, n_head_kv, cache.v->nb[1], head_v * v_elt, 0),
                           "v_cache_view", il);

    // q [head_k, n_head, n_tokens] -> [head_k, n_tokens, n_head]; each query head attends over the
    // cells of its KV head; the result [head_v, n_head, n_tokens] is already in row order
    tensor *q_heads = permute(ctx, q, 0, 2, 1, 3);
    tensor *kqv = named(attention(ctx, q_heads, k_view, v_view, inputs_.kq_mask, kq_scale), "kqv", il);
    tensor *cur = reshape_2d(ctx, kqv, head_v * n_head, n_tokens);
    named(cur, "kqv_out", il);
    return build_mm(wo, cur, bo, "attn_out", il);
}

tensor *graph_builder::build_ffn_swiglu(tensor *x, const layer_weights &l, int64_t il) {
    tensor *gate = build_mm(l.ffn_gate, x, nullptr, "ffn_gate", il);
    tensor *up = build_mm(l.ffn_up, x, nullptr, "ffn_up", il);
    tensor *act = named(swiglu(ctx, gate, up), "ffn_swiglu", il);
    return build_mm(l.ffn_down, act, nullptr, "ffn_out", il);
}

tensor *graph_builder::build_ffn_gelu(tensor *x, const layer_weights &l, int64_t il) {
    tensor *up = build_mm(l.ffn_up, x, l.ffn_up_b, "ffn_up", il);
    tensor *act = named(gelu(ctx, up), "ffn_gelu", il);
    return build_mm(l.ffn_down, act, l.ffn_down_b, "ffn_out", il);
}

tensor *graph_builder::build_ffn_block(const layer_weights &l, tensor *attn_out, tensor *residual, int64_t il,
                                       float residual_scale) {
    if (il == hp.n_layer - 1) {  // only the rows that produce logits go on
        attn_out = select_outputs(attn_out);
        residual = select_outputs(residual);
    }
    if (residual_scale != 1.0f) attn_out = named(scale(ctx, attn_out, residual_scale), "attn_out_scaled", il);
    tensor *ffn_inp = named(add(ctx, attn_out, residual), "ffn_inp", il);
    tensor *cur = build_norm(ffn_inp, l.ffn_norm, "ffn_norm", il, l.ffn_norm_b);
    if (l.ffn_gate_inp)
        cur = build_moe_ffn(*this, cur, l, il);
    else
        cur = l.ffn_gate ? build_ffn_swiglu(cur, l, il) : build_ffn_gelu(cur, l, il);
    if (residual_scale != 1.0f) cur = named(scale(ctx, cur, residual_scale), "ffn_out_scaled", il);
    return named(add(ctx, cur, ffn_inp), "l_out", il);
}

tensor *graph_builder::select_outputs(tensor *x) {
    if (!inputs_.out_ids) return x;
    tensor *rows = get_rows(ctx, x, inputs_.out_ids);
    if (x->name[0]) rows->format_name("%s (outputs)", x->name);  // the style of the ops' derived names
    return rows;
}

graph_inputs graph_builder::finish(tensor *x, float logit_mult) {
    tensor *cur = build_norm(x, w.output_norm, "result_norm", -1, w.output_norm_b);
    cur = mul_mat(ctx, w.output, cur);
    if (logit_mult != 1.0f) {
        named(cur, "result_output_raw");
        cur = scale(ctx, cur, logit_mult);
    }
    cur = named(cur, "result_output");
    cur->flags |= tensor_flag_output;
    inputs_.logits = cur;
    build_forward_expand(gf, cur);
    return inputs_;
}

void create_llama_attn(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l) {
    const int64_t n_embd = hp.n_embd;
    const int64_t n_q = hp.n_embd_head_k * hp.n_head(il);
    const int64_t n_k = hp.n_embd_k_gqa(il);
    const int64_t n_v = hp.n_embd_v_gqa(il);
    const int64_t n_attn_out = hp.n_embd_head_v * hp.n_head(il);
    l.attn_norm = tl.create(block_tensor_name(il, "attn_norm"), {n_embd});
    l.wq = tl.create(block_tensor_name(il, "attn_q"), {n_embd, n_q});
    l.wk = tl.create(block_tensor_name(il, "attn_k"), {n_embd, n_k});
    l.wv = tl.create(block_tensor_name(il, "attn_v"), {n_embd, n_v});
    l.wo = tl.create(block_tensor_name(il, "attn_output"), {n_attn_out, n_embd});
}

void create_qkv_biases(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l) {
    l.bq = tl.create(block_tensor_name(il, "attn_q", "bias"), {hp.n_embd_head_k * hp.n_head(il)});
    l.bk = tl.create(block_tensor_name(il, "attn_k", "bias"), {hp.n_embd_k_gqa(il)});
    l.bv = tl.create(block_tensor_name(il, "attn_v", "bias"), {hp.n_embd_v_gqa(il)});
}

void create_llama_block(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                        bool gated) {
    const int64_t n_embd = hp.n_embd;
    const int64_t n_ff = hp.n_ff(il);
    create_llama_attn(tl, hp, il, l);
    l.ffn_norm = tl.create(block_tensor_name(il, "ffn_norm"), {n_embd});
    if (gated) l.ffn_gate = tl.create(block_tensor_name(il, "ffn_gate"), {n_embd, n_ff});
    l.ffn_up = tl.create(block_tensor_name(il, "ffn_up"), {n_embd, n_ff});
    l.ffn_down = tl.create(block_tensor_name(il, "ffn_down"), {n_ff, n_embd});
}

void create_llama_globals(tensor_loader &tl, const model_hparams &hp, model_weights &w) {
    w.tok_embd = tl.create("token_embd.weight", {hp.n_embd, hp.n_vocab});
    w.output_norm = tl.create("output_norm.weight", {hp.n_embd});
    w.output = tl.create_optional("output.weight", {hp.n_embd, hp.n_vocab});
    if (!w.output) w.output = w.tok_embd;  // tied embeddings
    w.rope_freqs = tl.create_optional("rope_freqs.weight", {hp.n_rot / 2});
}

tensor *graph_builder::build_llama_attn(const layer_weights &l, tensor *x, int64_t il, float kq_scale) {
    tensor *cur = build_norm(x, l.attn_norm, "attn_norm", il, l.attn_norm_b);
    auto [q, k, v] = build_qkv(l, cur, il);
    q = build_rope(q, "Qcur_rope", il);
    k = build_rope(k, "Kcur_rope", il);
    return build_attn(il, l.wo, q, k, v, kq_scale, l.bo);
}

void create_llama_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) {
    create_llama_globals(tl, hp, w);
    w.layers.resize(size_t(hp.n_layer));
    for (int64_t il = 0; il < hp.n_layer; ++il) create_llama_block(tl, hp, il, w.layers[size_t(il)]);
}

graph_inputs build_llama_graph(graph_builder &b) {
    const model_hparams &hp = b.hp;
    const float kq_scale = 1.0f / std::sqrt(float(hp.n_embd_head_k));
    tensor *x = b.build_inp_embd();
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const layer_weights &l = b.w.layers[size_t(il)];
        tensor *cur = b.build_llama_attn(l, x, il, kq_scale);
        x = b.build_ffn_block(l, cur, x, il);
    }
    return b.finish(x);
}

}  // namespace weft
