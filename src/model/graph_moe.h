// src/model/graph_moe.h — the mixture-of-experts FFN: a router picks n_expert_used of n_expert
// SwiGLU experts per token and sums their outputs weighted by the router's probabilities, plus an
// optional shared expert that every token goes through (qwen2moe).
#pragma once

#include <cstdint>

#include "model/graph_helpers.h"

namespace weft {

class tensor_loader;

// The FFN half of a MoE block: ffn_norm, the router ffn_gate_inp, the experts ffn_{gate,up,down}_exps
// of n_ff_exp rows each, and with shared_expert the shared expert ffn_{gate,up,down}_shexp of
// n_ff_shexp rows and its gate ffn_gate_inp_shexp.
void create_moe_ffn(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                    bool shared_expert);

// On the normed x [n_embd, n]: probs = softmax(ffn_gate_inp · x) over the experts; the n_expert_used
// most probable experts of each token (ties: the lower index), their probabilities as weights
// (divided by their sum when hp.expert_weights_norm); the sum over those experts of weight ×
// down(silu(gate(x)) · up(x)); plus, when the layer has a shared expert, sigmoid(ffn_gate_inp_shexp
// · x) × its SwiGLU FFN. Returns [n_embd, n] "ffn_moe_out-<il>".
tensor *build_moe_ffn(graph_builder &b, tensor *x, const layer_weights &l, int64_t il);

}  // namespace weft
