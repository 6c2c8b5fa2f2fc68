// weft/model/synth.h — synthetic models: random weights in a real layout, SPM byte-fallback vocabulary.
#pragma once

#include <cstdint>
#include <string>

#include "weft/core/type.h"

namespace weft {

class gguf_writer;

struct synth_spec {
    std::string arch = "llama";  // any architecture weft runs (llama, qwen2moe, qwen3moe, deepseek2
                                 // and glm4moe take --experts; bert: a WordPiece vocabulary, mean pooling)
    int64_t n_embd = 64;
    int64_t n_layer = 2;
    int64_t n_head = 4;
    int64_t n_head_kv = 2;
    int64_t head_dim = 0;  // 0: n_embd / n_head
    int64_t n_ff = 128;
    int64_t n_vocab = 300;    // >= 260: <unk>, <s>, </s>, 256 byte tokens, then letter pieces
    int64_t n_ctx = 2048;     // <arch>.context_length
    dtype type = dtype::f32;  // of the matrices; norms and biases stay f32
    uint32_t seed = 42;
    bool tied = false;  // no output.weight
    // fill-in-the-middle tokens at the end of the vocabulary (Qwen2.5-Coder's <|fim_prefix|>,
    // <|fim_suffix|>, <|fim_middle|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>), for /infill
    bool fim = false;
    // gemma2, gemma3, phi3: <arch>.attention.sliding_window; -1: 4 (shorter than the tests' sequences),
    // 0: no window (not gemma3). The 2026 reference ignores phi3's window (its "Phi SWA is currently
    // disabled"): a phi3 file checked against it is written with 0.
    int64_t sliding_window = -1;
    // Mixture of experts of n_ff rows each (llama: 0 experts is a dense FFN; qwen2moe, qwen3moe, deepseek2,
    // glm4moe: 0 means 4, and the shared expert has n_ff rows too; deepseek2's and glm4moe's first layer
    // is dense); 0 used means 2 (at most n_expert).
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    // The blocks' output projections (attn_output, ffn_down and the experts') drawn this many times
    // smaller: below 1 every block is a small correction to the residual stream, so a model of the
    // same seed with fewer layers predicts mostly what the whole one does (a draft that agrees, for
    // speculative decoding benchmarks).
    float block_scale = 1.0f;
    // mamba: the state-space mixer's sizes (d_inner is 2 n_embd, dt_rank ceil(n_embd / 16), as the
    // published models have them); n_head, n_head_kv and n_ff are not used.
    int64_t ssm_d_state = 16;
    int64_t ssm_d_conv = 4;
    bool ssm_dt_b_c_rms = false;  // mamba.ssm.dt_b_c_rms (Falcon-Mamba's RMS-normed dt, B, C)
    // bert: a reranker (pooling rank, the classification head cls + cls.output, one label)
    bool reranker = false;
};

// The architectures synth writes, comma-separated ("llama, qwen2, ..."), for help texts and checks.
std::string synth_architecture_names();
// Validates the spec (known arch, positive sizes, GQA divisibility, rows a multiple of the type's
// block); throws weft::error naming the problem.
void synth_check(const synth_spec &s);
// Sets the metadata and registers every tensor in w; each tensor's values are generated (and
// quantized) only while w.write() streams it out, one tensor at a time.
void synth_fill_writer(const synth_spec &s, gguf_writer &w);
// synth_check, synth_fill_writer and an atomic write to path; returns the number of parameters.
int64_t synth_write(const synth_spec &s, const std::string &path);
// A random LoRA adapter (general.type "adapter", adapter.lora.alpha) for the model s describes: an f32
// pair of the given rank for every block matrix; written atomically to path. Returns the pairs.
int64_t synth_lora_write(const synth_spec &s, int64_t rank, float alpha, const std::string &path);

}  // namespace weft
