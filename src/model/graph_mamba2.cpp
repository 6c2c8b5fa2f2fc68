// src/model/graph_mamba2.cpp — the Mamba-2 mixer shared by mamba2 and granitehybrid.
#include "model/graph_mamba2.h"

#include <string>

#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

// Rows [row0, row0 + n_rows) of every column of m [ne0, n_cols].
tensor *row_block(context &ctx, tensor *m, int64_t row0, int64_t n_rows) {
    return view_2d(ctx, m, n_rows, m->ne[1], m->nb[1], size_t(row0) * m->nb[0]);
}

int64_t conv_channels(const model_hparams &hp) {
    return hp.ssm_d_inner + 2 * hp.ssm_n_group * hp.ssm_d_state;
}

}  // namespace

void set_mamba2_hparams(const gguf_file &f, model_hparams &hp) {
    auto fail = [&](const char *key, const std::string &what) {
        throw error(f.path() + ": " + hp.arch + "." + key + ": " + what);
    };
    if (hp.ssm_d_state <= 0) fail("ssm.state_size", "missing: a Mamba-2 mixer needs its ssm keys");
    if (hp.ssm_n_group <= 0) fail("ssm.group_count", "missing or 0 (a Mamba-2 mixer has groups)");
    const int64_t n_head = hp.ssm_dt_rank;
    if (hp.ssm_d_inner % n_head != 0)
        fail("ssm.time_step_rank", std::to_string(n_head) + " heads do not divide ssm.inner_size " +
                                       std::to_string(hp.ssm_d_inner));
    if (n_head % hp.ssm_n_group != 0)
        fail("ssm.group_count",
             std::to_string(hp.ssm_n_group) + " groups do not divide " + std::to_string(n_head) + " heads");
    if (hp.ssm_d_conv < 2) fail("ssm.conv_kernel", "must be at least 2, is " + std::to_string(hp.ssm_d_conv));
    hp.n_embd_r = (hp.ssm_d_conv - 1) * conv_channels(hp);
    hp.n_embd_s = hp.ssm_d_state * hp.ssm_d_inner;
}

void create_mamba2_mixer(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l) {
    const int64_t d_inner = hp.ssm_d_inner, n_head = hp.ssm_dt_rank, n_group = hp.ssm_n_group;
    const int64_t n_conv = conv_channels(hp);
    l.ssm_in = tl.create(block_tensor_name(il, "ssm_in"), {hp.n_embd, d_inner + n_conv + n_head});
    l.ssm_conv1d = tl.create(block_tensor_name(il, "ssm_conv1d"), {hp.ssm_d_conv, n_conv});
    l.ssm_conv1d_b = tl.create(block_tensor_name(il, "ssm_conv1d", "bias"), {n_conv});
    l.ssm_dt_b = tl.create(block_tensor_name(il, "ssm_dt", "bias"), {n_head});
    l.ssm_a = tl.create("blk." + std::to_string(il) + ".ssm_a", {1, n_head});
    l.ssm_d = tl.create("blk." + std::to_string(il) + ".ssm_d", {1, n_head});
    l.ssm_norm = tl.create(block_tensor_name(il, "ssm_norm"), {d_inner / n_group, n_group});
    l.ssm_out = tl.create(block_tensor_name(il, "ssm_out"), {d_inner, hp.n_embd});
}

tensor *build_mamba2_mixer(graph_builder &b, const layer_weights &l, tensor *x, int64_t il) {
    context &ctx = b.ctx;
    const model_hparams &hp = b.hp;
    const int64_t d_inner = hp.ssm_d_inner, d_state = hp.ssm_d_state, n_head = hp.ssm_dt_rank;
    const int64_t n_group = hp.ssm_n_group, n_conv = conv_channels(hp);
    const int64_t n_tokens = b.n_tokens;
    const recurrent_layer &states = b.params.recurrent[size_t(il)];
    auto as_f32 = [&](tensor *t) { return t->type == dtype::f32 ? t : cast(ctx, t, dtype::f32); };

    tensor *zxbcdt = b.build_mm(l.ssm_in, x, nullptr, "ssm_in", il);
    tensor *z = row_block(ctx, zxbcdt, 0, d_inner);
    tensor *xbc = row_block(ctx, zxbcdt, d_inner, n_conv);
    tensor *dt =
        b.named(add(ctx, row_block(ctx, zxbcdt, d_inner + n_conv, n_head), l.ssm_dt_b), "ssm_dt", il);

    // the causal convolution over x, B and C, continuing each sequence's last inputs
    xbc = b.build_recurrent_conv(xbc, l.ssm_conv1d, il);
    xbc = b.named(silu(ctx, add(ctx, xbc, l.ssm_conv1d_b)), "ssm_conv_act", il);
    tensor *xs = row_block(ctx, xbc, 0, d_inner);
    tensor *B = row_block(ctx, xbc, d_inner, n_group * d_state);
    tensor *C = row_block(ctx, xbc, d_inner + n_group * d_state, n_group * d_state);

    // the scan with the D skip, continuing each sequence's state
    const graph_builder::recurrent_states ssm_in = b.build_recurrent_states(states.ssm, d_state, d_inner);
    tensor *A = reshape(ctx, as_f32(l.ssm_a), {n_head});
    tensor *D = reshape(ctx, as_f32(l.ssm_d), {n_head});
    tensor *scan = b.named(
        ssm_scan_mamba2(ctx, xs, dt, A, B, C, ssm_in.states, b.build_inp_rs_token_seq(), D, ssm_in.rows),
        "ssm_scan", il);
    if (!ssm_in.rows)
        b.store_recurrent_rows(states.ssm, scan, d_inner * n_tokens, d_state * d_inner, "ssm_state_store",
                               il);
    tensor *y = view_2d(ctx, scan, d_inner, n_tokens, size_t(d_inner) * sizeof(float), 0);

    // y * silu(z), RMS-normed over each group's channels
    y = b.named(glu(ctx, cont(ctx, z), y, glu_kind::swiglu), "ssm_y", il);
    y = rms_norm(ctx, reshape_2d(ctx, y, d_inner / n_group, n_group * n_tokens), hp.norm_rms_eps);
    y = b.named(reshape_2d(ctx, mul(ctx, y, l.ssm_norm), d_inner, n_tokens), "ssm_y_norm", il);
    return b.build_mm(l.ssm_out, y, nullptr, "ssm_out", il);
}

}  // namespace weft
