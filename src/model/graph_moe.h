// src/model/graph_moe.h — the mixture-of-experts FFN: a router picks n_expert_used of n_expert
// SwiGLU experts per token and sums their outputs weighted by the router's probabilities, plus an
// optional shared expert that every token goes through (qwen2moe, deepseek2).
#pragma once

#include <cstdint>

#include "model/graph_helpers.h"

namespace weft {

class gguf_file;
class tensor_loader;

// The shared expert of a MoE block: none, one scaled by sigmoid(ffn_gate_inp_shexp · x)
// (qwen2moe), or one added as it is (deepseek2).
enum class moe_shared { none, gated, plain };

// The keys of DeepSeek-V3-style routing (deepseek2, glm4moe), after read_hparams: <arch>.
// leading_dense_block_count (dense FFN layers first), expert_shared_count (shared experts of
// expert_feed_forward_length rows each, unless expert_shared_feed_forward_length says), and the
// picked weights' expert_weights_scale, expert_weights_norm and expert_gating_func (1 softmax, 2
// sigmoid; absent or 0: absent_gating). Throws weft::error naming the file and key on a missing
// required key, an impossible value, or group-limited selection (expert_group_used_count < groups).
void read_v3_routing_hparams(const gguf_file &f, model_hparams &hp,
                             model_hparams::expert_gating absent_gating);

// The FFN half of a MoE block: the norm `norm_name` (ffn_norm), the router ffn_gate_inp, the experts
// ffn_{gate,up,down}_exps of n_ff_exp rows each, the optional selection bias exp_probs_b, and unless shared
// is none the shared expert ffn_{gate,up,down}_shexp of n_ff_shexp rows (with its gate ffn_gate_inp_shexp
// when gated).
void create_moe_ffn(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                    moe_shared shared, const char *norm_name = "ffn_norm");

// Every tensor of a Mixtral-shaped model: the Llama globals, and per layer the Llama attention and a
// mixture-of-experts FFN without a shared expert (llama and mistral3 with <arch>.expert_count > 0).
void create_llama_moe_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w);

// What a family asks of build_moe_ffn beyond its hparams and weights (gemma4).
struct moe_ffn_options {
    tensor *logits = nullptr;  // the router's logits [n_expert, n], computed by the caller
    graph_builder::ffn_act act = graph_builder::ffn_act::silu;  // gelu: the experts are GELU-gated
};

// On the normed x [n_embd, n]: probs = softmax (or sigmoid, hp.expert_gating_func) of ffn_gate_inp · x
// (+ ffn_gate_inp_b where the layer has it) over the experts; the n_expert_used experts of each token
// with the largest probs (+ the selection bias exp_probs_b when the layer has one; ties: the lower
// index), their probabilities as weights (softmax_weight gating: the logits pick, the softmax of the
// picked logits weighs; divided by their sum when hp.expert_weights_norm, × hp.expert_weights_scale
// when it is not 0); the sum over those experts of weight × down(silu(gate(x)) · up(x)) (swiglu_oai
// when hp.expert_swiglu_limit > 0, gelu for options.act gelu; gate and up the halves of one
// ffn_gate_up_exps product where the layer has it; each product + its expert's bias where the layer
// has ffn_*_exps_b; down × its expert's ffn_down_exps_s where the layer has it); plus, when the
// layer has a shared expert, its SwiGLU FFN (× sigmoid(ffn_gate_inp_shexp · x) when it has that gate).
// options.logits, when given, stands for ffn_gate_inp · x. Returns [n_embd, n] "ffn_moe_out-<il>".
tensor *build_moe_ffn(graph_builder &b, tensor *x, const layer_weights &l, int64_t il,
                      const moe_ffn_options &options = {});

}  // namespace weft
