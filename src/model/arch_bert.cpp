// src/model/arch_bert.cpp — BERT, an encoder for embeddings: token + token-type (type 0) + learned
// position embeddings, a LayerNorm of their sum, then post-norm blocks (attention over the whole
// sequence, with biases; residual add; LayerNorm; GELU FFN with biases; residual add; LayerNorm).
// The output rows are the last hidden states; pooling (mean, CLS ...) is the caller's. A reranker
// (pooling rank) ends with its classification head on every output row instead, dense + tanh then
// the output layer (cls, cls.output), so that a row is the scores of the sequence its token starts
// when the caller asks for the first token of each (the reference's rank pooling).
#include <cmath>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_bert final : public architecture {
  public:
    const char *name() const override { return "bert"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.layer_norm = true;
        hp.encoder = true;
        if (hp.causal_attn)
            throw error(f.path() + ": bert.attention.causal is true; a BERT encoder attends both ways");
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        const int64_t n_embd = hp.n_embd;
        w.tok_embd = tl.create("token_embd.weight", {n_embd, hp.n_vocab});
        w.type_embd = tl.create_optional("token_types.weight", {n_embd, 2});
        w.pos_embd = tl.create("position_embd.weight", {n_embd, hp.n_ctx_train});
        w.tok_norm = tl.create("token_embd_norm.weight", {n_embd});
        w.tok_norm_b = tl.create("token_embd_norm.bias", {n_embd});
        // The head: both layers optional in the reference's bert (a head of one layer is cls.output
        // alone), but a reranker needs its output layer.
        w.cls = tl.create_optional("cls.weight", {n_embd, n_embd});
        w.cls_b = tl.create_optional("cls.bias", {n_embd});
        w.cls_out = hp.ranks() ? tl.create("cls.output.weight", {n_embd, hp.n_cls_out})
                               : tl.create_optional("cls.output.weight", {n_embd, hp.n_cls_out});
        w.cls_out_b = tl.create_optional("cls.output.bias", {hp.n_cls_out});
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            auto bias = [&](const char *name, int64_t n) {
                return tl.create(block_tensor_name(il, name, "bias"), {n});
            };
            create_attn_weights(tl, hp, il, l, /*biases=*/true);
            l.bo = bias("attn_output", n_embd);
            l.attn_post_norm = create_norm(tl, hp, il, "attn_output_norm");
            l.attn_post_norm_b = bias("attn_output_norm", n_embd);
            create_ffn_weights(tl, hp, il, l, ffn_layout::plain);
            l.ffn_up_b = bias("ffn_up", hp.n_ff(il));
            l.ffn_down_b = bias("ffn_down", n_embd);
            l.ffn_post_norm = create_norm(tl, hp, il, "layer_output_norm");
            l.ffn_post_norm_b = bias("layer_output_norm", n_embd);
        }
    }

    // Positions are learned embeddings added to the input: a cached key holds its position in a
    // way no rotation undoes.
    std::optional<cached_k_rope> k_rope_layout(const model_hparams &) const override { return std::nullopt; }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        const model_weights &w = b.w;
        const float kq_scale = 1.0f / std::sqrt(float(hp.n_embd_head_k));
        tensor *x = b.stage_input([&] {
            tensor *e = b.build_inp_embd();
            if (w.type_embd)  // every token is of type 0
                e = b.named(add(b.ctx, e, view_1d(b.ctx, w.type_embd, hp.n_embd, 0)), "inp_typed");
            e = b.named(add(b.ctx, get_rows(b.ctx, w.pos_embd, b.build_inp_pos()), e), "inp_positioned");
            return b.build_norm(e, w.tok_norm, "inp_norm", -1, w.tok_norm_b);
        });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            auto [q, k, v] = b.build_qkv(l, x, il);
            tensor *cur = b.build_attn(il, l.wo, q, k, v, kq_scale, l.bo);
            if (il == hp.n_layer - 1) {
                cur = b.select_outputs(cur);
                x = b.select_outputs(x);
            }
            cur = b.named(add(b.ctx, cur, x), "attn_res", il);
            tensor *ffn_inp = b.build_norm(cur, l.attn_post_norm, "attn_out_norm", il, l.attn_post_norm_b);
            cur = b.build_ffn(ffn_inp, l, il, graph_builder::ffn_act::gelu);
            cur = b.named(add(b.ctx, cur, ffn_inp), "ffn_res", il);
            x = b.build_norm(cur, l.ffn_post_norm, "l_out", il, l.ffn_post_norm_b);
        }
        if (hp.ranks() && b.last_stage()) x = build_classifier_head(b, x);
        return b.finish_hidden(x);
    }

  private:
    // out · tanh(cls · x + cls_b) + out_b on the output rows x: [n_cls_out, n_outputs]
    static tensor *build_classifier_head(graph_builder &b, tensor *x) {
        const model_weights &w = b.w;
        if (w.cls) {
            x = b.build_mm(w.cls, x, w.cls_b, "cls_dense", -1);
            x = b.named(tanh(b.ctx, x), "cls_tanh");
        }
        return b.build_mm(w.cls_out, x, w.cls_out_b, "cls_out", -1);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_bert() {
    return std::make_unique<arch_bert>();
}

}  // namespace weft
