// src/model/arch_gpt_oss.cpp — OpenAI's gpt-oss (the reference's "gpt-oss", LLM_ARCH_OPENAI_MOE): the
// Llama block with biases on Q, K, V and the output projection, a sink logit per head in the
// attention's softmax, sliding-window attention on alternate layers (the first of each pair), NeoX
// RoPE with YaRN, the FFN norm named post_attention_norm, and a mixture of experts without a shared
// one: a router with a bias picks by its raw logits and weighs the picked experts by the softmax of
// their logits alone; every expert has biases and the swiglu_oai activation (alpha 1.702, limit 7).
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

// gpt-oss's activation constants (the reference fixes them for this family; no metadata)
constexpr float swiglu_oai_alpha = 1.702f;
constexpr float swiglu_oai_limit = 7.0f;

class arch_gpt_oss final : public architecture {
  public:
    const char *name() const override { return "gpt-oss"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        const std::string p = f.path() + ": " + hp.arch + ".";
        hp.rope_mode = rope_mode_neox;
        if (hp.n_expert == 0) throw error(p + "expert_count: missing or 0 (required)");
        if (hp.n_ff_exp == 0) throw error(p + "expert_feed_forward_length: missing or 0 (required)");
        if (hp.n_swa <= 0) throw error(p + "attention.sliding_window: missing or 0 (required)");
        // heads are reshaped by the rotary size: every dim of a head rotates
        if (hp.n_rot != hp.n_embd_head_k || hp.n_embd_head_v != hp.n_embd_head_k)
            throw error(p + "rope.dimension_count: " + std::to_string(hp.n_rot) +
                        " must equal attention.key_length and value_length (" +
                        std::to_string(hp.n_embd_head_k) + ", " + std::to_string(hp.n_embd_head_v) + ")");
        read_swa_pattern(f, hp, 2);  // the reference's default: windows on the even layers
        hp.expert_gating_func = model_hparams::expert_gating::softmax_weight;
        hp.expert_swiglu_alpha = swiglu_oai_alpha;
        hp.expert_swiglu_limit = swiglu_oai_limit;
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            create_llama_attn(tl, hp, il, l, /*biases=*/true);
            l.bo = tl.create(block_tensor_name(il, "attn_output", "bias"), {hp.n_embd});
            l.attn_sinks = tl.create(block_tensor_name(il, "attn_sinks"), {hp.n_head(il)});
            create_moe_ffn(tl, hp, il, l, moe_shared::none, "post_attention_norm");
            l.ffn_gate_inp_b = tl.create(block_tensor_name(il, "ffn_gate_inp", "bias"), {hp.n_expert});
            l.ffn_gate_exps_b =
                tl.create(block_tensor_name(il, "ffn_gate_exps", "bias"), {hp.n_ff_exp, hp.n_expert});
            l.ffn_up_exps_b =
                tl.create(block_tensor_name(il, "ffn_up_exps", "bias"), {hp.n_ff_exp, hp.n_expert});
            l.ffn_down_exps_b =
                tl.create(block_tensor_name(il, "ffn_down_exps", "bias"), {hp.n_embd, hp.n_expert});
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        const float kq_scale = 1.0f / std::sqrt(float(b.hp.n_rot));
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_llama_attn(l, x, il, kq_scale);  // biases, sinks, the window on its layers
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu);  // the experts (see header)
        }
        return b.finish(x);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_gpt_oss() {
    return std::make_unique<arch_gpt_oss>();
}

}  // namespace weft
