// src/model/graph_helpers.cpp — shared graph pieces: inputs, norm, QKV, rope, attention, SwiGLU FFN, output.
#include "model/graph_helpers.h"
#include <cmath>

#include <optional>
#include <string>

#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/backend.h"
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
                             const graph_build_params &p, layer_span stage_)
    : hp(hp_),
      w(w_),
      ctx(ctx_),
      gf(g),
      params(p),
      n_tokens(p.shape.n_tokens),
      n_outputs(p.shape.n_outputs),
      n_kv(p.shape.n_kv),
      stage(stage_) {
    WEFT_ASSERT(n_tokens > 0 && n_outputs > 0 && n_outputs <= n_tokens);
    WEFT_ASSERT(0 <= stage.begin && stage.begin < stage.end && stage.end <= hp.n_layer);
    // recurrent layers read and write states, attention layers the KV cache (a hybrid model: both)
    if (hp.has_recurrent_layers())
        WEFT_ASSERT(int64_t(p.recurrent.size()) == hp.n_layer && p.shape.n_seqs > 0);
    if (hp.has_attention_layers()) {
        WEFT_ASSERT(int64_t(p.kv.size()) == hp.n_layer && n_kv > 0);
        inputs_.kv_idxs = make_input(dtype::i64, {n_tokens}, "inp_kv_idxs");
        stored_kv_.resize(size_t(hp.n_layer));
    }
    // the output rows are picked in the last block, which only the last stage has
    if (n_outputs < n_tokens && last_stage())
        inputs_.out_ids = make_input(dtype::i32, {n_outputs}, "inp_out_ids");
}

tensor *graph_builder::build_inp_hidden() {
    inputs_.hidden = make_input(dtype::f32, {hp.n_embd, n_tokens}, "inp_hidden");
    return inputs_.hidden;
}

graph_inputs graph_builder::finish_stage(tensor *x) {
    tensor *cur = x->is_contiguous() ? x : cont(ctx, x);
    cur->flags |= tensor_flag_output;
    inputs_.logits = cur;
    build_forward_expand(gf, cur);
    return inputs_;
}

tensor *graph_builder::named(tensor *t, const char *base, int64_t il) {
    if (il >= 0)
        t->format_name("%s-%lld", base, static_cast<long long>(il));
    else
        t->set_name(base);
    return t;
}

tensor *graph_builder::build_inp_rs_token_seq() {
    if (!inputs_.rs_token_seq) inputs_.rs_token_seq = make_input(dtype::i32, {n_tokens}, "inp_rs_token_seq");
    return inputs_.rs_token_seq;
}

tensor *graph_builder::build_inp_rs_slots() {
    if (!inputs_.rs_slots) inputs_.rs_slots = make_input(dtype::i32, {params.shape.n_seqs}, "inp_rs_slots");
    return inputs_.rs_slots;
}

tensor *graph_builder::build_inp_rs_slots_out() {
    if (!inputs_.rs_slots_out)
        inputs_.rs_slots_out = make_input(dtype::i32, {params.shape.n_seqs}, "inp_rs_slots_out");
    return inputs_.rs_slots_out;
}

tensor *graph_builder::build_inp_rs_columns() {
    if (!inputs_.rs_columns)
        inputs_.rs_columns = make_input(dtype::i32, {2, params.shape.n_seqs}, "inp_rs_columns");
    return inputs_.rs_columns;
}

tensor *graph_builder::build_recurrent_rows(tensor *cache) {
    return get_rows(ctx, cache, build_inp_rs_slots());
}

void graph_builder::store_recurrent_rows(tensor *cache, tensor *result, int64_t offset, int64_t row_len,
                                         const char *name, int64_t il) {
    const int64_t n_seqs = params.shape.n_seqs;
    tensor *rows = view_2d(ctx, result, row_len, n_seqs, size_t(row_len) * sizeof(float),
                           size_t(offset) * sizeof(float));
    build_forward_expand(gf, named(set_rows(ctx, cache, rows, build_inp_rs_slots_out()), name, il));
}

graph_builder::recurrent_states graph_builder::build_recurrent_states(tensor *cache, int64_t state_len,
                                                                      int64_t n_ch) {
    if (cache->buffer && cache->buffer->is_host())
        return {reshape_3d(ctx, cache, state_len, n_ch, cache->ne[1]), build_inp_rs_columns()};
    return {reshape_3d(ctx, build_recurrent_rows(cache), state_len, n_ch, params.shape.n_seqs), nullptr};
}

tensor *graph_builder::build_recurrent_conv(tensor *x, tensor *weight, int64_t il) {
    const recurrent_layer &states = params.recurrent[size_t(il)];
    const int64_t d_conv = weight->ne[0], n_ch = weight->ne[1];
    WEFT_ASSERT(states.conv && states.conv->ne[0] == (d_conv - 1) * n_ch && x->ne[0] == n_ch);
    tensor *w = weight->type == dtype::f32 ? weight : cast(ctx, weight, dtype::f32);
    const recurrent_states in = build_recurrent_states(states.conv, d_conv - 1, n_ch);
    tensor *conv = named(ssm_conv(ctx, x, in.states, w, build_inp_rs_token_seq(), in.rows), "ssm_conv", il);
    if (!in.rows)
        store_recurrent_rows(states.conv, conv, n_ch * n_tokens, (d_conv - 1) * n_ch, "conv_state_store", il);
    return view_2d(ctx, conv, n_ch, n_tokens, size_t(n_ch) * sizeof(float), 0);
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

tensor *graph_builder::build_attn_temperature(tensor *q, int64_t il) {
    WEFT_ASSERT(hp.attn_temp_scale != 0.0f && hp.attn_temp_floor > 0);
    if (!inputs_.attn_scale) inputs_.attn_scale = make_input(dtype::f32, {1, 1, n_tokens}, "inp_attn_scale");
    return named(mul(ctx, q, inputs_.attn_scale), "Qcur_temp_scaled", il);
}

tensor *graph_builder::build_mm(tensor *weight, tensor *x, tensor *bias, const char *name, int64_t il) {
    return finish_mm(mul_mat(ctx, weight, x), weight, x, bias, name, il);
}

template <size_t n>
std::array<tensor *, n> graph_builder::build_mms(const std::array<mm_of_x, n> &mms, tensor *x, int64_t il) {
    std::array<tensor *, n> out;
    for (size_t i = 0; i < n; ++i) {
        out[i] = mul_mat(ctx, mms[i].weight, x);
        build_forward_expand(gf, out[i]);
    }
    for (size_t i = 0; i < n; ++i) out[i] = finish_mm(out[i], mms[i].weight, x, mms[i].bias, mms[i].name, il);
    return out;
}

template std::array<tensor *, 2> graph_builder::build_mms<2>(const std::array<mm_of_x, 2> &, tensor *,
                                                             int64_t);
template std::array<tensor *, 3> graph_builder::build_mms<3>(const std::array<mm_of_x, 3> &, tensor *,
                                                             int64_t);

tensor *graph_builder::finish_mm(tensor *cur, tensor *weight, tensor *x, tensor *bias, const char *name,
                                 int64_t il) {
    // LoRA: + scale·(alpha/r)·B·(A·x) for each adapter of this weight (scale 0: not even built). The
    // scales are an input, so that changing them (but not to or from 0) reuses the graph.
    for (size_t i = 0; i < params.loras.size(); ++i) {
        const lora_use &u = params.loras[i];
        const lora_adapter::pair *p = u.adapter && u.scale != 0.0f ? u.adapter->find(weight->name) : nullptr;
        if (!p) continue;
        if (!inputs_.lora_scales)
            inputs_.lora_scales = make_input(dtype::f32, {int64_t(params.loras.size())}, "inp_lora_scales");
        tensor *user_scale = view_1d(ctx, inputs_.lora_scales, 1, i * sizeof(float));
        tensor *bax = scale(ctx, mul_mat(ctx, p->b, mul_mat(ctx, p->a, x)), u.adapter->factor(*p, 1.0f));
        cur = add(ctx, cur, mul(ctx, bax, user_scale));
    }
    if (bias) {
        named(cur, (std::string(name) + "_mm").c_str(), il);
        cur = add(ctx, cur, bias);
    }
    return named(cur, name, il);
}

graph_builder::qkv graph_builder::build_qkv(const layer_weights &l, tensor *x, int64_t il) {
    const int64_t head_k = hp.n_embd_head_k, head_v = hp.n_embd_head_v;
    const int64_t n_head = hp.n_head(il), n_head_kv = hp.n_head_kv(il);
    if (l.wqkv) {
        // one product; Q, K and V are its rows [0, n_q), [n_q, n_q + n_k), [n_q + n_k, ...)
        tensor *qkv = build_mm(l.wqkv, x, l.bqkv, "wqkv", il);
        const size_t f = sizeof(float), row = qkv->nb[1];
        const size_t k_offs = size_t(head_k * n_head) * f, v_offs = k_offs + size_t(head_k * n_head_kv) * f;
        tensor *q = view_3d(ctx, qkv, head_k, n_head, n_tokens, size_t(head_k) * f, row, 0);
        tensor *k = view_3d(ctx, qkv, head_k, n_head_kv, n_tokens, size_t(head_k) * f, row, k_offs);
        tensor *v = view_3d(ctx, qkv, head_v, n_head_kv, n_tokens, size_t(head_v) * f, row, v_offs);
        return {named(q, "Qcur", il), named(cont(ctx, k), "Kcur", il), named(cont(ctx, v), "Vcur", il)};
    }
    const auto [q, k, v] =
        build_mms<3>({{{l.wq, l.bq, "Qcur"}, {l.wk, l.bk, "Kcur"}, {l.wv, l.bv, "Vcur"}}}, x, il);
    return {reshape_3d(ctx, q, head_k, n_head, n_tokens), reshape_3d(ctx, k, head_k, n_head_kv, n_tokens),
            reshape_3d(ctx, v, head_v, n_head_kv, n_tokens)};
}

void read_swa_pattern(const gguf_file &f, model_hparams &hp, int64_t default_period) {
    const std::string pattern_key = hp.arch + ".attention.sliding_window_pattern";
    const std::optional<int64_t> in_file = f.get_int(pattern_key);
    const int64_t period = in_file.value_or(default_period);  // the default fits any depth
    if (in_file && (period < 0 || period > hp.n_layer))
        throw error(f.path() + ": " + pattern_key + ": " + std::to_string(period) +
                    " must be in [0, block_count]");
    hp.swa_layers.assign(size_t(hp.n_layer), false);
    for (int64_t il = 0; il < hp.n_layer; ++il)
        hp.swa_layers[size_t(il)] = period == 0 || il % period < period - 1;
    const std::string base_swa_key = hp.arch + ".rope.freq_base_swa";
    if (f.has(base_swa_key) && read_hparam_float(f, hp, "rope.freq_base_swa", {}) != hp.rope_freq_base)
        throw error(f.path() + ": " + base_swa_key +
                    ": a base of the sliding-window layers' own is not supported");
}

rope_params model_rope_params(const model_hparams &hp, int64_t il) {
    rope_params rp;
    rp.n_dims = int32_t(hp.rot(il));
    rp.mode = hp.rope_mode;
    rp.n_ctx_orig = int32_t(hp.n_ctx_orig);
    rp.freq_base = hp.rope_freq_base;
    rp.freq_scale = hp.rope_freq_scale;
    rp.ext_factor = hp.yarn_ext_factor;
    rp.attn_factor = hp.yarn_attn_factor;
    rp.beta_fast = hp.yarn_beta_fast;
    rp.beta_slow = hp.yarn_beta_slow;
    if (hp.rope_freq_base_swa > 0.0f && size_t(il) < hp.swa_layers.size() && hp.swa_layers[size_t(il)]) {
        rp.freq_base = hp.rope_freq_base_swa;  // the sliding-window layers' own base, never scaled
        rp.freq_scale = 1.0f;
        rp.ext_factor = 0.0f;
    }
    return rp;
}

tensor *graph_builder::build_rope(tensor *x, const char *name, int64_t il) {
    return named(rope(ctx, x, build_inp_pos(), model_rope_params(hp, il), w.rope_freqs), name, il);
}

k_shift_inputs build_k_shift_graph(const model_hparams &hp, const model_weights &w, context &ctx, graph &g,
                                   std::span<const kv_layer> kv, int64_t n_cells,
                                   const cached_k_rope &layout) {
    WEFT_ASSERT(int64_t(kv.size()) == hp.n_layer && n_cells > 0);
    WEFT_ASSERT(layout.offset >= 0 && layout.n_dims > 0 && layout.offset + layout.n_dims <= hp.n_embd_head_k);
    k_shift_inputs in;
    in.cells = ctx.new_tensor(dtype::i32, {n_cells});
    in.cells->set_name("inp_shift_cells");
    in.deltas = ctx.new_tensor(dtype::i32, {n_cells});
    in.deltas->set_name("inp_shift_deltas");
    for (tensor *t : {in.cells, in.deltas}) t->flags |= tensor_flag_input;

    // A rotation by the move: R(p + d) = R(d) R(p), the same frequencies, and no magnitude change
    // (the key already carries YaRN's attention factor once; the kernel multiplies by
    // attn_factor * (1 + 0.1 ln(1 / freq_scale)) under YaRN, so that product is made 1).
    const int64_t head_k = hp.n_embd_head_k;
    const size_t f = sizeof(float);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const kv_layer &cache = kv[size_t(il)];
        if (!cache.k) continue;  // a layer of another pipeline stage
        rope_params rp = model_rope_params(hp, il);
        rp.n_dims = int32_t(layout.n_dims);
        rp.attn_factor = rp.ext_factor != 0.0f ? 1.0f / (1.0f + 0.1f * std::log(1.0f / rp.freq_scale)) : 1.0f;
        const int64_t n_head_kv = hp.n_head_kv(il);
        // the moved cells' keys in f32, [head_k, n_head_kv, n_cells]
        tensor *keys = reshape_3d(ctx, get_rows(ctx, cache.k, in.cells), head_k, n_head_kv, n_cells);
        keys->format_name("k_shift_keys-%lld", static_cast<long long>(il));
        tensor *rotated;
        if (layout.offset == 0) {
            rotated = rope(ctx, keys, in.deltas, rp, w.rope_freqs);  // dims past n_dims pass through
        } else {
            // the rotary dims sit after the others (deepseek2: k_nope, then the rope key)
            tensor *plain =
                view_3d(ctx, keys, layout.offset, n_head_kv, n_cells, keys->nb[1], keys->nb[2], 0);
            tensor *rotary = view_3d(ctx, keys, layout.n_dims, n_head_kv, n_cells, keys->nb[1], keys->nb[2],
                                     size_t(layout.offset) * f);
            rotated = concat(ctx, plain, rope(ctx, rotary, in.deltas, rp, w.rope_freqs), 0);
        }
        rotated->format_name("k_shift_rotated-%lld", static_cast<long long>(il));
        tensor *stored =
            set_rows(ctx, cache.k, reshape_2d(ctx, rotated, head_k * n_head_kv, n_cells), in.cells);
        stored->format_name("k_shift_store-%lld", static_cast<long long>(il));
        build_forward_expand(g, stored);
    }
    return in;
}

tensor *graph_builder::build_attn(int64_t il, tensor *wo, tensor *q, tensor *k, tensor *v, float kq_scale,
                                  tensor *bo) {
    // a layer without KV rows of its own attends over its source layer's (k and v null)
    const int64_t source = hp.kv_layer(il);
    const kv_layer &cache = params.kv[size_t(source)];
    const int64_t n_head = hp.n_head(il);
    const int64_t n_head_kv = hp.n_head_kv(il);
    const int64_t head_k = hp.head_k(il);
    const int64_t head_v = hp.head_v(il);
    if (!cache.k)
        throw error("layer " + std::to_string(il) + " attends over the KV rows of layer " +
                    std::to_string(source) + ", which another pipeline stage holds");
    WEFT_ASSERT(cache.k->ne[0] == head_k * n_head_kv && cache.v->ne[0] == head_v * n_head_kv);
    WEFT_ASSERT(n_kv <= cache.k->ne[1]);

    // Write this ubatch's K and V rows into their cells. The attention reads views *of the
    // write's result*, so the write is ordered before the reads in the graph.
    tensor *k_stored = cache.k, *v_stored = cache.v;
    if (source == il) {
        WEFT_ASSERT(k && v);
        tensor *k_rows = as_matrix(ctx, k, head_k * n_head_kv, n_tokens);
        tensor *v_rows = as_matrix(ctx, v, head_v * n_head_kv, n_tokens);
        k_stored = named(set_rows(ctx, cache.k, k_rows, inputs_.kv_idxs), "k_cache_store", il);
        v_stored = named(set_rows(ctx, cache.v, v_rows, inputs_.kv_idxs), "v_cache_store", il);
        stored_kv_[size_t(il)] = {k_stored, v_stored};
    } else {
        WEFT_ASSERT(!k && !v && source < il);
        if (stored_kv_[size_t(source)].k) {  // the source's write in this graph comes first
            k_stored = stored_kv_[size_t(source)].k;
            v_stored = stored_kv_[size_t(source)].v;
        }
    }

    // [head_k, n_kv, n_head_kv]: cells of one KV head (a head's row: whole blocks of a quantized cache)
    tensor *k_view = named(
        view_3d(ctx, k_stored, head_k, n_kv, n_head_kv, cache.k->nb[1], row_size(cache.k->type, head_k), 0),
        "k_cache_view", il);
    // [head_v, n_kv, n_head_kv]: the cells as rows, read in place by the fused attention
    tensor *v_view = named(
        view_3d(ctx, v_stored, head_v, n_kv, n_head_kv, cache.v->nb[1], row_size(cache.v->type, head_v), 0),
        "v_cache_view", il);

    // q [head_k, n_head, n_tokens] -> [head_k, n_tokens, n_head]; each query head attends over the
    // cells of its KV head; the result [head_v, n_head, n_tokens] is already in row order
    tensor *q_heads = permute(ctx, q, 0, 2, 1, 3);
    // the masks are inputs of the graphs that use them (a model with sliding windows on every
    // layer has no use for the causal one)
    const bool swa = hp.is_swa(il);
    tensor *&mask = swa ? inputs_.kq_mask_swa : inputs_.kq_mask;
    if (!mask) mask = make_input(dtype::f32, {n_kv, n_tokens}, swa ? "inp_kq_mask_swa" : "inp_kq_mask");
    // the cells' positions fix the order of the attention's sums
    if (!inputs_.kv_pos) inputs_.kv_pos = make_input(dtype::i32, {n_kv}, "inp_kv_pos");
    // a soft cap: cap * tanh(scores * kq_scale / cap)
    const float softcap = hp.attn_softcap;
    // the layer's per-head sink logits (gpt-oss), where it has them
    tensor *sinks = w.layers[size_t(il)].attn_sinks;
    tensor *kqv =
        named(attention(ctx, q_heads, k_view, v_view, mask, softcap > 0.0f ? kq_scale / softcap : kq_scale,
                        softcap, inputs_.kv_pos, sinks),
              "kqv", il);
    tensor *cur = reshape_2d(ctx, kqv, head_v * n_head, n_tokens);
    named(cur, "kqv_out", il);
    if (!wo) return cur;  // the caller gates the heads before its projection (qwen3next)
    return build_mm(wo, cur, bo, "attn_out", il);
}

tensor *graph_builder::build_ffn(tensor *x, const layer_weights &l, int64_t il, ffn_act act) {
    const int64_t n_ff = hp.n_ff(il);
    tensor *up = nullptr, *gate = nullptr;
    if (l.ffn_gate) {
        const auto [u, g] =
            build_mms<2>({{{l.ffn_up, l.ffn_up_b, "ffn_up"}, {l.ffn_gate, nullptr, "ffn_gate"}}}, x, il);
        up = u;
        gate = g;
    } else {
        up = build_mm(l.ffn_up, x, l.ffn_up_b, "ffn_up", il);
        if (up->ne[0] == 2 * n_ff) {         // fused: the gate rows, then the up rows
            const int64_t rows = up->ne[1];  // tokens, or only the output rows in the last layer
            gate = named(view_2d(ctx, up, n_ff, rows, up->nb[1], 0), "ffn_gate", il);
            up = named(view_2d(ctx, up, n_ff, rows, up->nb[1], size_t(n_ff) * sizeof(float)), "ffn_up_half",
                       il);
        }
    }
    tensor *cur;
    if (gate)
        cur = act == ffn_act::silu ? named(swiglu(ctx, gate, up), "ffn_swiglu", il)
                                   : named(glu(ctx, gate, up, glu_kind::geglu), "ffn_geglu", il);
    else
        cur = act == ffn_act::silu ? named(silu(ctx, up), "ffn_silu", il)
                                   : named(gelu(ctx, up), "ffn_gelu", il);
    return build_mm(l.ffn_down, cur, l.ffn_down_b, "ffn_out", il);
}

tensor *graph_builder::build_ffn_block(const layer_weights &l, tensor *attn_out, tensor *residual, int64_t il,
                                       ffn_act act, float residual_scale) {
    if (il == hp.n_layer - 1) {  // only the rows that produce logits go on
        attn_out = select_outputs(attn_out);
        residual = select_outputs(residual);
    }
    if (residual_scale != 1.0f) attn_out = named(scale(ctx, attn_out, residual_scale), "attn_out_scaled", il);
    tensor *ffn_inp = named(add(ctx, attn_out, residual), "ffn_inp", il);
    tensor *cur = build_norm(ffn_inp, l.ffn_norm, "ffn_norm", il, l.ffn_norm_b);
    cur = l.ffn_gate_inp ? build_moe_ffn(*this, cur, l, il) : build_ffn(cur, l, il, act);
    if (residual_scale != 1.0f) cur = named(scale(ctx, cur, residual_scale), "ffn_out_scaled", il);
    return named(add(ctx, cur, ffn_inp), "l_out", il);
}

tensor *graph_builder::select_outputs(tensor *x) {
    if (!inputs_.out_ids) return x;
    tensor *rows = get_rows(ctx, x, inputs_.out_ids);
    if (x->name[0]) rows->format_name("%s (outputs)", x->name);  // the style of the ops' derived names
    return rows;
}

graph_inputs graph_builder::finish_hidden(tensor *x) {
    if (!last_stage()) return finish_stage(x);
    tensor *cur = named(x, "result_embd");
    cur->flags |= tensor_flag_output;
    inputs_.logits = cur;
    build_forward_expand(gf, cur);
    return inputs_;
}

graph_inputs graph_builder::finish(tensor *x, float logit_mult) {
    if (!last_stage()) return finish_stage(x);
    tensor *cur = build_norm(x, w.output_norm, "result_norm", -1, w.output_norm_b);
    cur = build_mm(w.output, cur, w.output_b, "result_output_raw", -1);
    if (logit_mult != 1.0f) cur = named(scale(ctx, cur, logit_mult), "result_output_scaled");
    if (hp.final_softcap > 0.0f) {  // cap * tanh(logits / cap)
        cur = named(scale(ctx, cur, 1.0f / hp.final_softcap), "result_output_div_cap");
        cur = named(tanh(ctx, cur), "result_output_tanh");
        cur = scale(ctx, cur, hp.final_softcap);
    }
    cur = named(cur, "result_output");
    cur->flags |= tensor_flag_output;
    inputs_.logits = cur;
    build_forward_expand(gf, cur);
    return inputs_;
}

void create_attn_weights(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                         bool biases) {
    const int64_t n_embd = hp.n_embd;
    const int64_t n_q = hp.n_embd_head_k * hp.n_head(il);
    const int64_t n_k = hp.n_embd_k_gqa(il);
    const int64_t n_v = hp.n_embd_v_gqa(il);
    auto bias = [&](const char *name, int64_t n) {
        return biases ? tl.create(block_tensor_name(il, name, "bias"), {n}) : nullptr;
    };
    if (tl.has(block_tensor_name(il, "attn_qkv"))) {
        l.wqkv = tl.create(block_tensor_name(il, "attn_qkv"), {n_embd, n_q + n_k + n_v});
        l.bqkv = bias("attn_qkv", n_q + n_k + n_v);
    } else {
        l.wq = tl.create(block_tensor_name(il, "attn_q"), {n_embd, n_q});
        l.wk = tl.create(block_tensor_name(il, "attn_k"), {n_embd, n_k});
        l.wv = tl.create(block_tensor_name(il, "attn_v"), {n_embd, n_v});
        l.bq = bias("attn_q", n_q);
        l.bk = bias("attn_k", n_k);
        l.bv = bias("attn_v", n_v);
    }
    l.wo = tl.create(block_tensor_name(il, "attn_output"), {hp.n_embd_head_v * hp.n_head(il), n_embd});
}

void create_ffn_weights(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                        ffn_layout layout) {
    const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff(il);
    if (layout == ffn_layout::gated)
        l.ffn_gate = tl.create(block_tensor_name(il, "ffn_gate"), {n_embd, n_ff});
    l.ffn_up = tl.create(block_tensor_name(il, "ffn_up"),
                         {n_embd, layout == ffn_layout::fused_gate_up ? 2 * n_ff : n_ff});
    l.ffn_down = tl.create(block_tensor_name(il, "ffn_down"), {n_ff, n_embd});
}

void create_llama_attn(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                       bool biases) {
    l.attn_norm = create_norm(tl, hp, il, "attn_norm");
    create_attn_weights(tl, hp, il, l, biases);
}

void create_llama_block(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                        bool gated) {
    create_llama_attn(tl, hp, il, l);
    l.ffn_norm = create_norm(tl, hp, il, "ffn_norm");
    create_ffn_weights(tl, hp, il, l, gated ? ffn_layout::gated : ffn_layout::plain);
}

tensor *create_norm(tensor_loader &tl, const model_hparams &hp, int64_t il, const char *name) {
    return tl.create(block_tensor_name(il, name), {hp.n_embd});
}

void create_llama_globals(tensor_loader &tl, const model_hparams &hp, model_weights &w) {
    w.tok_embd = tl.create("token_embd.weight", {hp.n_embd, hp.n_vocab});
    w.output_norm = tl.create("output_norm.weight", {hp.n_embd});
    w.output = tl.create_optional("output.weight", {hp.n_embd, hp.n_vocab});
    if (!w.output) w.output = w.tok_embd;  // tied embeddings
    w.rope_freqs = tl.create_optional("rope_freqs.weight", {hp.n_rot / 2});
}

graph_builder::qkv graph_builder::build_qkv_rope(const layer_weights &l, tensor *x, int64_t il) {
    auto [q, k, v] = build_qkv(l, x, il);
    if (l.attn_q_norm) q = build_norm(q, l.attn_q_norm, "Qcur_norm", il);  // over each head's dims
    if (l.attn_k_norm) k = build_norm(k, l.attn_k_norm, "Kcur_norm", il);
    return {build_rope(q, "Qcur_rope", il), build_rope(k, "Kcur_rope", il), v};
}

tensor *graph_builder::build_llama_attn(const layer_weights &l, tensor *x, int64_t il, float kq_scale) {
    tensor *cur = build_norm(x, l.attn_norm, "attn_norm", il, l.attn_norm_b);
    auto [q, k, v] = build_qkv_rope(l, cur, il);
    if (hp.attn_temp_scale != 0.0f) q = build_attn_temperature(q, il);  // mistral3's temperature
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
    tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
    for (int64_t il : b.layers()) {
        const layer_weights &l = b.w.layers[size_t(il)];
        tensor *cur = b.build_llama_attn(l, x, il, kq_scale);
        // gated: SwiGLU (llama, qwen2); without a gate: GELU (starcoder2)
        x = b.build_ffn_block(l, cur, x, il,
                              l.ffn_gate ? graph_builder::ffn_act::silu : graph_builder::ffn_act::gelu);
    }
    return b.finish(x);
}

graph_inputs build_mixer_stack(graph_builder &b, block_mixer mixer) {
    tensor *h = b.stage_input([&] { return b.build_inp_embd(); });
    for (const int64_t il : b.layers()) {
        const layer_weights &l = b.w.layers[size_t(il)];
        tensor *cur = mixer(b, l, b.build_norm(h, l.attn_norm, "attn_norm", il), il);
        if (il == b.hp.n_layer - 1) {  // only the output rows go on
            cur = b.select_outputs(cur);
            h = b.select_outputs(h);
        }
        h = b.named(add(b.ctx, cur, h), "l_out", il);
    }
    return b.finish(h);
}

}  // namespace weft
