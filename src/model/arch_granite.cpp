// src/model/arch_granite.cpp — IBM Granite (3.x dense): the Llama block with four scalar multipliers
// from the metadata: token embeddings × embedding_scale, attention.scale as the KQ scale, each
// block's attention and FFN outputs × residual_scale before their residual adds, logits ÷ logit_scale.
#include <cmath>
#include <optional>
#include <string>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_granite final : public architecture {
  public:
    const char *name() const override { return "granite"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_normal;
        // 0 (or absent) leaves the corresponding part of the graph as Llama's.
        hp.embedding_scale = read_hparam_float(f, hp, "embedding_scale", 0.0f);
        hp.residual_scale = read_hparam_float(f, hp, "residual_scale", 0.0f);
        hp.attention_scale = read_hparam_float(f, hp, "attention.scale", 0.0f);
        hp.logit_scale = read_hparam_float(f, hp, "logit_scale", std::nullopt);
        if (hp.logit_scale == 0.0f) throw error(f.path() + ": " + hp.arch + ".logit_scale: must not be 0");
        // Granite reads rope.scaling.finetuned as "RoPE on" (default true); a file without RoPE
        // would need a graph without rotation, which weft does not build.
        if (!f.get_bool(hp.arch + ".rope.scaling.finetuned").value_or(true))
            throw error(f.path() + ": " + hp.arch +
                        ".rope.scaling.finetuned is false (no RoPE), which is not supported");
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_tensors(tl, hp, w);
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        const float kq_scale =
            hp.attention_scale != 0.0f ? hp.attention_scale : 1.0f / std::sqrt(float(hp.n_embd_head_k));
        const float residual_scale = hp.residual_scale != 0.0f ? hp.residual_scale : 1.0f;
        tensor *x = b.stage_input([&] {
            tensor *e = b.build_inp_embd();
            return hp.embedding_scale != 0.0f ? b.named(scale(b.ctx, e, hp.embedding_scale), "inp_scaled")
                                              : e;
        });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_llama_attn(l, x, il, kq_scale);
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu, residual_scale);
        }
        return b.finish(x, 1.0f / hp.logit_scale);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_granite() {
    return std::make_unique<arch_granite>();
}

}  // namespace weft
