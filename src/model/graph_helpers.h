// src/model/graph_helpers.h — graph_builder: the shared pieces every architecture builds its graph from.
#pragma once

#include <array>
#include <cstdint>
#include <ranges>
#include <span>
#include <vector>

#include "weft/core/context.h"
#include "weft/core/graph.h"
#include "weft/core/ops.h"
#include "weft/model/model.h"

namespace weft {

class graph_builder {
  public:
    // stage: the blocks this graph computes (model::layers()).
    graph_builder(const model_hparams &hp, const model_weights &w, context &ctx, graph &g,
                  const graph_build_params &p, layer_span stage);

    const model_hparams &hp;
    const model_weights &w;
    context &ctx;
    graph &gf;
    const graph_build_params &params;
    const int64_t n_tokens;
    const int64_t n_outputs;
    const int64_t n_kv;
    const layer_span stage;

    // The blocks of this graph in order: every layer, or a pipeline stage's share. Architectures
    // loop over these, never over [0, n_layer).
    auto layers() const { return std::views::iota(stage.begin, stage.end); }
    bool first_stage() const { return stage.begin == 0; }
    bool last_stage() const { return stage.end == hp.n_layer; }
    // The input of the first block: on the first stage what first_input() builds (the
    // architecture's embedding of the tokens: lookup, scaling, position and type embeddings,
    // norm); on a later stage the previous stage's hidden states, an input.
    template <class Fn>
    tensor *stage_input(Fn &&first_input) {
        return first_stage() ? first_input() : build_inp_hidden();
    }

    // "<base>-<il>" (il >= 0) or "<base>"
    tensor *named(tensor *t, const char *base, int64_t il = -1);

    // f32 [n_embd, n_tokens]: rows of token_embd for the token ids, or the embeddings input.
    tensor *build_inp_embd();
    // The token ids input build_inp_embd made (null before it, or with embeddings input).
    tensor *inp_tokens() const { return inputs_.tokens; }
    // i32 [n_tokens]
    tensor *build_inp_pos();
    // A recurrent model's inputs, each made where a graph uses it: each token's sequence among the
    // ubatch's (i32 [n_tokens]); the state row each sequence reads and the one its new state goes to
    // (i32 [n_seqs] each), and both as pairs (i32 [2, n_seqs]; recurrent_memory.h).
    tensor *build_inp_rs_token_seq();
    tensor *build_inp_rs_slots();
    tensor *build_inp_rs_slots_out();
    tensor *build_inp_rs_columns();
    // A recurrent layer's state rows (cache: its conv or ssm states) of the ubatch's sequences,
    // gathered: f32 [row_len, n_seqs].
    tensor *build_recurrent_rows(tensor *cache);
    // Writes the new states of a recurrent op's result (its floats after the first `offset`, row_len
    // per sequence) into the sequences' rows of `cache` for them.
    void store_recurrent_rows(tensor *cache, tensor *result, int64_t offset, int64_t row_len,
                              const char *name, int64_t il);
    // The states a recurrent op (ssm_conv, ssm_scan_mamba2) advances, as [state_len, n_ch, ...]. In
    // place where the cache lies in host memory: the cache itself, and rows (the sequences' rows of
    // it read and written) for the op's in-place form. Elsewhere gathered (build_recurrent_rows) with
    // rows null: the caller stores the op's states (store_recurrent_rows).
    struct recurrent_states {
        tensor *states, *rows;
    };
    recurrent_states build_recurrent_states(tensor *cache, int64_t state_len, int64_t n_ch);
    // The causal depthwise convolution of recurrent layer il over x [n_ch, n_tokens] (weight
    // [d_conv, n_ch], any float type), continuing each sequence from its last d_conv - 1 inputs (the
    // layer's conv state rows, written back): f32 [n_ch, n_tokens].
    tensor *build_recurrent_conv(tensor *x, tensor *weight, int64_t il);

    // rms_norm(x) * weight, or layer_norm(x) * weight (+ bias) when hp.layer_norm
    tensor *build_norm(tensor *x, tensor *weight, const char *name, int64_t il, tensor *bias = nullptr);
    // Attention temperature tuning (llama4, mistral3): q [head_dim, n_head, n_tokens] × each token's
    // hp.attn_temperature(pos), an input of the graph ("Qcur_temp_scaled-<il>").
    tensor *build_attn_temperature(tensor *q, int64_t il);
    // weight · x (+ bias)
    tensor *build_mm(tensor *weight, tensor *x, tensor *bias, const char *name, int64_t il);
    // build_mm of several weights by one x, their products first and consecutive in the graph (a
    // backend may compute them together: the CPU quantizes x once for all of them). For n = 2, 3.
    struct mm_of_x {
        tensor *weight, *bias;
        const char *name;
    };
    template <size_t n>
    std::array<tensor *, n> build_mms(const std::array<mm_of_x, n> &mms, tensor *x, int64_t il);
    // The product cur = weight · x, then the LoRA adapters of weight and the bias.
    tensor *finish_mm(tensor *cur, tensor *weight, tensor *x, tensor *bias, const char *name, int64_t il);
    // Q, K, V projections of x (with the layer's biases when it has them; one fused product when
    // the layer has wqkv), split into heads:
    // q [head_k, n_head, n_tokens], k [head_k, n_head_kv, n_tokens], v [head_v, n_head_kv, n_tokens].
    struct qkv {
        tensor *q, *k, *v;
    };
    qkv build_qkv(const layer_weights &l, tensor *x, int64_t il);
    // build_qkv, the layer's per-head Q and K norms where it has them, then RoPE on Q and K.
    qkv build_qkv_rope(const layer_weights &l, tensor *x, int64_t il);
    // x [head_dim, n_head, n_tokens] rotated by the positions input with the model's rope settings.
    tensor *build_rope(tensor *x, const char *name, int64_t il);
    // Writes k, v (each [head_dim, n_head_kv, n_tokens]) into layer il's cache rows, attends q
    // ([head_dim, n_head, n_tokens]) over the first n_kv cells with the causal mask (the
    // sliding-window one in hp.is_swa layers): softmax(q·kᵀ·kq_scale + mask)·v, the scores soft-capped
    // when hp.attn_softcap > 0, each head's sink logit in the softmax where the layer has attn_sinks,
    // then the output projection wo (+ bo). Returns [n_embd, n_tokens]; with
    // wo null, the heads before any projection, [head_v * n_head, n_tokens]. A layer without KV rows
    // of its own (hp.kv_layer(il) != il) takes k and v null and attends over its source layer's rows
    // (this graph's write of them where it has one). head_dim: hp.head_k(il), hp.head_v(il).
    tensor *build_attn(int64_t il, tensor *wo, tensor *q, tensor *k, tensor *v, float kq_scale,
                       tensor *bo = nullptr);
    // The Llama attention half of a block on the residual stream x: norm, Q/K/V, RoPE on Q and K,
    // attention and the output projection, each with the layer's biases where it has them (the
    // residual add is the caller's).
    tensor *build_llama_attn(const layer_weights &l, tensor *x, int64_t il, float kq_scale);
    // The FFN of layer il with the activation act (SiLU or GELU): gated, down(act(gate(x)) * up(x)),
    // when the layer has ffn_gate or ffn_up holds the gate rows and the up rows (2 n_ff: fused),
    // else down(act(up(x))); with the layer's up and down biases where it has them.
    enum class ffn_act { silu, gelu };
    tensor *build_ffn(tensor *x, const layer_weights &l, int64_t il, ffn_act act);
    // The second half of a pre-norm block: residual add (keeping only output rows after the last
    // layer), FFN norm, FFN (a mixture of experts when the layer has a router, else build_ffn with
    // act), residual add. Returns the layer output "l_out-<il>". A residual_scale other than 1
    // multiplies the attention and FFN outputs before their adds.
    tensor *build_ffn_block(const layer_weights &l, tensor *attn_out, tensor *residual, int64_t il,
                            ffn_act act, float residual_scale = 1.0f);
    // Keeps only the rows that produce output (a no-op when every row does).
    tensor *select_outputs(tensor *x);
    // Final norm and output projection (+ output bias), the logits × logit_mult when it is not 1 and
    // soft-capped when hp.final_softcap > 0; marks the logits as the graph's output, expands the
    // graph and returns the inputs.
    graph_inputs finish(tensor *x, float logit_mult = 1.0f);
    // An encoder's end: x, its output rows (the last block keeps only those: select_outputs), is
    // the graph's output.
    graph_inputs finish_hidden(tensor *x);
    // Both finish and finish_hidden, on a stage before the last: x itself (every token's row) is
    // the output, handed to the next stage.

  private:
    graph_inputs inputs_;
    // Each layer's KV cache after this graph's write of its rows (null before, or where another
    // stage wrote them): a layer without rows of its own reads its source's (hp.kv_layer) from here.
    std::vector<kv_layer> stored_kv_;
    tensor *build_inp_hidden();
    graph_inputs finish_stage(tensor *x);
    tensor *make_input(dtype t, std::initializer_list<int64_t> ne, const char *name);
};

// The layer stack of a state-space model (mamba, mamba2): per block an RMS norm, the mixer and the
// residual add, then finish. mixer(b, layer weights, normed x, il) returns the block's output.
using block_mixer = tensor *(*)(graph_builder &b, const layer_weights &l, tensor *x, int64_t il);
graph_inputs build_mixer_stack(graph_builder &b, block_mixer mixer);

// The reference's periodic pattern of sliding-window (or chunked) layers: the first period - 1 layers
// of every <arch>.attention.sliding_window_pattern (default_period when absent), every layer with
// period 0, into hp.swa_layers. A <arch>.rope.freq_base_swa other than rope.freq_base is refused (the
// reference rotates those layers with their own base but the model's scaling; weft's own base for
// them is unscaled, gemma3's). Throws weft::error naming the file and key.
void read_swa_pattern(const gguf_file &f, model_hparams &hp, int64_t default_period);

// The model's rope settings (hparams) for layer il as the rope op takes them (sliding-window layers
// have a base of their own where hp.rope_freq_base_swa is set).
rope_params model_rope_params(const model_hparams &hp, int64_t il);
// The graph behind model::build_k_shift: per layer, the keys of the cells input gathered in f32,
// their rotary dims (layout) rotated by the deltas input, written back with set_rows.
k_shift_inputs build_k_shift_graph(const model_hparams &hp, const model_weights &w, context &ctx, graph &g,
                                   std::span<const kv_layer> kv, int64_t n_cells,
                                   const cached_k_rope &layout);

// Q, K, V (or attn_qkv when the file has it fused) and the output projection of layer il; with
// biases on Q, K, V (or QKV) when `biases`.
void create_attn_weights(class tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                         bool biases);
// The FFN matrices of layer il: up and down, with a gate (gated), without (plain), or with the
// gate rows fused into ffn_up before the up rows (fused_gate_up: [n_embd, 2 n_ff]).
enum class ffn_layout { gated, plain, fused_gate_up };
void create_ffn_weights(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                        ffn_layout layout);
// A norm weight [n_embd] of layer il ("post_attention_norm" ...).
tensor *create_norm(tensor_loader &tl, const model_hparams &hp, int64_t il, const char *name);
// The attention half of a Llama block's weights: attention norm, then create_attn_weights.
void create_llama_attn(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                       bool biases = false);
// The Llama-family block weights every architecture here shares: attention norm, Q, K, V,
// output projection, FFN norm, gate, up, down.
// gated false: no ffn_gate (a plain up / activation / down FFN).
void create_llama_block(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l,
                        bool gated = true);
// token_embd, output_norm, output (tied to token_embd when absent), optional rope_freqs.
void create_llama_globals(tensor_loader &tl, const model_hparams &hp, model_weights &w);
// Every tensor of a Llama-shaped model: the globals and n_layer Llama blocks.
void create_llama_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w);
// The Llama-shaped layer stack and output on the token embeddings: per layer build_llama_attn and
// build_ffn_block (which follow the layer's biases, norm kind and FFN kind), then finish. Llama,
// Qwen2 and StarCoder2 are this graph with different weights and hparams.
graph_inputs build_llama_graph(graph_builder &b);

}  // namespace weft
