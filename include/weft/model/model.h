// weft/model/model.h — a loaded model: hparams, zero-copy weights, vocabulary, the graph of one ubatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/tensor.h"
#include "weft/model/hparams.h"
#include "weft/model/lora.h"
#include "weft/vocab/vocab.h"

namespace weft {

class context;
class device;
class gguf_set;
class backend_buffer;
struct graph;
class architecture;

// Loading was stopped by the progress callback returning false.
class load_cancelled : public error {
  public:
    using error::error;
};

// Blocks [begin, end) of a model (end < 0: through the last one) — the share of one stage of a
// pipeline that splits the layers between processes (runtime/pipeline.h).
struct layer_span {
    int64_t begin = 0;
    int64_t end = -1;
    bool operator==(const layer_span &) const = default;
};

struct model_params {
    bool use_mmap = true;     // false: read the data section into memory instead of mapping it
    bool vocab_only = false;  // vocabulary, hyper-parameters and metadata only; no weights
    // Repack the matrices the CPU kernels read faster interleaved (q4_0, q4_K, iq4_nl ...) into memory of
    // their own at load (same size as in the file); false keeps every weight in the mapping.
    bool repack = true;
    // Called with the fraction loaded (0..1, reaching 1 at the end); returning false cancels
    // the load (model::load then throws load_cancelled).
    std::function<bool(float progress)> progress;
    // Non-empty: the GGUF file's bytes, already in memory (a model built into the executable);
    // the path passed to load only names it. The bytes are copied.
    std::span<const uint8_t> memory;
    // The blocks this process computes (default: all). A stage without the first block takes the
    // previous stage's hidden states instead of token ids; one without the last block hands its
    // hidden states on instead of computing logits. Only the stage's weights are repacked and read
    // (the rest of the file stays mapped, not resident), and its KV cache holds only its layers.
    layer_span layers;
    // Non-zero: the most bytes this process's weights (its stage's tensors) may take; a larger
    // model or stage fails to load with an error saying what it needs (split it across ranks).
    size_t max_weight_bytes = 0;
    // Offload (the reference engine's -ngl): the weights of the stage's last n_gpu_layers blocks go
    // into memory of offload_device (one buffer per block), and so do the KV cache rows of those
    // blocks; n_gpu_layers beyond the stage's blocks offloads the output head too (its norm and
    // matrix, unless the matrix is the token embedding). The token embedding stays in host memory.
    // Offloaded weights are not repacked (the repacked layouts are the CPU kernels' own).
    device *offload_device = nullptr;
    int32_t n_gpu_layers = 0;
};

// The weights of one block (layer). Optional tensors are null when the architecture or the file
// has none. Shapes use the ne[0]-innermost order; mul_mat(w, x) maps [k] to [m] for w [k, m].
struct layer_weights {
    tensor *attn_norm = nullptr;         // [n_embd]
    tensor *attn_norm_b = nullptr;       // [n_embd] LayerNorm bias (starcoder2)
    tensor *wq = nullptr;                // [n_embd, n_embd_head_k * n_head]
    tensor *wk = nullptr;                // [n_embd, n_embd_head_k * n_head_kv]
    tensor *wv = nullptr;                // [n_embd, n_embd_head_v * n_head_kv]
    tensor *wo = nullptr;                // [n_embd_head_v * n_head, n_embd]
    tensor *bo = nullptr;                // [n_embd] (starcoder2)
    tensor *bq = nullptr;                // [n_embd_head_k * n_head] (qwen2)
    tensor *bk = nullptr;                // [n_embd_head_k * n_head_kv] (qwen2)
    tensor *bv = nullptr;                // [n_embd_head_v * n_head_kv] (qwen2)
    tensor *attn_q_norm = nullptr;       // [n_embd_head_k] per-head RMS norm weight (qwen3)
    tensor *attn_k_norm = nullptr;       // [n_embd_head_k] (qwen3); olmo2: [n_embd_k_gqa], whole rows
    tensor *wqkv = nullptr;              // [n_embd, n_q + n_k + n_v]: Q, K and V fused (phi2, phi3)
    tensor *bqkv = nullptr;              // [n_q + n_k + n_v] (phi2)
    tensor *attn_post_norm = nullptr;    // [n_embd] norm of the attention output (olmo2, gemma2, bert)
    tensor *attn_post_norm_b = nullptr;  // [n_embd] (bert)
    tensor *attn_sinks = nullptr;        // [n_head] each head's sink logit (gpt-oss; see ops.h attention)
    tensor *ffn_norm = nullptr;          // [n_embd]
    tensor *ffn_norm_b = nullptr;        // [n_embd] (starcoder2)
    tensor *ffn_gate = nullptr;          // [n_embd, n_ff]; absent: a plain GELU FFN down(gelu(up(x)))
    tensor *ffn_up = nullptr;      // [n_embd, n_ff]; phi3: [n_embd, 2 n_ff], the gate rows then the up rows
    tensor *ffn_down = nullptr;    // [n_ff, n_embd]
    tensor *ffn_up_b = nullptr;    // [n_ff] (starcoder2)
    tensor *ffn_down_b = nullptr;  // [n_embd] (starcoder2)
    tensor *ffn_post_norm = nullptr;    // [n_embd] norm of the FFN output (olmo2, gemma2, bert)
    tensor *ffn_post_norm_b = nullptr;  // [n_embd] (bert)
    // mixture of experts (in place of ffn_gate / ffn_up / ffn_down; see graph_moe.h)
    tensor *ffn_gate_inp = nullptr;        // [n_embd, n_expert] the router
    tensor *ffn_gate_exps = nullptr;       // [n_embd, n_ff_exp, n_expert]
    tensor *ffn_up_exps = nullptr;         // [n_embd, n_ff_exp, n_expert]
    tensor *ffn_down_exps = nullptr;       // [n_ff_exp, n_embd, n_expert]
    tensor *ffn_gate_up_exps = nullptr;    // [n_embd, 2 n_ff_exp, n_expert]: gate rows, then up (gemma4)
    tensor *ffn_gate_inp_shexp = nullptr;  // [n_embd] the shared expert's gate (qwen2moe)
    tensor *ffn_gate_shexp = nullptr;      // [n_embd, n_ff_shexp]
    tensor *ffn_up_shexp = nullptr;        // [n_embd, n_ff_shexp]
    tensor *ffn_down_shexp = nullptr;      // [n_ff_shexp, n_embd]
    tensor *ffn_exp_probs_b = nullptr;     // [n_expert] expert selection bias (deepseek2, sigmoid gating)
    tensor *ffn_gate_inp_b = nullptr;      // [n_expert] the router's bias (gpt-oss)
    tensor *ffn_gate_exps_b = nullptr;     // [n_ff_exp, n_expert] each expert's biases (gpt-oss)
    tensor *ffn_up_exps_b = nullptr;       // [n_ff_exp, n_expert]
    tensor *ffn_down_exps_b = nullptr;     // [n_embd, n_expert]
    // multi-head latent attention (deepseek2): Q through a low-rank bottleneck, K and V from a
    // compressed latent plus one rotary key shared by all heads
    tensor *wq_a = nullptr;            // [n_embd, q_lora_rank]
    tensor *attn_q_a_norm = nullptr;   // [q_lora_rank]
    tensor *wq_b = nullptr;            // [q_lora_rank, n_head * n_embd_head_k]
    tensor *wkv_a_mqa = nullptr;       // [n_embd, kv_lora_rank + n_rot]: the latent, then the rope key
    tensor *attn_kv_a_norm = nullptr;  // [kv_lora_rank]
    tensor *wkv_b = nullptr;           // [kv_lora_rank, n_head * (n_embd_head_k - n_rot + n_embd_head_v)]
    // state-space mixer (mamba) in place of attention and FFN
    tensor *ssm_in = nullptr;        // [n_embd, 2 d_inner]: x, then the gate z
    tensor *ssm_conv1d = nullptr;    // [d_conv, d_inner]
    tensor *ssm_conv1d_b = nullptr;  // [d_inner]
    tensor *ssm_x = nullptr;         // [d_inner, dt_rank + 2 d_state]: dt, B, C
    tensor *ssm_dt = nullptr;        // [dt_rank, d_inner]
    tensor *ssm_dt_b = nullptr;      // [d_inner]
    tensor *ssm_a = nullptr;         // [d_state, d_inner]: -exp(A_log)
    tensor *ssm_d = nullptr;         // [d_inner]
    tensor *ssm_out = nullptr;       // [d_inner, n_embd]
    // Mamba-2 (mamba2, granitehybrid) uses ssm_in [n_embd, 2 d_inner + 2 n_group d_state + n_head] (z,
    // then x, B, C, then dt), ssm_conv1d(_b) over x, B, C, ssm_dt_b [n_head], ssm_a and ssm_d [1, n_head],
    // ssm_out, and this norm of y * silu(z) over groups of d_inner / n_group channels:
    tensor *ssm_norm = nullptr;  // [d_inner / n_group, n_group]
    // The gated delta net (qwen3next, qwen35, qwen35moe linear-attention layers) uses wqkv [n_embd,
    // 2 key_dim + value_dim] (q, k, v before their convolution), ssm_conv1d, ssm_dt_b and ssm_a [n_head_v],
    // ssm_norm [head_v] (over each value head), ssm_out, and:
    tensor *wqkv_gate = nullptr;       // [n_embd, value_dim]: z of the gated norm ("attn_gate")
    tensor *ssm_beta_alpha = nullptr;  // [n_embd, 2 n_head_v] (qwen3next "ssm_ba": per k head, β then α)
    tensor *ssm_beta = nullptr;        // [n_embd, n_head_v] (qwen35: beta and alpha apart)
    tensor *ssm_alpha = nullptr;       // [n_embd, n_head_v]
    // short convolution (lfm2) in place of attention: in_proj's rows are B, C and x; the block is
    // out_proj(C * conv(B * x)) with a causal depthwise convolution of width l_cache
    tensor *shortconv_in_proj = nullptr;   // [n_embd, 3 n_embd]
    tensor *shortconv_conv = nullptr;      // [l_cache, n_embd]
    tensor *shortconv_out_proj = nullptr;  // [n_embd, n_embd]
    // gemma4: the per-layer input's gate and projection (see model_weights::per_layer_tok_embd), the
    // block output's scale, and a MoE block's router input scale, its norms around the dense FFN
    // (ffn_norm, then ffn_post_norm_1) and the experts (ffn_pre_norm_2, ffn_post_norm_2) and each
    // expert's output scale
    tensor *per_layer_inp_gate = nullptr;   // [n_embd, n_embd_per_layer]
    tensor *per_layer_proj = nullptr;       // [n_embd_per_layer, n_embd]
    tensor *per_layer_post_norm = nullptr;  // [n_embd]
    tensor *layer_out_scale = nullptr;      // [1]
    tensor *ffn_gate_inp_s = nullptr;       // [n_embd]
    tensor *ffn_pre_norm_2 = nullptr;       // [n_embd]
    tensor *ffn_post_norm_1 = nullptr;      // [n_embd]
    tensor *ffn_post_norm_2 = nullptr;      // [n_embd]
    tensor *ffn_down_exps_s = nullptr;      // [n_expert]
};

struct model_weights {
    tensor *tok_embd = nullptr;       // [n_embd, n_vocab]
    tensor *output_norm = nullptr;    // [n_embd]
    tensor *output_norm_b = nullptr;  // [n_embd] LayerNorm bias (starcoder2)
    tensor *output = nullptr;         // [n_embd, n_vocab]; == tok_embd when tied
    tensor *output_b = nullptr;       // [n_vocab] (phi2)
    tensor *type_embd = nullptr;      // [n_embd, n_types] token-type embeddings (bert; type 0 used)
    tensor *pos_embd = nullptr;       // [n_embd, n_ctx_train] learned position embeddings (bert)
    tensor *tok_norm = nullptr;       // [n_embd] norm of the input embeddings (bert)
    tensor *tok_norm_b = nullptr;
    // A reranker's classification head (bert with pooling rank): out · tanh(cls · x + cls_b) + out_b
    tensor *cls = nullptr;         // [n_embd, n_embd] "cls.weight"
    tensor *cls_b = nullptr;       // [n_embd]
    tensor *cls_out = nullptr;     // [n_embd, n_cls_out] "cls.output.weight"
    tensor *cls_out_b = nullptr;   // [n_cls_out]
    tensor *rope_freqs = nullptr;  // optional f32 [n_rot / 2] frequency factors (Llama 3.1)
    // gemma4's per-layer inputs (hparams n_embd_per_layer): per token n_layer vectors looked up here,
    // plus a projection of the embeddings normed by per_layer_proj_norm
    tensor *per_layer_tok_embd = nullptr;    // [n_embd_per_layer * n_layer, n_vocab]
    tensor *per_layer_model_proj = nullptr;  // [n_embd, n_embd_per_layer * n_layer]
    tensor *per_layer_proj_norm = nullptr;   // [n_embd_per_layer]
    std::vector<layer_weights> layers;
};

// The shape of one ubatch's graph. Two steps with equal shapes can share one graph (only the
// inputs change), which is what graph reuse checks.
struct graph_shape {
    int64_t n_tokens = 0;     // tokens in the ubatch
    int64_t n_outputs = 0;    // rows of logits computed (>= 1)
    int64_t n_kv = 0;         // cache cells attended over: [0, n_kv)
    bool embd_input = false;  // embeddings instead of token ids
    int64_t n_seqs = 0;       // recurrent models: the sequences whose states the ubatch advances
    bool operator==(const graph_shape &) const = default;
};

// The KV cache tensors of one layer, whole (every cell). The graph writes the new rows with
// set_rows and attends over views of the first n_kv cells.
struct kv_layer {
    tensor *k = nullptr;  // f16/f32 [n_embd_k_gqa, kv_size]
    tensor *v = nullptr;  // f16/f32 [n_embd_v_gqa, kv_size]
};

// The recurrent states of one layer of a state-space model, one row per sequence slot. The graph
// gathers its sequences' rows, advances them and writes them back with set_rows.
struct recurrent_layer {
    tensor *conv = nullptr;  // f32 [(d_conv - 1) * d_inner, n_slots]: the last inputs of the convolution
    tensor *ssm = nullptr;   // f32 [d_state * d_inner, n_slots]: the scan's state
};

struct graph_build_params {
    graph_shape shape;
    std::span<const kv_layer> kv;                // one per layer (empty for a recurrent model)
    std::span<const recurrent_layer> recurrent;  // one per layer of a recurrent model
    std::span<const lora_use> loras;             // adapters applied to the products of the weights they adapt
};

// The tensors of a built graph that the caller fills before each compute (all flagged as inputs)
// and the one it reads after (flagged as output).
struct graph_inputs {
    tensor *tokens = nullptr;   // i32 [n_tokens] (token input)
    tensor *embd = nullptr;     // f32 [n_embd, n_tokens] (embedding input)
    tensor *hidden = nullptr;   // f32 [n_embd, n_tokens]: the previous stage's output (not the first stage)
    tensor *pos = nullptr;      // i32 [n_tokens]
    tensor *kv_idxs = nullptr;  // i64 [n_tokens]: the cache cell each token is written to
    tensor *kq_mask = nullptr;  // f32 [n_kv, n_tokens]: 0 visible, -INF hidden
    tensor *kq_mask_swa = nullptr;   // the same within hparams.n_swa positions (windows or chunks: swa_type)
    tensor *kv_pos = nullptr;        // i32 [n_kv]: the position of each cache cell (-1: empty)
    tensor *attn_scale = nullptr;    // f32 [1, 1, n_tokens]: hparams.attn_temperature of each position
    tensor *out_ids = nullptr;       // i32 [n_outputs]: rows of the ubatch whose logits are computed
    tensor *rs_slots = nullptr;      // i32 [n_seqs]: the state row each sequence reads (recurrent models)
    tensor *rs_slots_out = nullptr;  // i32 [n_seqs]: the state row each sequence's new state goes to
    tensor *rs_columns = nullptr;    // i32 [2, n_seqs]: both, per sequence (the in-place ssm ops' rows)
    tensor *rs_token_seq = nullptr;  // i32 [n_tokens]: each token's sequence, an index into rs_slots
    tensor *lora_scales = nullptr;   // f32 [n_adapters]: each LoRA adapter's scale (when one applies)
    // f32 [n_vocab, n_outputs] (output); an encoder's hidden states [n_embd, ...]; a stage before the
    // last: its hidden states [n_embd, n_tokens], every token's, for the next stage
    tensor *logits = nullptr;
};

// The rotary dims [offset, offset + n_dims) of every head of a cached key row.
struct cached_k_rope {
    int64_t offset = 0;
    int64_t n_dims = 0;
};

// The inputs of the graph that re-rotates cached keys (model::build_k_shift).
struct k_shift_inputs {
    tensor *cells = nullptr;   // i32 [n_cells]: the cache cells whose keys are rotated
    tensor *deltas = nullptr;  // i32 [n_cells]: by how many positions each one moved
};

class model {
  public:
    // Opens the GGUF file (or, given the first part of a split set, every part: gguf_set::open), picks
    // the architecture by general.architecture, reads hyper-parameters, the vocabulary and (unless
    // vocab_only) the weights, pointing them into the file mappings.
    // Throws weft::error naming the file and the problem (unknown architecture with the supported
    // list, missing tensor, shape mismatch ...), load_cancelled when the callback says stop.
    static std::unique_ptr<model> load(const std::string &path, const model_params &params = {});
    ~model();
    model(const model &) = delete;
    model &operator=(const model &) = delete;

    const std::string &path() const { return path_; }
    const std::string &arch_name() const { return hparams_.arch; }
    const model_hparams &hparams() const { return hparams_; }
    const weft::vocab &vocab() const { return *vocab_; }
    const model_weights &weights() const { return weights_; }
    // The model's GGUF files: one, or every part of a split set (metadata in files().metadata()).
    const gguf_set &files() const { return *files_; }
    bool vocab_only() const { return vocab_only_; }
    // tokenizer.chat_template, when the file has one
    std::optional<std::string> chat_template() const;
    // general.name, or the file name
    std::string name() const;

    int64_t n_params() const;       // weight elements
    size_t n_weight_bytes() const;  // bytes of the weights
    // "llama, 22 layers, n_embd 2048, 32 heads (4 KV), n_ff 5632, vocab 32000, 1.10 B params, Q4_0"
    std::string describe() const;
    double load_ms() const { return load_ms_; }
    // The blocks this model computes ([0, n_layer) unless model_params::layers chose a stage), and
    // whether it begins with the token embedding / ends with the logits.
    layer_span layers() const { return layers_; }
    bool first_stage() const { return layers_.begin == 0; }
    bool last_stage() const { return layers_.end == hparams_.n_layer; }
    // The weights this stage reads: its blocks', and the embedding / output ones where it has them.
    std::vector<const tensor *> stage_tensors() const;
    // Offload (model_params::offload_device): the device (null: everything in host memory), whether
    // block il's weights (and so its KV cache) / the output head are there, the blocks offloaded.
    device *offload_device() const { return offloaded_blocks_ > 0 || output_offloaded_ ? offload_ : nullptr; }
    bool layer_offloaded(int64_t il) const {
        return offloaded_blocks_ > 0 && il >= layers_.end - offloaded_blocks_ && il < layers_.end;
    }
    bool output_offloaded() const { return output_offloaded_; }
    int64_t n_offloaded_layers() const { return offloaded_blocks_; }

    // Records the graph of one ubatch into ctx (a no_alloc arena) and g; returns its inputs.
    // Every intermediate is named "<what>-<layer>".
    graph_inputs build_graph(context &ctx, graph &g, const graph_build_params &p) const;
    // Tensors (upper bound) that build_graph creates for one ubatch, to size the arena.
    size_t graph_tensor_budget() const;

    // Whether a cached key can move to another position (KV cache seq_add / seq_div): true where the
    // position is a RoPE rotation (moving is one more rotation), false where it is baked in
    // otherwise (bert's learned position embeddings).
    bool can_shift_kv() const;
    // Records into ctx (no_alloc) and g the graph that rotates, in every layer of kv, the cached keys
    // of n_cells cells by their position moves with this model's rope settings (NeoX or normal
    // pairs, frequency base and scale, YaRN, frequency factors, only the rotary dims) and writes them
    // back in place. Throws weft::error when !can_shift_kv().
    k_shift_inputs build_k_shift(context &ctx, graph &g, std::span<const kv_layer> kv, int64_t n_cells) const;

  private:
    model();
    void offload(const model_params &params, const gguf_set &f);
    std::string path_;
    model_hparams hparams_;
    std::unique_ptr<gguf_set> files_;
    std::unique_ptr<weft::vocab> vocab_;
    std::unique_ptr<context> weights_ctx_;
    // host buffers over the mappings' data sections, one per file of a split set
    std::vector<std::unique_ptr<backend_buffer>> weights_buffers_;
    std::unique_ptr<backend_buffer> repacked_buffer_;  // weights repacked at load (model_params::repack)
    std::vector<std::unique_ptr<backend_buffer>> offload_buffers_;  // one per offloaded block (+ output)
    device *offload_ = nullptr;
    int64_t offloaded_blocks_ = 0;
    bool output_offloaded_ = false;
    model_weights weights_;
    std::unique_ptr<architecture> arch_;
    bool vocab_only_ = false;
    double load_ms_ = 0.0;
    layer_span layers_;
};

// The architectures model::load accepts, as their general.architecture names.
std::vector<std::string> supported_architectures();

}  // namespace weft
