// src/model/arch_llama4.cpp — Llama 4 (Scout, Maverick), the text model: the Llama block with
//   - mixture-of-experts FFNs on every interleave_moe_layer_step-th layer (dense SwiGLU FFNs on the
//     others): sigmoid routing, the picked experts' weights scaling each expert's input rather than
//     its output, and a shared expert of the experts' width beside them;
//   - RoPE on three layers of four; every fourth layer (3, 7, 11 ...) attends without positions
//     ("NoPE") over the whole context, its queries scaled by the attention temperature
//     1 + 0.1 · ln(1 + floor((pos + 1) / 8192));
//   - chunked attention on the RoPE layers (the first period - 1 of every
//     attention.sliding_window_pattern, default 4): a token sees only the earlier tokens of its own
//     chunk of 8192 positions;
//   - Q and K RMS-normed without a weight after RoPE on the RoPE layers (not in Maverick, the
//     128-expert model).
// The chunk, the NoPE interval and the temperature constants are not in the file: the reference
// engine fixes them as the published models have them (it reads attention.sliding_window only to
// turn chunking off with 0, a variant it then cannot run: refused here).
#include <cmath>
#include <optional>
#include <string>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/graph_moe.h"
#include "model/tensor_loader.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

constexpr int64_t no_rope_layer_interval = 4;
constexpr int64_t attention_chunk = 8192;
constexpr float temperature_scale = 0.1f;
constexpr int64_t temperature_floor = 8192;
constexpr float temperature_offset = 1.0f;
constexpr int64_t maverick_experts = 128;  // the model without Q/K norms

bool uses_rope(int64_t il) {
    return (il + 1) % no_rope_layer_interval != 0;
}

bool is_moe_layer(const model_hparams &hp, int64_t il) {
    return hp.n_moe_layer_step > 0 && (il + 1) % hp.n_moe_layer_step == 0;
}

class arch_llama4 final : public architecture {
  public:
    const char *name() const override { return "llama4"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        const std::string p = f.path() + ": " + hp.arch + ".";
        hp.rope_mode = rope_mode_normal;
        hp.attention_scale = read_hparam_float(f, hp, "attention.scale", 0.0f);
        if (hp.n_expert == 0) throw error(p + "expert_count: missing or 0 (Llama 4 is a mixture of experts)");
        if (hp.n_ff_exp == 0) throw error(p + "expert_feed_forward_length: missing or 0 (required)");
        const std::optional<int64_t> step = f.get_int(hp.arch + ".interleave_moe_layer_step");
        if (!step) throw error(p + "interleave_moe_layer_step: missing (required)");
        if (*step < 0 || *step > hp.n_layer)
            throw error(p + "interleave_moe_layer_step: " + std::to_string(*step) +
                        " must be in [0, block_count]");
        hp.n_moe_layer_step = *step;
        hp.n_ff_shexp = hp.n_ff_exp;  // one shared expert as wide as the routed ones
        hp.expert_gating_func = model_hparams::expert_gating::sigmoid;
        hp.expert_weights_norm = false;
        hp.expert_weights_before_ffn = true;
        if (hp.n_rot != hp.n_embd_head_k || hp.n_embd_head_v != hp.n_embd_head_k)
            throw error(p + "rope.dimension_count: " + std::to_string(hp.n_rot) +
                        " must equal attention.key_length and value_length (" +
                        std::to_string(hp.n_embd_head_k) + ", " + std::to_string(hp.n_embd_head_v) + ")");
        if (f.has(hp.arch + ".attention.sliding_window") && hp.n_swa == 0)
            throw error(p +
                        "attention.sliding_window: 0 (no chunked attention) is not supported: the reference "
                        "engine cannot run such a file either");
        hp.n_swa = attention_chunk;
        hp.swa_type = model_hparams::swa_kind::chunked;
        read_swa_pattern(f, hp, no_rope_layer_interval);
        hp.attn_temp_scale = temperature_scale;
        hp.attn_temp_floor = temperature_floor;
        hp.attn_temp_offset = temperature_offset;
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            create_llama_attn(tl, hp, il, l);
            if (is_moe_layer(hp, il)) {
                create_moe_ffn(tl, hp, il, l, moe_shared::plain);
            } else {
                l.ffn_norm = create_norm(tl, hp, il, "ffn_norm");
                create_ffn_weights(tl, hp, il, l, ffn_layout::gated);
            }
        }
    }

    // The NoPE layers' cached keys must not turn when a cell's position moves, the others' must: one
    // layout for every layer cannot say that, so positions of cached cells are not shifted.
    std::optional<cached_k_rope> k_rope_layout(const model_hparams &) const override { return std::nullopt; }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        const float kq_scale =
            hp.attention_scale != 0.0f ? hp.attention_scale : 1.0f / std::sqrt(float(hp.n_embd_head_k));
        const bool kq_norm = hp.n_expert != maverick_experts;
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_norm(x, l.attn_norm, "attn_norm", il);
            auto [q, k, v] = b.build_qkv(l, cur, il);
            if (uses_rope(il)) {
                q = b.build_rope(q, "Qcur_rope", il);
                k = b.build_rope(k, "Kcur_rope", il);
                if (kq_norm) {  // RMS over each head, no weight (Llama4TextL2Norm)
                    q = b.build_norm(q, nullptr, "Qcur_normed", il);
                    k = b.build_norm(k, nullptr, "Kcur_normed", il);
                }
            } else {
                q = b.build_attn_temperature(q, il);
            }
            cur = b.build_attn(il, l.wo, q, k, v, kq_scale, l.bo);
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu);
        }
        return b.finish(x);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_llama4() {
    return std::make_unique<arch_llama4>();
}

}  // namespace weft
