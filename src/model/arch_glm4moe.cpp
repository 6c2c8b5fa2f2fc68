// src/model/arch_glm4moe.cpp — GLM-4.5 / 4.6 (glm4moe): the Llama block with biases on Q, K and V,
// optional per-head RMS norms of Q and K, NeoX RoPE over part of each head, and the FFN norm named
// post_attention_norm; the FFN is dense in the leading layers and a mixture of experts after them,
// routed as DeepSeek-V3 routes (sigmoid gating with a selection bias, renormalized and scaled
// weights, shared experts added).
//
// The last nextn_predict_layers blocks of a file are its multi-token-prediction layers: loaded (the
// file's tensors must all be accounted for) but not run, as the reference does.
#include <cmath>
#include <string>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class arch_glm4moe final : public architecture {
  public:
    const char *name() const override { return "glm4moe"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_neox;
        const std::string key = hp.arch + ".nextn_predict_layers";
        const int64_t n_nextn = f.get_int(key).value_or(0);
        if (n_nextn < 0 || n_nextn >= hp.n_layer)
            throw error(f.path() + ": " + key + ": " + std::to_string(n_nextn) +
                        " must be in [0, block_count)");
        hp.n_layer -= n_nextn;  // create_tensors finds the blocks after these by their names
        read_v3_routing_hparams(f, hp, model_hparams::expert_gating::sigmoid);
        if (hp.n_expert == 0)
            throw error(f.path() + ": " + hp.arch + ".expert_count: missing or 0 (required)");
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) create_block(tl, hp, il, w.layers[size_t(il)]);
        // the multi-token-prediction blocks: a block's weights and the layer's own, unused
        for (int64_t il = hp.n_layer; tl.has(block_tensor_name(il, "attn_norm")); ++il) {
            layer_weights unused;
            create_block(tl, hp, il, unused);
            tl.create(block_tensor_name(il, "nextn.eh_proj"), {2 * hp.n_embd, hp.n_embd});
            tl.create(block_tensor_name(il, "nextn.enorm"), {hp.n_embd});
            tl.create(block_tensor_name(il, "nextn.hnorm"), {hp.n_embd});
            tl.create_optional(block_tensor_name(il, "nextn.embed_tokens"), {hp.n_embd, hp.n_vocab});
            tl.create_optional(block_tensor_name(il, "nextn.shared_head_head"), {hp.n_embd, hp.n_vocab});
            tl.create_optional(block_tensor_name(il, "nextn.shared_head_norm"), {hp.n_embd});
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const float kq_scale = 1.0f / std::sqrt(float(b.hp.n_embd_head_k));
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_llama_attn(l, x, il, kq_scale);  // Q/K norms (when present) before RoPE
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu);  // routed + shared experts
        }
        return b.finish(x);
    }

  private:
    static void create_block(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l) {
        create_llama_attn(tl, hp, il, l, /*biases=*/true);
        l.attn_q_norm = tl.create_optional(block_tensor_name(il, "attn_q_norm"), {hp.n_embd_head_k});
        l.attn_k_norm = tl.create_optional(block_tensor_name(il, "attn_k_norm"), {hp.n_embd_head_k});
        if (il < hp.n_layer_dense_lead) {
            l.ffn_norm = create_norm(tl, hp, il, "post_attention_norm");
            create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
        } else {
            create_moe_ffn(tl, hp, il, l, hp.n_expert_shared > 0 ? moe_shared::plain : moe_shared::none,
                           "post_attention_norm");
        }
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_glm4moe() {
    return std::make_unique<arch_glm4moe>();
}

}  // namespace weft
