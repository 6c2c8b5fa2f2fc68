// weft/model/hparams.h — a model's hyper-parameters, read from the arch-prefixed GGUF keys.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace weft {

class gguf_file;

enum class rope_scaling_kind { none, linear, yarn };

struct model_hparams {
    std::string arch;  // general.architecture

    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;             // <arch>.context_length
    int64_t n_embd = 0;                  // <arch>.embedding_length
    int64_t n_layer = 0;                 // <arch>.block_count
    std::vector<int64_t> n_head_arr;     // <arch>.attention.head_count (per layer)
    std::vector<int64_t> n_head_kv_arr;  // <arch>.attention.head_count_kv (default: n_head)
    std::vector<int64_t> n_ff_arr;       // <arch>.feed_forward_length (per layer)
    int64_t n_embd_head_k = 0;           // <arch>.attention.key_length (default n_embd / n_head)
    int64_t n_embd_head_v = 0;           // <arch>.attention.value_length (default n_embd / n_head)
    int64_t n_rot = 0;                   // <arch>.rope.dimension_count (default n_embd_head_k)
    float norm_rms_eps = 1e-5f;          // <arch>.attention.layer_norm_rms_epsilon
    float norm_eps = 1e-5f;              // <arch>.attention.layer_norm_epsilon (LayerNorm)
    bool layer_norm = false;  // LayerNorm (mean and variance) instead of RMS norm (by architecture)

    int32_t rope_mode = 0;            // rope_mode_normal or rope_mode_neox (by architecture)
    bool use_rope = true;             // false: attention without positions (granitehybrid's NoPE)
    float rope_freq_base = 10000.0f;  // <arch>.rope.freq_base
    float rope_freq_scale = 1.0f;     // 1 / <arch>.rope.scaling.factor (linear, yarn)
    rope_scaling_kind rope_scaling = rope_scaling_kind::none;  // <arch>.rope.scaling.type
    int64_t n_ctx_orig = 0;         // <arch>.rope.scaling.original_context_length (default n_ctx_train)
    float yarn_ext_factor = 0.0f;   // 1 for yarn, 0 otherwise
    float yarn_attn_factor = 1.0f;  // <arch>.rope.scaling.attn_factor
    float yarn_beta_fast = 32.0f;   // <arch>.rope.scaling.yarn_beta_fast
    float yarn_beta_slow = 1.0f;    // <arch>.rope.scaling.yarn_beta_slow

    // Scalar multipliers (granite); 0 means "not used" and leaves the graph as Llama's.
    float embedding_scale = 0.0f;  // <arch>.embedding_scale: token embeddings × s
    float residual_scale = 0.0f;   // <arch>.residual_scale: block outputs × s before the residual adds
    float attention_scale = 0.0f;  // <arch>.attention.scale: replaces 1/sqrt(head_k) as the KQ scale
    float logit_scale = 0.0f;      // <arch>.logit_scale: logits ÷ s (granite), logits × s (command-r)

    // Sliding-window attention: a token at position p sees the cells at p - n_swa + 1 ... p in the
    // layers marked in swa_layers (by architecture; empty: none).
    int64_t n_swa = 0;  // <arch>.attention.sliding_window (0: none)
    std::vector<bool> swa_layers;
    // The RoPE base of the swa_layers, unscaled (gemma3: 10000, <arch>.rope.freq_base_swa when the
    // file has it); 0: they rotate as the other layers do.
    float rope_freq_base_swa = 0.0f;
    // Heads of their own size in the swa_layers (gemma4: <arch>.attention.key_length_swa,
    // value_length_swa and rope.dimension_count_swa); 0: the same as the other layers'.
    int64_t n_embd_head_k_swa = 0;
    int64_t n_embd_head_v_swa = 0;
    int64_t n_rot_swa = 0;
    int64_t head_k(int64_t il) const {
        return is_swa(il) && n_embd_head_k_swa > 0 ? n_embd_head_k_swa : n_embd_head_k;
    }
    int64_t head_v(int64_t il) const {
        return is_swa(il) && n_embd_head_v_swa > 0 ? n_embd_head_v_swa : n_embd_head_v;
    }
    int64_t rot(int64_t il) const { return is_swa(il) && n_rot_swa > 0 ? n_rot_swa : n_rot; }
    // Layers that keep no KV rows of their own and attend over an earlier layer's (gemma4's shared
    // KV layers): kv_source[il] is the layer whose rows layer il reads (il itself: its own); empty:
    // every layer has its own.
    std::vector<int64_t> kv_source;
    int64_t kv_layer(int64_t il) const { return size_t(il) < kv_source.size() ? kv_source[size_t(il)] : il; }
    bool has_own_kv(int64_t il) const { return kv_layer(il) == il; }
    // Per-layer inputs (gemma4): a vector of this many values per layer and token, looked up by token
    // and projected from the embeddings, that gates a projection in each block; 0: none.
    int64_t n_embd_per_layer = 0;  // <arch>.embedding_length_per_layer_input
    // Soft caps (gemma2): cap · tanh(x / cap) of the attention scores and of the logits; 0: none.
    float attn_softcap = 0.0f;   // <arch>.attn_logit_softcapping
    float final_softcap = 0.0f;  // <arch>.final_logit_softcapping

    // Encoders (bert): attention over the whole sequence, and hidden states out instead of logits.
    bool causal_attn = true;  // <arch>.attention.causal
    bool encoder = false;     // by architecture: the output rows are n_embd hidden states
    // <arch>.pooling_type: 0 none, 1 mean, 2 CLS (first token), 3 last, 4 rank (a reranker: the
    // classification head on the first token's row, n_cls_out scores)
    int32_t pooling_type = 0;
    static constexpr int32_t pooling_rank = 4;
    bool ranks() const { return encoder && pooling_type == pooling_rank; }
    int64_t n_cls_out = 1;  // the classification head's outputs: <arch>.classifier.output_labels' count
    // The width of an output row: n_vocab logits, n_embd hidden states for an encoder, or a
    // reranker's n_cls_out scores (its head applied to every output row).
    int64_t n_output() const { return ranks() ? n_cls_out : encoder ? n_embd : n_vocab; }

    bool is_swa(int64_t il) const {
        return n_swa > 0 && size_t(il) < swa_layers.size() && swa_layers[size_t(il)];
    }
    // How the swa_layers limit what a token sees: a window of the last n_swa positions, or (llama4's
    // chunked attention) the earlier positions of its own chunk [p / n_swa * n_swa, p].
    enum class swa_kind { window, chunked };
    swa_kind swa_type = swa_kind::window;

    // Attention temperature tuning (llama4's NoPE layers, mistral3 with <arch>.attention.temperature_scale):
    // the layers that apply it multiply each token's Q by attn_temperature(pos); 0: none.
    float attn_temp_scale = 0.0f;
    int64_t attn_temp_floor = 0;    // positions per step of the scale (> 0 where the scale is used)
    float attn_temp_offset = 0.0f;  // added to the position first (llama4: 1)
    // 1 + attn_temp_scale · ln(1 + floor((pos + attn_temp_offset) / attn_temp_floor)), in the
    // reference engine's precision (floats, then the logarithm in double).
    float attn_temperature(int64_t pos) const;

    // Mixture of experts (0 experts: a dense FFN). The architecture sets what the file leaves out.
    int64_t n_expert = 0;              // <arch>.expert_count
    int64_t n_expert_used = 0;         // <arch>.expert_used_count (1 .. n_expert when n_expert > 0)
    int64_t n_ff_exp = 0;              // <arch>.expert_feed_forward_length (0: absent)
    int64_t n_ff_shexp = 0;            // <arch>.expert_shared_feed_forward_length (0: absent)
    bool expert_weights_norm = false;  // the picked experts' weights renormalized to sum 1 (by architecture)
    // How the router turns logits into expert probabilities (deepseek2: <arch>.expert_gating_func,
    // 1 softmax, 2 sigmoid); the picked weights × expert_weights_scale when it is not 0.
    // softmax_weight (gpt-oss): the experts are picked by the raw logits, and their weights are the
    // softmax over the picked logits alone.
    enum class expert_gating { softmax, sigmoid, softmax_weight };
    expert_gating expert_gating_func = expert_gating::softmax;
    float expert_weights_scale = 0.0f;  // <arch>.expert_weights_scale (deepseek2)
    // The experts' activation: SwiGLU, or (gpt-oss, by architecture) swiglu_oai with these
    // alpha and limit (ops.h) when expert_swiglu_limit > 0.
    float expert_swiglu_alpha = 0.0f;
    float expert_swiglu_limit = 0.0f;
    // The picked experts' weights scale each expert's input instead of its output (llama4, by
    // architecture): down(silu(gate(w·x)) · up(w·x)).
    bool expert_weights_before_ffn = false;
    // <arch>.interleave_moe_layer_step (llama4): the layers il with (il + 1) % step == 0 are mixtures
    // of experts, the others dense; 0: none.
    int64_t n_moe_layer_step = 0;

    // Multi-head latent attention (deepseek2); 0: absent.
    int64_t n_lora_q = 0;            // <arch>.attention.q_lora_rank (0: a plain attn_q)
    int64_t n_lora_kv = 0;           // <arch>.attention.kv_lora_rank
    int64_t n_layer_dense_lead = 0;  // <arch>.leading_dense_block_count: dense FFN layers before the MoE ones
    int64_t n_expert_shared = 0;     // <arch>.expert_shared_count
    float rope_yarn_log_mul = 0.0f;  // <arch>.rope.scaling.yarn_log_multiplier

    // State-space models (mamba): a fixed-size recurrent state per sequence instead of attention
    // and its KV cache; 0 where the model has none.
    int64_t ssm_d_conv = 0;       // <arch>.ssm.conv_kernel: the causal convolution's width
    int64_t ssm_d_inner = 0;      // <arch>.ssm.inner_size: channels of the mixer
    int64_t ssm_d_state = 0;      // <arch>.ssm.state_size: state values per channel
    int64_t ssm_dt_rank = 0;      // <arch>.ssm.time_step_rank (Mamba-2: the number of heads)
    int64_t ssm_n_group = 0;      // <arch>.ssm.group_count: Mamba-2's groups of heads sharing B and C
    bool ssm_dt_b_c_rms = false;  // <arch>.ssm.dt_b_c_rms: dt, B and C RMS-normed (falcon-mamba)
    // Which layers are recurrent (a state-space mixer, a gated delta net, a short convolution): they
    // keep a fixed-size state per sequence instead of KV cache rows. Set by the architecture; empty:
    // none. A model whose every layer is recurrent is a recurrent model (mamba); one with both kinds a
    // hybrid (granitehybrid, lfm2, qwen3next ...), whose context keeps both memories.
    std::vector<bool> recurrent_layers;
    int64_t n_embd_r = 0;  // floats of a recurrent layer's convolution state per sequence (0: none)
    int64_t n_embd_s = 0;  // floats of its scan / delta-rule state per sequence (0: none)
    bool is_recurrent(int64_t il) const {
        return size_t(il) < recurrent_layers.size() && recurrent_layers[size_t(il)];
    }
    bool has_recurrent_layers() const {
        return std::find(recurrent_layers.begin(), recurrent_layers.end(), true) != recurrent_layers.end();
    }
    bool has_attention_layers() const {
        return int64_t(recurrent_layers.size()) < n_layer ||
               std::find(recurrent_layers.begin(), recurrent_layers.end(), false) != recurrent_layers.end();
    }
    bool recurrent() const { return has_recurrent_layers() && !has_attention_layers(); }
    bool hybrid() const { return has_recurrent_layers() && has_attention_layers(); }

    int64_t n_head(int64_t il = 0) const { return n_head_arr.at(size_t(il)); }
    int64_t n_head_kv(int64_t il = 0) const { return n_head_kv_arr.at(size_t(il)); }
    int64_t n_ff(int64_t il = 0) const { return n_ff_arr.at(size_t(il)); }
    int64_t n_embd_k_gqa(int64_t il = 0) const { return head_k(il) * n_head_kv(il); }
    int64_t n_embd_v_gqa(int64_t il = 0) const { return head_v(il) * n_head_kv(il); }
};

// Reads the keys shared by the Llama-family architectures (prefix = general.architecture) with
// the established defaults; throws weft::error naming the file and the key on a missing required
// key or an impossible value (zero heads, a head count not dividing n_embd ...).
model_hparams read_hparams(const gguf_file &f, const std::string &arch);

// <arch>.<suffix> as a finite float, def when absent; throws naming the file and key when it is
// absent without a default or not finite.
float read_hparam_float(const gguf_file &f, const model_hparams &hp, const char *suffix,
                        std::optional<float> def);

}  // namespace weft
