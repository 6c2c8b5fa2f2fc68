// src/model/arch_mamba.cpp — Mamba (Mamba-1, and Falcon-Mamba's RMS-normed dt, B, C): RMSNorm, then a
// selective state-space mixer per block; no attention, no FFN, no positions. Each sequence carries a
// fixed-size state per layer (the convolution's last inputs and the scan's state) from one ubatch to
// the next, gathered, advanced and written back by the graph.
#include <string>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

// A view of rows [row0, row0 + n_rows) of every column of m [ne0, n_cols].
tensor *row_block(context &ctx, tensor *m, int64_t row0, int64_t n_rows) {
    return view_2d(ctx, m, n_rows, m->ne[1], m->nb[1], size_t(row0) * m->nb[0]);
}

tensor *as_f32(context &ctx, tensor *t) {
    return t->type == dtype::f32 ? t : cast(ctx, t, dtype::f32);
}

class arch_mamba final : public architecture {
  public:
    const char *name() const override { return "mamba"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        if (hp.ssm_d_state <= 0)
            throw error(f.path() + ": mamba.ssm.state_size is missing: a mamba model needs its ssm keys");
        if (hp.ssm_d_conv < 2)
            throw error(f.path() + ": mamba.ssm.conv_kernel is " + std::to_string(hp.ssm_d_conv) +
                        ", must be at least 2");
        hp.ssm_dt_b_c_rms = f.get_bool("mamba.ssm.dt_b_c_rms").value_or(false);
        hp.causal_attn = true;
        hp.recurrent_layers.assign(size_t(hp.n_layer), true);
        hp.n_embd_r = (hp.ssm_d_conv - 1) * hp.ssm_d_inner;
        hp.n_embd_s = hp.ssm_d_state * hp.ssm_d_inner;
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        const int64_t d_inner = hp.ssm_d_inner, d_state = hp.ssm_d_state, dt_rank = hp.ssm_dt_rank;
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            const std::string blk = "blk." + std::to_string(il) + ".";
            l.attn_norm = create_norm(tl, hp, il, "attn_norm");
            l.ssm_in = tl.create(blk + "ssm_in.weight", {hp.n_embd, 2 * d_inner});
            l.ssm_conv1d = tl.create(blk + "ssm_conv1d.weight", {hp.ssm_d_conv, d_inner});
            l.ssm_conv1d_b = tl.create(blk + "ssm_conv1d.bias", {d_inner});
            l.ssm_x = tl.create(blk + "ssm_x.weight", {d_inner, dt_rank + 2 * d_state});
            l.ssm_dt = tl.create(blk + "ssm_dt.weight", {dt_rank, d_inner});
            l.ssm_dt_b = tl.create(blk + "ssm_dt.bias", {d_inner});
            l.ssm_a = tl.create(blk + "ssm_a", {d_state, d_inner});
            l.ssm_d = tl.create(blk + "ssm_d", {d_inner});
            l.ssm_out = tl.create(blk + "ssm_out.weight", {d_inner, hp.n_embd});
        }
    }

    graph_inputs build_graph(graph_builder &b) const override { return build_mixer_stack(b, &build_mixer); }

    // Positions are not part of a recurrent state: nothing to re-rotate, and nothing can move.
    std::optional<cached_k_rope> k_rope_layout(const model_hparams &) const override { return std::nullopt; }

  private:
    // The selective state-space mixer of block il on the normed x [n_embd, n_tokens].
    static tensor *build_mixer(graph_builder &b, const layer_weights &l, tensor *x, int64_t il) {
        context &ctx = b.ctx;
        const model_hparams &hp = b.hp;
        const int64_t d_inner = hp.ssm_d_inner, d_state = hp.ssm_d_state, dt_rank = hp.ssm_dt_rank;
        const int64_t n_tokens = b.n_tokens, n_seqs = b.params.shape.n_seqs;
        const recurrent_layer &states = b.params.recurrent[size_t(il)];

        tensor *xz = b.build_mm(l.ssm_in, x, nullptr, "ssm_in", il);  // [2 d_inner, n_tokens]
        tensor *xs = row_block(ctx, xz, 0, d_inner);
        tensor *z = row_block(ctx, xz, d_inner, d_inner);

        // causal depthwise convolution over time, continuing each sequence's last inputs
        xs = b.build_recurrent_conv(xs, l.ssm_conv1d, il);
        xs = b.named(silu(ctx, add(ctx, xs, l.ssm_conv1d_b)), "ssm_conv_act", il);

        // the input-dependent step, B and C
        tensor *x_db = b.build_mm(l.ssm_x, xs, nullptr, "ssm_x", il);  // [dt_rank + 2 d_state, n_tokens]
        tensor *dt = row_block(ctx, x_db, 0, dt_rank);
        tensor *B = row_block(ctx, x_db, dt_rank, d_state);
        tensor *C = row_block(ctx, x_db, dt_rank + d_state, d_state);
        if (hp.ssm_dt_b_c_rms) {
            dt = rms_norm(ctx, dt, hp.norm_rms_eps);
            B = rms_norm(ctx, B, hp.norm_rms_eps);
            C = rms_norm(ctx, C, hp.norm_rms_eps);
        }
        dt = b.build_mm(l.ssm_dt, cont(ctx, dt), l.ssm_dt_b, "ssm_dt", il);  // [d_inner, n_tokens]

        // the selective scan, continuing each sequence's state; y + D x, gated by silu(z)
        tensor *ssm_in = reshape_3d(ctx, b.build_recurrent_rows(states.ssm), d_state, d_inner, n_seqs);
        tensor *scan =
            b.named(ssm_scan(ctx, xs, dt, as_f32(ctx, l.ssm_a), B, C, ssm_in, b.build_inp_rs_token_seq()),
                    "ssm_scan", il);
        b.store_recurrent_rows(states.ssm, scan, d_inner * n_tokens, d_state * d_inner, "ssm_state_store",
                               il);
        tensor *y = view_2d(ctx, scan, d_inner, n_tokens, size_t(d_inner) * sizeof(float), 0);
        y = add(ctx, y, mul(ctx, xs, l.ssm_d));
        y = b.named(mul(ctx, y, silu(ctx, z)), "ssm_y", il);
        return b.build_mm(l.ssm_out, y, nullptr, "ssm_out", il);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_mamba() {
    return std::make_unique<arch_mamba>();
}

}  // namespace weft
