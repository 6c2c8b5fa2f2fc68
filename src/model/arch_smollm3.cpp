// src/model/arch_smollm3.cpp — SmolLM3: the Llama block, but every fourth layer (3, 7, 11 ...) attends
// without RoPE ("NoPE" layers: their queries and keys carry no position). The interval is not in
// the file; the reference fixes it at 4, as the published models have it.
#include <cmath>
#include <optional>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

constexpr int64_t no_rope_layer_interval = 4;

bool uses_rope(int64_t il) {
    return (il + 1) % no_rope_layer_interval != 0;
}

class arch_smollm3 final : public architecture {
  public:
    const char *name() const override { return "smollm3"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        hp.rope_mode = rope_mode_normal;
        hp.attention_scale = read_hparam_float(f, hp, "attention.scale", 0.0f);
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_tensors(tl, hp, w);
    }

    // The NoPE layers' cached keys must not turn when a cell's position moves, the others' must: one
    // layout for every layer cannot say that, so positions of cached cells are not shifted.
    std::optional<cached_k_rope> k_rope_layout(const model_hparams &) const override { return std::nullopt; }

    graph_inputs build_graph(graph_builder &b) const override {
        const model_hparams &hp = b.hp;
        const float kq_scale =
            hp.attention_scale != 0.0f ? hp.attention_scale : 1.0f / std::sqrt(float(hp.n_embd_head_k));
        tensor *x = b.stage_input([&] { return b.build_inp_embd(); });
        for (int64_t il : b.layers()) {
            const layer_weights &l = b.w.layers[size_t(il)];
            tensor *cur = b.build_norm(x, l.attn_norm, "attn_norm", il);
            auto [q, k, v] = uses_rope(il) ? b.build_qkv_rope(l, cur, il) : b.build_qkv(l, cur, il);
            cur = b.build_attn(il, l.wo, q, k, v, kq_scale, l.bo);
            x = b.build_ffn_block(l, cur, x, il, graph_builder::ffn_act::silu);
        }
        return b.finish(x);
    }
};

}  // namespace

std::unique_ptr<architecture> make_arch_smollm3() {
    return std::make_unique<arch_smollm3>();
}

}  // namespace weft
