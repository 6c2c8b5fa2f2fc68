// src/model/graph_delta_net.h — the blocks of Qwen3-Next and Qwen3.5 (qwen3next, qwen35, qwen35moe):
// hybrids whose layers are mostly "linear attention" (a causal convolution over q, k and v, the gated
// delta net, an RMS norm of each value head gated by silu(z), the output projection), every
// full_attention_interval-th a gated full attention (the Q projection doubled into query and gate,
// per-head Q/K RMS norms, RoPE, the heads × sigmoid(gate) before the output projection).
#pragma once

#include <cstdint>

#include "model/graph_helpers.h"

namespace weft {

class gguf_file;
class tensor_loader;

// Checks the delta net's ssm keys (state_size: a head's k and v size; group_count: the q/k heads;
// time_step_rank: the value heads; inner_size: their channels; conv_kernel), marks the recurrent
// layers (every layer but each full_attention_interval-th, default 4) and sets the state sizes: the
// convolution's last d_conv - 1 inputs of its 2 key_dim + value_dim channels, and per value head the
// gated_delta_net op's state (a [head_k, head_v] matrix and its current block of up to 64 tokens).
// Throws weft::error naming the file and key.
void set_delta_net_hparams(const gguf_file &f, model_hparams &hp);

// How the linear-attention layers' beta and alpha projections are stored.
enum class delta_net_beta_alpha {
    fused,     // qwen3next: "ssm_ba" [n_embd, 2 n_head_v], per q/k head its value heads' betas then alphas
    separate,  // qwen35, qwen35moe: "ssm_beta" and "ssm_alpha", [n_embd, n_head_v] each
};

// The linear-attention weights of layer il (attn_qkv, attn_gate, ssm_conv1d, ssm_dt.bias, ssm_a, the
// beta/alpha projections, ssm_norm, ssm_out). Refuses the legacy fused ssm_in layout by name.
void create_delta_net_mixer(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                            delta_net_beta_alpha beta_alpha);
// The gated full attention's weights of layer il: attn_q [n_embd, 2 n_head head_k] (query and gate
// of each head, interleaved per head), attn_k, attn_v, attn_q_norm, attn_k_norm, attn_output.
void create_gated_attention(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l);

// The linear attention of recurrent layer il on the normed x [n_embd, n_tokens]: [n_embd, n_tokens].
// A value head h reads q/k head h % n_head_k (the tiled order the op takes) unless
// kv_heads_interleaved, where it reads h / (n_head_v / n_head_k) (the order of qwen3next's files).
tensor *build_delta_net_mixer(graph_builder &b, const layer_weights &l, tensor *x, int64_t il,
                              bool kv_heads_interleaved);
// The gated full attention of layer il on the normed x [n_embd, n_tokens]: [n_embd, n_tokens].
tensor *build_gated_attention(graph_builder &b, const layer_weights &l, tensor *x, int64_t il);

}  // namespace weft
