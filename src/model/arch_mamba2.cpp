// src/model/arch_mamba2.cpp — Mamba-2: RMSNorm, then the Mamba-2 mixer (graph_mamba2.h) per block; no
// attention, no FFN, no positions. Each sequence carries per layer the convolution's last inputs and
// the heads' scan states from one ubatch to the next.
#include <optional>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/graph_mamba2.h"
#include "model/tensor_loader.h"

namespace weft {

namespace {

class arch_mamba2 final : public architecture {
  public:
    const char *name() const override { return "mamba2"; }

    void adjust_hparams(const gguf_file &f, model_hparams &hp) const override {
        set_mamba2_hparams(f, hp);
        hp.causal_attn = true;
        hp.recurrent_layers.assign(size_t(hp.n_layer), true);
    }

    void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const override {
        create_llama_globals(tl, hp, w);
        w.layers.resize(size_t(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            layer_weights &l = w.layers[size_t(il)];
            l.attn_norm = tl.create(block_tensor_name(il, "attn_norm"), {hp.n_embd});
            create_mamba2_mixer(tl, hp, il, l);
        }
    }

    graph_inputs build_graph(graph_builder &b) const override {
        return build_mixer_stack(b, &build_mamba2_mixer);
    }

    // Positions are not part of a recurrent state: nothing to re-rotate, and nothing can move.
    std::optional<cached_k_rope> k_rope_layout(const model_hparams &) const override { return std::nullopt; }
};

}  // namespace

std::unique_ptr<architecture> make_arch_mamba2() {
    return std::make_unique<arch_mamba2>();
}

}  // namespace weft
