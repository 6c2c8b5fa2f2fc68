// src/model/synth.cpp — synthetic models: SPM byte-fallback vocabulary, streamed random weights.
#include "weft/model/synth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/quant/quant.h"

namespace weft {

namespace {

// The effective head size of a spec.
int64_t head_dim_of(const synth_spec &s) {
    if (s.head_dim > 0) return s.head_dim;
    return s.n_head > 0 && s.n_embd % s.n_head == 0 ? s.n_embd / s.n_head : 0;
}

// SplitMix64: a fast, well-mixed generator; every tensor gets its own stream from (seed, name).
struct splitmix64 {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return float(next() >> 40) * (1.0f / float(1ull << 24)) * 2.0f - 1.0f; }  // [-1, 1)
};

uint64_t name_hash(const std::string &s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// An SPM ("llama") vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then "▁" and pieces built
// from letters so that merges exist for them; any text tokenizes (bytes fall back).
struct synth_vocab {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
};

// extra_control: control tokens that end the vocabulary in place of its last pieces (phi3's
// "<|endoftext|>": the reference looks it up by name in every model named phi3 and refuses a
// vocabulary without it).
synth_vocab make_vocab(int64_t n_vocab, const std::vector<std::string> &extra_control = {}) {
    synth_vocab v;
    auto push = [&](const std::string &s, float score, int32_t type) {
        v.tokens.push_back(s);
        v.scores.push_back(score);
        v.types.push_back(type);
    };
    push("<unk>", 0.0f, 2);
    push("<s>", 0.0f, 3);
    push("</s>", 0.0f, 3);
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        push(buf, 0.0f, 6);
    }
    const std::string space = "\xE2\x96\x81";  // U+2581, SPM's word-start marker
    std::unordered_set<std::string> seen(v.tokens.begin(), v.tokens.end());
    std::vector<std::string> pieces = {space};
    const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
    const std::string others = "ETAOINSHRDLCUMWFGYPBVKJXQZ0123456789.,!?'\"-:;()";
    for (char c : letters) pieces.push_back(std::string(1, c)), pieces.push_back(space + c);
    for (char c : others) pieces.push_back(std::string(1, c)), pieces.push_back(space + c);
    for (char a : letters)
        for (char b : letters) pieces.push_back(std::string{a, b}), pieces.push_back(space + a + b);
    for (char a : letters)
        for (char b : letters)
            for (char c : letters)
                pieces.push_back(std::string{a, b, c}), pieces.push_back(space + a + b + c);
    float score = -1.0f;
    for (const std::string &p : pieces) {
        if (int64_t(v.tokens.size()) >= n_vocab) break;
        if (!seen.insert(p).second) continue;
        push(p, score, 1);
        score -= 1.0f;
    }
    for (int64_t i = 0; int64_t(v.tokens.size()) < n_vocab; ++i) {  // beyond the letter pieces
        const std::string p = space + "w" + std::to_string(i);
        if (!seen.insert(p).second) continue;
        push(p, score, 1);
        score -= 1.0f;
    }
    for (size_t i = 0; i < extra_control.size(); ++i) {
        const size_t at = v.tokens.size() - extra_control.size() + i;
        v.tokens[at] = extra_control[i];
        v.scores[at] = 0.0f;
        v.types[at] = 3;
    }
    return v;
}

// The experts of a spec: none (a dense FFN), or n_expert of which n_used per token.
struct synth_moe {
    int64_t n_expert = 0, n_used = 0;
    bool shared = false;       // a shared expert (qwen2moe, deepseek2)
    bool shared_gate = false;  // scaled by its sigmoid gate (qwen2moe)
    int64_t dense_lead = 0;    // leading layers with a dense FFN (deepseek2, glm4moe: 1)
    // Every step-th layer has the experts, the others a dense FFN (llama4: 2, Maverick's interleave;
    // its dense FFNs twice as wide as the experts, as the published models have them).
    int64_t step = 1;
    bool routed(int64_t il) const { return n_expert > 0 && il >= dense_lead && (il + 1) % step == 0; }
};

// The dense FFN's width of a spec (feed_forward_length): llama4's is twice its experts'.
int64_t dense_ff_of(const synth_spec &s) {
    return s.arch == "llama4" ? 2 * s.n_ff : s.n_ff;
}

synth_moe moe_of(const synth_spec &s) {
    synth_moe m;
    if (s.arch == "llama4") {  // a shared expert beside the routed ones, no gate of its own
        m.shared = true;
        m.step = 2;
        m.n_expert = s.n_expert > 0 ? s.n_expert : 4;
        m.n_used = s.n_expert_used > 0 ? s.n_expert_used : 1;  // Scout and Maverick pick one
        return m;
    }
    const bool v3_routing = s.arch == "deepseek2" || s.arch == "glm4moe";
    const bool delta_net_moe = s.arch == "qwen3next" || s.arch == "qwen35moe";
    m.shared = s.arch == "qwen2moe" || v3_routing || delta_net_moe;
    m.shared_gate = s.arch == "qwen2moe" || delta_net_moe;
    m.dense_lead = v3_routing ? 1 : 0;
    m.n_expert =
        s.n_expert > 0 ? s.n_expert : (m.shared || s.arch == "qwen3moe" || s.arch == "gpt-oss" ? 4 : 0);
    if (m.n_expert > 0) m.n_used = s.n_expert_used > 0 ? s.n_expert_used : std::min<int64_t>(2, m.n_expert);
    return m;
}

// One tensor to write: its shape and how its values are drawn.
struct synth_tensor {
    std::string name;
    std::vector<int64_t> ne;
    dtype type;
    float center = 0.0f;  // values are center + amplitude * U(-1, 1)
    float amplitude = 0.0f;
    // instead: -(i0 + 1) along each row (a state-space model's A = -exp(log(1 .. d_state)), the
    // published models' initialization)
    bool negative_ramp = false;
    std::vector<float> values = {};  // instead: exactly these (gemma4's rope_freqs)
};

void fill_tensor(const synth_tensor &t, uint32_t seed, uint8_t *dst, size_t nbytes) {
    splitmix64 rng{(uint64_t(seed) << 32) ^ name_hash(t.name)};
    const int64_t n_per_row = t.ne[0];
    int64_t n_rows = 1;
    for (size_t i = 1; i < t.ne.size(); ++i) n_rows *= t.ne[i];
    const int64_t chunk_rows = std::max<int64_t>(1, (1 << 16) / n_per_row);
    std::vector<float> rows(size_t(chunk_rows * n_per_row));
    const size_t row_bytes = row_size(t.type, n_per_row);
    WEFT_ASSERT(row_bytes * size_t(n_rows) == nbytes);
    WEFT_ASSERT(t.values.empty() || int64_t(t.values.size()) == n_per_row * n_rows);
    for (int64_t r = 0; r < n_rows; r += chunk_rows) {
        const int64_t nr = std::min(chunk_rows, n_rows - r);
        for (int64_t i = 0; i < nr * n_per_row; ++i)
            rows[size_t(i)] = !t.values.empty() ? t.values[size_t(r * n_per_row + i)]
                              : t.negative_ramp ? -float(i % n_per_row + 1)
                                                : t.center + t.amplitude * rng.uniform();
        uint8_t *out = dst + size_t(r) * row_bytes;
        if (t.type == dtype::f32)
            std::memcpy(out, rows.data(), size_t(nr * n_per_row) * sizeof(float));
        else
            quantize_rows(t.type, rows.data(), out, nr, n_per_row);
    }
}

// What an architecture's files hold beyond the Llama set (attention and FFN norms, Q/K/V, output
// projection, gated FFN, RMS norms).
struct synth_arch {
    const char *name;
    bool layer_norm = false;     // LayerNorm (epsilon key) instead of RMS
    bool norm_bias = false;      // LayerNorm biases
    bool qkv_bias = false;       // biases on Q, K, V (or the fused QKV)
    bool fused_qkv = false;      // attn_qkv instead of attn_q / attn_k / attn_v
    bool out_bias = false;       // attn_output.bias
    bool head_qk_norm = false;   // per-head Q/K RMS norms (qwen3)
    bool row_qk_norm = false;    // whole-row Q/K RMS norms (olmo2)
    bool attn_norm = true;       // a norm before the attention
    bool ffn_norm = true;        // a norm before the FFN (absent: parallel or post-norm blocks)
    bool post_norms = false;     // post_attention_norm and post_ffw_norm
    bool ffn_gate = true;        // a separate ffn_gate
    bool fused_gate_up = false;  // ffn_up holds the gate rows then the up rows
    bool ffn_bias = false;       // biases on ffn_up and ffn_down
    bool output_bias = false;    // output.bias
    bool partial_rope = false;   // RoPE over half of each head
    bool latent_attn = false;    // multi-head latent attention (deepseek2; see latent_of)
    // DeepSeek-V3's routing: sigmoid gating with a selection bias (exp_probs_b), renormalized and
    // scaled weights, one shared expert, a dense first layer (deepseek2, glm4moe)
    bool v3_routing = false;
    const char *ffn_norm_name = "ffn_norm";  // glm4moe calls its pre-FFN norm post_attention_norm
    bool attn_sinks = false;                 // a sink logit per head (gpt-oss)
    bool expert_biases = false;              // the router's bias and each expert's (gpt-oss)
    // No output.weight whatever the spec says: the reference ties the output to token_embd for
    // these families and refuses a file with a separate output matrix ("wrong number of tensors").
    bool always_tied = false;
    std::vector<std::string> extra_control_tokens = {};  // see make_vocab
};

// The shapes of multi-head latent attention in a synthetic deepseek2: K head = the spec's head size,
// half of it rotary, V head half of it; both LoRA ranks n_embd / 2; every head its own K and V.
struct synth_latent {
    int64_t head_k, head_v, n_rot, rank_q, rank_kv;
};

synth_latent latent_of(const synth_spec &s) {
    const int64_t hd = head_dim_of(s);
    return {hd, hd / 2, hd / 2, s.n_embd / 2, s.n_embd / 2};
}

const synth_arch synth_archs[] = {
    {.name = "llama"},
    {.name = "qwen2", .qkv_bias = true},
    {.name = "qwen3", .head_qk_norm = true},
    {.name = "granite"},
    {.name = "starcoder2",
     .layer_norm = true,
     .norm_bias = true,
     .qkv_bias = true,
     .out_bias = true,
     .ffn_gate = false,
     .ffn_bias = true},
    {.name = "gemma", .always_tied = true},
    {.name = "gemma2", .post_norms = true, .always_tied = true},
    {.name = "phi2",
     .layer_norm = true,
     .norm_bias = true,
     .qkv_bias = true,
     .fused_qkv = true,
     .out_bias = true,
     .ffn_norm = false,
     .ffn_gate = false,
     .ffn_bias = true,
     .output_bias = true,
     .partial_rope = true},
    {.name = "phi3",
     .fused_qkv = true,
     .ffn_gate = false,
     .fused_gate_up = true,
     .extra_control_tokens = {"<|endoftext|>"}},
    {.name = "olmo2", .row_qk_norm = true, .attn_norm = false, .ffn_norm = false, .post_norms = true},
    {.name = "command-r", .layer_norm = true, .ffn_norm = false, .always_tied = true},
    {.name = "qwen2moe", .qkv_bias = true},
    {.name = "deepseek2", .latent_attn = true, .v3_routing = true},
    {.name = "qwen3moe", .head_qk_norm = true},
    {.name = "gemma3", .head_qk_norm = true, .post_norms = true},
    {.name = "mamba"},                       // a state-space model: see plan_mamba_tensors
    {.name = "lfm2", .head_qk_norm = true},  // short convolutions and attention: see plan_lfm2_tensors
    {.name = "mamba2"},                      // Mamba-2 mixers: see plan_mamba2_tensors
    {.name = "granitehybrid"},               // Mamba-2 mixers and attention: see plan_granitehybrid_tensors
    {.name = "smollm3"},   // every fourth layer without RoPE: the reference's rule, no metadata
    {.name = "mistral3"},  // YaRN RoPE: see synth_fill_writer
    {.name = "llama4"},    // interleaved experts, NoPE and chunked layers: see moe_of and synth_fill_writer
    {.name = "gpt-oss",    // YaRN and windows on the even layers: see synth_fill_writer
     .qkv_bias = true,
     .out_bias = true,
     .ffn_norm_name = "post_attention_norm",
     .attn_sinks = true,
     .expert_biases = true},
    {.name = "glm4moe",
     .qkv_bias = true,
     .head_qk_norm = true,
     .partial_rope = true,
     .v3_routing = true,
     .ffn_norm_name = "post_attention_norm"},
    // gated delta nets and gated attention: see plan_delta_net_tensors
    {.name = "qwen3next", .head_qk_norm = true, .partial_rope = true},
    {.name = "qwen35", .head_qk_norm = true, .partial_rope = true},
    {.name = "qwen35moe", .head_qk_norm = true, .partial_rope = true},
    {.name = "gemma4"},  // windows, shared KV layers, per-layer inputs: see plan_gemma4_tensors
    {.name = "bert"},    // an encoder (embeddings; a reranker with --reranker): see plan_bert_tensors
};

const synth_arch *find_synth_arch(const std::string &name) {
    for (const synth_arch &a : synth_archs)
        if (name == a.name) return &a;
    return nullptr;
}

std::string synth_arch_names() {
    std::string names;
    for (const synth_arch &a : synth_archs) names += std::string(names.empty() ? "" : ", ") + a.name;
    return names;
}

// The state-space mixer's sizes of a mamba spec.
struct synth_ssm {
    int64_t d_inner, d_state, d_conv, dt_rank;
};
synth_ssm ssm_of(const synth_spec &s) {
    return {2 * s.n_embd, s.ssm_d_state, s.ssm_d_conv, (s.n_embd + 15) / 16};
}

// Mamba: per block a norm and the mixer. The step's bias puts softplus(dt) around 0.01 (the published
// models draw it in [0.001, 0.1]) and A is -(1 .. d_state), so the states decay at realistic rates.
std::vector<synth_tensor> plan_mamba_tensors(const synth_spec &s) {
    const synth_ssm m = ssm_of(s);
    const auto f32 = dtype::f32;
    auto amp = [](int64_t fan_in) { return std::sqrt(3.0f / float(fan_in)); };
    std::vector<synth_tensor> ts;
    ts.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}, s.type, 0.0f, 1.0f});
    ts.push_back({"output_norm.weight", {s.n_embd}, f32, 1.0f, 0.2f});
    if (!s.tied) ts.push_back({"output.weight", {s.n_embd, s.n_vocab}, s.type, 0.0f, amp(s.n_embd)});
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        ts.push_back({p + "attn_norm.weight", {s.n_embd}, f32, 1.0f, 0.2f});
        ts.push_back({p + "ssm_in.weight", {s.n_embd, 2 * m.d_inner}, s.type, 0.0f, amp(s.n_embd)});
        ts.push_back({p + "ssm_conv1d.weight", {m.d_conv, m.d_inner}, f32, 0.0f, amp(m.d_conv)});
        ts.push_back({p + "ssm_conv1d.bias", {m.d_inner}, f32, 0.0f, 0.1f});
        ts.push_back(
            {p + "ssm_x.weight", {m.d_inner, m.dt_rank + 2 * m.d_state}, s.type, 0.0f, amp(m.d_inner)});
        ts.push_back({p + "ssm_dt.weight", {m.dt_rank, m.d_inner}, f32, 0.0f, amp(m.dt_rank)});
        ts.push_back({p + "ssm_dt.bias", {m.d_inner}, f32, -4.6f, 1.0f});
        synth_tensor a{p + "ssm_a", {m.d_state, m.d_inner}, f32};
        a.negative_ramp = true;
        ts.push_back(a);
        ts.push_back({p + "ssm_d", {m.d_inner}, f32, 1.0f, 0.2f});
        ts.push_back(
            {p + "ssm_out.weight", {m.d_inner, s.n_embd}, s.type, 0.0f, amp(m.d_inner) * s.block_scale});
    }
    return ts;
}

// The hybrids' layout: attention on every period-th layer (period - 1, 2 period - 1 ...), and on the
// last one of a model of fewer than period layers; recurrent layers elsewhere.
bool hybrid_attention_layer(const synth_spec &s, int64_t il, int64_t period) {
    return il % period == period - 1 || (s.n_layer < period && il == s.n_layer - 1);
}

constexpr int64_t lfm2_l_cache = 3;  // the published models' convolution width
constexpr int64_t lfm2_period = 3;   // attention on layers 2, 5, 8 ... as LFM2-350M/1.2B place theirs

// LFM2: per block a norm, a short convolution (in_proj to B, C, x; the width-3 kernel; out_proj) or
// attention with per-head Q/K norms, then a norm and a SwiGLU FFN; the final norm is token_embd_norm.
std::vector<synth_tensor> plan_lfm2_tensors(const synth_spec &s) {
    const int64_t hd = head_dim_of(s);
    const auto f32 = dtype::f32;
    auto amp = [](int64_t fan_in) { return std::sqrt(3.0f / float(fan_in)); };
    std::vector<synth_tensor> ts;
    auto matrix = [&](const std::string &name, int64_t in, int64_t out, float scale = 1.0f) {
        ts.push_back({name + ".weight", {in, out}, s.type, 0.0f, amp(in) * scale});
    };
    ts.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}, s.type, 0.0f, 1.0f});
    ts.push_back({"token_embd_norm.weight", {s.n_embd}, f32, 1.0f, 0.2f});
    if (!s.tied) matrix("output", s.n_embd, s.n_vocab);
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        ts.push_back({p + "attn_norm.weight", {s.n_embd}, f32, 1.0f, 0.2f});
        if (hybrid_attention_layer(s, il, lfm2_period)) {
            matrix(p + "attn_q", s.n_embd, hd * s.n_head);
            matrix(p + "attn_k", s.n_embd, hd * s.n_head_kv);
            matrix(p + "attn_v", s.n_embd, hd * s.n_head_kv);
            ts.push_back({p + "attn_q_norm.weight", {hd}, f32, 1.0f, 0.2f});
            ts.push_back({p + "attn_k_norm.weight", {hd}, f32, 1.0f, 0.2f});
            matrix(p + "attn_output", hd * s.n_head, s.n_embd, s.block_scale);
        } else {
            ts.push_back(
                {p + "shortconv.conv.weight", {lfm2_l_cache, s.n_embd}, f32, 0.0f, amp(lfm2_l_cache)});
            matrix(p + "shortconv.in_proj", s.n_embd, 3 * s.n_embd);
            matrix(p + "shortconv.out_proj", s.n_embd, s.n_embd, s.block_scale);
        }
        ts.push_back({p + "ffn_norm.weight", {s.n_embd}, f32, 1.0f, 0.2f});
        matrix(p + "ffn_gate", s.n_embd, s.n_ff);
        matrix(p + "ffn_up", s.n_embd, s.n_ff);
        matrix(p + "ffn_down", s.n_ff, s.n_embd, s.block_scale);
    }
    return ts;
}

// A Mamba-2 mixer's sizes in a synthetic model: d_inner 2 n_embd in heads of 16 channels, one group
// (Mamba-2's and Granite 4's default), the spec's state size and convolution width.
struct synth_mamba2 {
    int64_t d_inner, n_head, n_group, d_state, d_conv;
    int64_t conv_channels() const { return d_inner + 2 * n_group * d_state; }
};
synth_mamba2 mamba2_of(const synth_spec &s) {
    return {2 * s.n_embd, 2 * s.n_embd / 16, 1, s.ssm_d_state, s.ssm_d_conv};
}

// The weights of one Mamba-2 mixer (prefix "blk.N."): A = -exp(A_log) drawn in [-8, -1] per head,
// softplus(dt) around 0.01 as in the published models' initialization.
void plan_mamba2_mixer(const synth_spec &s, const std::string &p, std::vector<synth_tensor> &ts) {
    const synth_mamba2 m = mamba2_of(s);
    const auto f32 = dtype::f32;
    auto amp = [](int64_t fan_in) { return std::sqrt(3.0f / float(fan_in)); };
    const int64_t n_in = m.d_inner + m.conv_channels() + m.n_head;
    ts.push_back({p + "ssm_in.weight", {s.n_embd, n_in}, s.type, 0.0f, amp(s.n_embd)});
    ts.push_back({p + "ssm_conv1d.weight", {m.d_conv, m.conv_channels()}, f32, 0.0f, amp(m.d_conv)});
    ts.push_back({p + "ssm_conv1d.bias", {m.conv_channels()}, f32, 0.0f, 0.1f});
    ts.push_back({p + "ssm_dt.bias", {m.n_head}, f32, -4.6f, 1.0f});
    ts.push_back({p + "ssm_a", {1, m.n_head}, f32, -4.5f, 3.5f});
    ts.push_back({p + "ssm_d", {1, m.n_head}, f32, 1.0f, 0.2f});
    ts.push_back({p + "ssm_norm.weight", {m.d_inner / m.n_group, m.n_group}, f32, 1.0f, 0.2f});
    ts.push_back({p + "ssm_out.weight", {m.d_inner, s.n_embd}, s.type, 0.0f, amp(m.d_inner) * s.block_scale});
}

// Mamba-2: per block a norm and the mixer.
std::vector<synth_tensor> plan_mamba2_tensors(const synth_spec &s) {
    const auto f32 = dtype::f32;
    std::vector<synth_tensor> ts;
    ts.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}, s.type, 0.0f, 1.0f});
    ts.push_back({"output_norm.weight", {s.n_embd}, f32, 1.0f, 0.2f});
    if (!s.tied)
        ts.push_back(
            {"output.weight", {s.n_embd, s.n_vocab}, s.type, 0.0f, std::sqrt(3.0f / float(s.n_embd))});
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        ts.push_back({p + "attn_norm.weight", {s.n_embd}, f32, 1.0f, 0.2f});
        plan_mamba2_mixer(s, p, ts);
    }
    return ts;
}

constexpr int64_t granitehybrid_period = 4;  // attention on layers 3, 7, 11 ...

// Granite 4 hybrid: per block a norm, a Mamba-2 mixer or attention (no RoPE), a norm and a SwiGLU FFN.
std::vector<synth_tensor> plan_granitehybrid_tensors(const synth_spec &s) {
    const int64_t hd = head_dim_of(s);
    const auto f32 = dtype::f32;
    auto amp = [](int64_t fan_in) { return std::sqrt(3.0f / float(fan_in)); };
    std::vector<synth_tensor> ts;
    auto matrix = [&](const std::string &name, int64_t in, int64_t out, float scale = 1.0f) {
        ts.push_back({name + ".weight", {in, out}, s.type, 0.0f, amp(in) * scale});
    };
    ts.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}, s.type, 0.0f, 1.0f});
    ts.push_back({"output_norm.weight", {s.n_embd}, f32, 1.0f, 0.2f});
    if (!s.tied) matrix("output", s.n_embd, s.n_vocab);
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        ts.push_back({p + "attn_norm.weight", {s.n_embd}, f32, 1.0f, 0.2f});
        if (hybrid_attention_layer(s, il, granitehybrid_period)) {
            matrix(p + "attn_q", s.n_embd, hd * s.n_head);
            matrix(p + "attn_k", s.n_embd, hd * s.n_head_kv);
            matrix(p + "attn_v", s.n_embd, hd * s.n_head_kv);
            matrix(p + "attn_output", hd * s.n_head, s.n_embd, s.block_scale);
        } else {
            plan_mamba2_mixer(s, p, ts);
        }
        ts.push_back({p + "ffn_norm.weight", {s.n_embd}, f32, 1.0f, 0.2f});
        matrix(p + "ffn_gate", s.n_embd, s.n_ff);
        matrix(p + "ffn_up", s.n_embd, s.n_ff);
        matrix(p + "ffn_down", s.n_ff, s.n_embd, s.block_scale);
    }
    return ts;
}

// Qwen3-Next / Qwen3.5: the delta net's q/k heads are the spec's KV heads, its value heads the
// spec's heads, all of the head size; attention on every fourth layer (on the last of a shorter
// model: full_attention_interval is then the layer count).
constexpr int64_t delta_net_period = 4;
struct synth_delta_net {
    int64_t head, n_head_k, n_head_v, d_conv;
    int64_t key_dim() const { return head * n_head_k; }
    int64_t value_dim() const { return head * n_head_v; }
};
synth_delta_net delta_net_of(const synth_spec &s) {
    return {head_dim_of(s), s.n_head_kv, s.n_head, s.ssm_d_conv};
}
bool is_delta_net_arch(const std::string &arch) {
    return arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe";
}

// Per block: a norm; the linear attention (attn_qkv, attn_gate, the convolution, the decay's A and
// step bias, the beta/alpha projections, the gated norm, ssm_out) or the gated attention (attn_q of
// a query and a gate per head, per-head Q/K norms); post_attention_norm; a SwiGLU FFN (qwen35) or
// experts with a gated shared expert. A is drawn in [-1.5, -0.1] and the step's inputs small, so that
// each state keeps a few tokens (the published A_log spans more; random projections do not need it).
std::vector<synth_tensor> plan_delta_net_tensors(const synth_spec &s) {
    const synth_delta_net d = delta_net_of(s);
    const int64_t hd = head_dim_of(s);
    const synth_moe moe = moe_of(s);
    const auto f32 = dtype::f32;
    auto amp = [](int64_t fan_in) { return std::sqrt(3.0f / float(fan_in)); };
    std::vector<synth_tensor> ts;
    auto matrix = [&](const std::string &name, int64_t in, int64_t out, float scale = 1.0f) {
        ts.push_back({name + ".weight", {in, out}, s.type, 0.0f, amp(in) * scale});
    };
    auto norm = [&](const std::string &name, int64_t n) {
        ts.push_back({name + ".weight", {n}, f32, 1.0f, 0.2f});
    };
    ts.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}, s.type, 0.0f, 1.0f});
    norm("output_norm", s.n_embd);
    if (!s.tied) matrix("output", s.n_embd, s.n_vocab);
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        norm(p + "attn_norm", s.n_embd);
        if (hybrid_attention_layer(s, il, delta_net_period)) {
            matrix(p + "attn_q", s.n_embd, 2 * hd * s.n_head);
            matrix(p + "attn_k", s.n_embd, hd * s.n_head_kv);
            matrix(p + "attn_v", s.n_embd, hd * s.n_head_kv);
            norm(p + "attn_q_norm", hd);
            norm(p + "attn_k_norm", hd);
            matrix(p + "attn_output", hd * s.n_head, s.n_embd, s.block_scale);
        } else {
            const int64_t conv_channels = 2 * d.key_dim() + d.value_dim();
            matrix(p + "attn_qkv", s.n_embd, conv_channels);
            matrix(p + "attn_gate", s.n_embd, d.value_dim());
            ts.push_back({p + "ssm_conv1d.weight", {d.d_conv, conv_channels}, f32, 0.0f, amp(d.d_conv)});
            ts.push_back({p + "ssm_dt.bias", {d.n_head_v}, f32, 0.0f, 0.5f});
            ts.push_back({p + "ssm_a", {d.n_head_v}, f32, -0.8f, 0.7f});
            if (s.arch == "qwen3next") {
                matrix(p + "ssm_ba", s.n_embd, 2 * d.n_head_v, 0.5f);
            } else {
                matrix(p + "ssm_beta", s.n_embd, d.n_head_v);
                matrix(p + "ssm_alpha", s.n_embd, d.n_head_v, 0.5f);
            }
            norm(p + "ssm_norm", d.head);
            matrix(p + "ssm_out", d.value_dim(), s.n_embd, s.block_scale);
        }
        norm(p + "post_attention_norm", s.n_embd);
        if (moe.n_expert == 0) {
            matrix(p + "ffn_gate", s.n_embd, s.n_ff);
            matrix(p + "ffn_up", s.n_embd, s.n_ff);
            matrix(p + "ffn_down", s.n_ff, s.n_embd, s.block_scale);
            continue;
        }
        const int64_t ne = moe.n_expert;
        ts.push_back({p + "ffn_gate_inp.weight", {s.n_embd, ne}, f32, 0.0f, amp(s.n_embd)});
        ts.push_back({p + "ffn_gate_exps.weight", {s.n_embd, s.n_ff, ne}, s.type, 0.0f, amp(s.n_embd)});
        ts.push_back({p + "ffn_up_exps.weight", {s.n_embd, s.n_ff, ne}, s.type, 0.0f, amp(s.n_embd)});
        ts.push_back(
            {p + "ffn_down_exps.weight", {s.n_ff, s.n_embd, ne}, s.type, 0.0f, amp(s.n_ff) * s.block_scale});
        ts.push_back({p + "ffn_gate_inp_shexp.weight", {s.n_embd}, f32, 0.0f, amp(s.n_embd)});
        matrix(p + "ffn_gate_shexp", s.n_embd, s.n_ff);
        matrix(p + "ffn_up_shexp", s.n_embd, s.n_ff);
        matrix(p + "ffn_down_shexp", s.n_ff, s.n_embd, s.block_scale);
    }
    return ts;
}

// Gemma 4 at a tiny scale, every feature of the text model in a few layers: global attention on
// every third layer and the last, sliding windows elsewhere; the global layers' heads twice the
// others' (of which a quarter rotates: rope_freqs), half their KV heads, and V taken from K (no
// attn_v); from layer 3 (or 3 k, the first multiple of 3 at least half way) on, the layers keep no KV
// rows of their own and have an FFN twice as wide; per-layer inputs of embd / 2 values.
// With experts, the 26B-A4B's form: no shared KV layers and no per-layer inputs, and on every layer
// a router and experts of ff rows beside a dense FFN of 2 ff rows.
struct synth_gemma4 {
    int64_t n_layer, head_swa, head_global, kv_swa, kv_global, first_shared, n_per_layer, n_expert;
    bool global(int64_t il) const { return il % 3 == 2 || il == n_layer - 1; }
    int64_t head(int64_t il) const { return global(il) ? head_global : head_swa; }
    int64_t kv_heads(int64_t il) const { return global(il) ? kv_global : kv_swa; }
};
synth_gemma4 gemma4_of(const synth_spec &s) {
    const int64_t hd = head_dim_of(s);
    const int64_t n_expert = moe_of(s).n_expert;
    const int64_t first_shared =
        s.n_layer >= 4 && n_expert == 0 ? std::max<int64_t>(3, 3 * (s.n_layer / 6)) : s.n_layer;
    return {s.n_layer,
            hd,
            2 * hd,
            s.n_head_kv,
            s.n_head_kv % 2 == 0 ? s.n_head_kv / 2 : s.n_head_kv,
            first_shared,
            n_expert > 0 ? 0 : s.n_embd / 2,
            n_expert};
}

// A gemma4 layer's dense FFN width: twice ff on the shared KV layers, and beside experts.
int64_t gemma4_dense_ff(const synth_spec &s, const synth_gemma4 &g, int64_t il) {
    return il >= g.first_shared || g.n_expert > 0 ? 2 * s.n_ff : s.n_ff;
}

std::vector<synth_tensor> plan_gemma4_tensors(const synth_spec &s) {
    const synth_gemma4 g = gemma4_of(s);
    const auto f32 = dtype::f32;
    auto amp = [](int64_t fan_in) { return std::sqrt(3.0f / float(fan_in)); };
    std::vector<synth_tensor> ts;
    auto matrix = [&](const std::string &name, int64_t in, int64_t out, float scale = 1.0f) {
        ts.push_back({name + ".weight", {in, out}, s.type, 0.0f, amp(in) * scale});
    };
    auto norm = [&](const std::string &name, int64_t n) {
        ts.push_back({name + ".weight", {n}, f32, 1.0f, 0.2f});
    };
    const int64_t n_pl = g.n_per_layer;
    ts.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}, s.type, 0.0f, 1.0f});
    norm("output_norm", s.n_embd);
    if (!s.tied) matrix("output", s.n_embd, s.n_vocab);
    // the global layers' partial rotation: 1 for the first quarter of the pairs, 1e30 for the rest
    synth_tensor freqs{"rope_freqs.weight", {g.head_global / 2}, f32};
    for (int64_t i = 0; i < g.head_global / 2; ++i)
        freqs.values.push_back(i < g.head_global / 8 ? 1.0f : 1e30f);
    ts.push_back(freqs);
    if (n_pl > 0) {
        matrix("per_layer_token_embd", n_pl * s.n_layer, s.n_vocab);
        matrix("per_layer_model_proj", s.n_embd, n_pl * s.n_layer);
        norm("per_layer_proj_norm", n_pl);
    }
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        const int64_t head = g.head(il), n_ff = gemma4_dense_ff(s, g, il);
        norm(p + "attn_norm", s.n_embd);
        matrix(p + "attn_q", s.n_embd, head * s.n_head);
        if (il < g.first_shared) {
            matrix(p + "attn_k", s.n_embd, head * g.kv_heads(il));
            if (!g.global(il)) matrix(p + "attn_v", s.n_embd, head * g.kv_heads(il));
            norm(p + "attn_k_norm", head);
        }
        norm(p + "attn_q_norm", head);
        matrix(p + "attn_output", head * s.n_head, s.n_embd, s.block_scale);
        norm(p + "post_attention_norm", s.n_embd);
        ts.push_back({p + "layer_output_scale.weight", {1}, f32, 0.8f, 0.2f});
        norm(p + "ffn_norm", s.n_embd);
        matrix(p + "ffn_gate", s.n_embd, n_ff);
        matrix(p + "ffn_up", s.n_embd, n_ff);
        matrix(p + "ffn_down", n_ff, s.n_embd, s.block_scale);
        norm(p + "post_ffw_norm", s.n_embd);
        if (g.n_expert > 0) {
            const int64_t ne = g.n_expert;
            // the router's input has unit length: rows this wide spread the logits (standard deviation
            // about 2), so no two experts come near a tie
            ts.push_back({p + "ffn_gate_inp.weight", {s.n_embd, ne}, s.type, 0.0f, 3.5f});
            ts.push_back({p + "ffn_gate_inp.scale", {s.n_embd}, f32, 1.0f, 0.5f});
            norm(p + "pre_ffw_norm_2", s.n_embd);
            norm(p + "post_ffw_norm_1", s.n_embd);
            norm(p + "post_ffw_norm_2", s.n_embd);
            ts.push_back(
                {p + "ffn_gate_up_exps.weight", {s.n_embd, 2 * s.n_ff, ne}, s.type, 0.0f, amp(s.n_embd)});
            ts.push_back({p + "ffn_down_exps.weight",
                          {s.n_ff, s.n_embd, ne},
                          s.type,
                          0.0f,
                          amp(s.n_ff) * s.block_scale});
            ts.push_back({p + "ffn_down_exps.scale", {ne}, f32, 1.0f, 0.5f});
        }
        if (n_pl > 0) {
            matrix(p + "inp_gate", s.n_embd, n_pl);
            matrix(p + "proj", n_pl, s.n_embd);
            norm(p + "post_norm", s.n_embd);
        }
    }
    return ts;
}

// BERT: token, type and position embeddings and their LayerNorm, post-LayerNorm blocks with biases
// everywhere (attention, GELU FFN), no output matrix; a reranker's classification head (cls: dense
// then tanh, cls.output: one score). Position and type embeddings stay f32 (as the reference's
// quantizer keeps them).
std::vector<synth_tensor> plan_bert_tensors(const synth_spec &s) {
    const auto f32 = dtype::f32;
    auto amp = [](int64_t fan_in) { return std::sqrt(3.0f / float(fan_in)); };
    std::vector<synth_tensor> ts;
    auto layer_norm = [&](const std::string &name) {
        ts.push_back({name + ".weight", {s.n_embd}, f32, 1.0f, 0.2f});
        ts.push_back({name + ".bias", {s.n_embd}, f32, 0.0f, 0.1f});
    };
    auto matrix = [&](const std::string &name, int64_t in, int64_t out) {
        ts.push_back({name + ".weight", {in, out}, s.type, 0.0f, amp(in)});
        ts.push_back({name + ".bias", {out}, f32, 0.0f, 0.1f});
    };
    ts.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}, s.type, 0.0f, 1.0f});
    ts.push_back({"token_types.weight", {s.n_embd, 2}, f32, 0.0f, 0.5f});
    ts.push_back({"position_embd.weight", {s.n_embd, s.n_ctx}, f32, 0.0f, 0.5f});
    layer_norm("token_embd_norm");
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        matrix(p + "attn_q", s.n_embd, s.n_embd);
        matrix(p + "attn_k", s.n_embd, s.n_embd);
        matrix(p + "attn_v", s.n_embd, s.n_embd);
        matrix(p + "attn_output", s.n_embd, s.n_embd);
        layer_norm(p + "attn_output_norm");
        matrix(p + "ffn_up", s.n_embd, s.n_ff);
        matrix(p + "ffn_down", s.n_ff, s.n_embd);
        layer_norm(p + "layer_output_norm");
    }
    if (s.reranker) {
        matrix("cls", s.n_embd, s.n_embd);
        matrix("cls.output", s.n_embd, 1);
    }
    return ts;
}

// A WordPiece ("bert") vocabulary in the reference's layout: [PAD] 0, [unused*], [UNK] 100, [CLS]
// 101, [SEP] 102, [MASK] 103, then word starts ("▁" + piece: punctuation, digits, letters, letter
// pairs and triples) and continuations (the bare pieces), alternating, so that any ASCII text
// tokenizes without [UNK].
synth_vocab make_wpm_vocab(int64_t n_vocab) {
    synth_vocab v;
    auto push = [&](const std::string &t, int32_t type) {
        v.tokens.push_back(t);
        v.types.push_back(type);
    };
    push("[PAD]", 3);
    for (int i = 0; i < 99; ++i) push("[unused" + std::to_string(i) + "]", 1);
    for (const char *t : {"[UNK]", "[CLS]", "[SEP]", "[MASK]"}) push(t, 3);
    const std::string space = "\xE2\x96\x81";
    std::vector<std::string> pieces;
    for (char c : std::string("0123456789.,!?'\"-:;()")) pieces.push_back(std::string(1, c));
    const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
    for (char c : letters) pieces.push_back(std::string(1, c));
    for (char a : letters)
        for (char b : letters) pieces.push_back(std::string{a, b});
    for (char a : letters)
        for (char b : letters)
            for (char c : letters) pieces.push_back(std::string{a, b, c});
    for (const std::string &p : pieces) {
        for (const std::string &t : {space + p, p})
            if (int64_t(v.tokens.size()) < n_vocab) push(t, 1);
    }
    for (int64_t i = 0; int64_t(v.tokens.size()) < n_vocab; ++i) push(space + "w" + std::to_string(i), 1);
    return v;
}

std::vector<synth_tensor> plan_tensors(const synth_spec &s);

// The WordPiece vocabulary of make_wpm_vocab with BERT's special ids (the reference's defaults),
// then every tensor.
void synth_fill_bert_vocab_and_tensors(const synth_spec &s, gguf_writer &w) {
    const synth_vocab v = make_wpm_vocab(s.n_vocab);
    w.set_string("tokenizer.ggml.model", "bert");
    w.set_string("tokenizer.ggml.pre", "default");
    w.set_string_array("tokenizer.ggml.tokens", v.tokens);
    w.set_array("tokenizer.ggml.token_type", gguf_type::i32, v.types.data(), v.types.size());
    w.set_u32("tokenizer.ggml.unknown_token_id", 100);
    w.set_u32("tokenizer.ggml.padding_token_id", 0);
    w.set_u32("tokenizer.ggml.seperator_token_id", 102);  // the key's spelling in the format
    w.set_u32("tokenizer.ggml.mask_token_id", 103);
    w.set_u32("tokenizer.ggml.cls_token_id", 101);
    w.set_u32("tokenizer.ggml.token_type_count", 2);
    for (const synth_tensor &t : plan_tensors(s))
        w.add_tensor_fill(t.name, t.type, t.ne, [t, seed = s.seed](uint8_t *dst, size_t nbytes) {
            fill_tensor(t, seed, dst, nbytes);
        });
}

std::vector<synth_tensor> plan_tensors(const synth_spec &s) {
    if (s.arch == "bert") return plan_bert_tensors(s);
    if (s.arch == "mamba") return plan_mamba_tensors(s);
    if (s.arch == "gemma4") return plan_gemma4_tensors(s);
    if (is_delta_net_arch(s.arch)) return plan_delta_net_tensors(s);
    if (s.arch == "mamba2") return plan_mamba2_tensors(s);
    if (s.arch == "granitehybrid") return plan_granitehybrid_tensors(s);
    if (s.arch == "lfm2") return plan_lfm2_tensors(s);
    const synth_arch &a = *find_synth_arch(s.arch);
    const int64_t hd = head_dim_of(s);
    const int64_t n_q = hd * s.n_head, n_kv = hd * s.n_head_kv;
    const auto f32 = dtype::f32;
    auto amp = [](int64_t fan_in) { return std::sqrt(3.0f / float(fan_in)); };  // unit-variance outputs
    std::vector<synth_tensor> ts;
    auto norm = [&](const std::string &name, int64_t n = 0) {
        ts.push_back({name + ".weight", {n ? n : s.n_embd}, f32, 1.0f, 0.2f});
        if (a.norm_bias) ts.push_back({name + ".bias", {n ? n : s.n_embd}, f32, 0.0f, 0.1f});
    };
    auto matrix = [&](const std::string &name, int64_t in, int64_t out, bool bias) {
        const bool block_output =
            name.ends_with("attn_output") || name.ends_with("ffn_down") || name.ends_with("ffn_down_shexp");
        ts.push_back(
            {name + ".weight", {in, out}, s.type, 0.0f, amp(in) * (block_output ? s.block_scale : 1.0f)});
        if (bias) ts.push_back({name + ".bias", {out}, f32, 0.0f, 0.1f});
    };
    ts.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}, s.type, 0.0f, 1.0f});
    const synth_moe moe = moe_of(s);
    norm("output_norm");
    if (!s.tied && !a.always_tied) matrix("output", s.n_embd, s.n_vocab, a.output_bias);
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        if (a.attn_norm) norm(p + "attn_norm");
        if (a.latent_attn) {
            const synth_latent la = latent_of(s);
            matrix(p + "attn_q_a", s.n_embd, la.rank_q, false);
            norm(p + "attn_q_a_norm", la.rank_q);
            matrix(p + "attn_q_b", la.rank_q, s.n_head * la.head_k, false);
            matrix(p + "attn_kv_a_mqa", s.n_embd, la.rank_kv + la.n_rot, false);
            norm(p + "attn_kv_a_norm", la.rank_kv);
            matrix(p + "attn_kv_b", la.rank_kv, s.n_head * (la.head_k - la.n_rot + la.head_v), false);
        } else if (a.fused_qkv) {
            matrix(p + "attn_qkv", s.n_embd, n_q + 2 * n_kv, a.qkv_bias);
        } else {
            matrix(p + "attn_q", s.n_embd, n_q, a.qkv_bias);
            matrix(p + "attn_k", s.n_embd, n_kv, a.qkv_bias);
            matrix(p + "attn_v", s.n_embd, n_kv, a.qkv_bias);
        }
        if (a.head_qk_norm) {
            ts.push_back({p + "attn_q_norm.weight", {hd}, f32, 1.0f, 0.2f});
            ts.push_back({p + "attn_k_norm.weight", {hd}, f32, 1.0f, 0.2f});
        }
        if (a.row_qk_norm) {
            ts.push_back({p + "attn_q_norm.weight", {n_q}, f32, 1.0f, 0.2f});
            ts.push_back({p + "attn_k_norm.weight", {n_kv}, f32, 1.0f, 0.2f});
        }
        matrix(p + "attn_output", a.latent_attn ? s.n_head * latent_of(s).head_v : n_q, s.n_embd, a.out_bias);
        if (a.attn_sinks)  // logits of the order of the scores', so that the sinks take a real share
            ts.push_back({p + "attn_sinks.weight", {s.n_head}, f32, 0.0f, 2.0f});
        if (a.post_norms) norm(p + "post_attention_norm");
        if (a.ffn_norm) norm(p + a.ffn_norm_name);
        if (moe.routed(il)) {  // a router, the experts and the shared expert
            const int64_t ne = moe.n_expert;
            ts.push_back({p + "ffn_gate_inp.weight", {s.n_embd, ne}, f32, 0.0f, amp(s.n_embd)});
            ts.push_back({p + "ffn_gate_exps.weight", {s.n_embd, s.n_ff, ne}, s.type, 0.0f, amp(s.n_embd)});
            ts.push_back({p + "ffn_up_exps.weight", {s.n_embd, s.n_ff, ne}, s.type, 0.0f, amp(s.n_embd)});
            ts.push_back({p + "ffn_down_exps.weight",
                          {s.n_ff, s.n_embd, ne},
                          s.type,
                          0.0f,
                          amp(s.n_ff) * s.block_scale});
            if (a.v3_routing)  // the selection bias of sigmoid gating
                ts.push_back({p + "exp_probs_b.bias", {ne}, f32, 0.0f, 0.1f});
            if (a.expert_biases) {
                ts.push_back({p + "ffn_gate_inp.bias", {ne}, f32, 0.0f, 0.5f});
                ts.push_back({p + "ffn_gate_exps.bias", {s.n_ff, ne}, f32, 0.0f, 0.1f});
                ts.push_back({p + "ffn_up_exps.bias", {s.n_ff, ne}, f32, 0.0f, 0.1f});
                ts.push_back({p + "ffn_down_exps.bias", {s.n_embd, ne}, f32, 0.0f, 0.1f});
            }
            if (!moe.shared) continue;
            if (moe.shared_gate)
                ts.push_back({p + "ffn_gate_inp_shexp.weight", {s.n_embd}, f32, 0.0f, amp(s.n_embd)});
            matrix(p + "ffn_gate_shexp", s.n_embd, s.n_ff, false);
            matrix(p + "ffn_up_shexp", s.n_embd, s.n_ff, false);
            matrix(p + "ffn_down_shexp", s.n_ff, s.n_embd, false);
            continue;
        }
        const int64_t n_ff = dense_ff_of(s);
        if (a.ffn_gate) matrix(p + "ffn_gate", s.n_embd, n_ff, false);
        matrix(p + "ffn_up", s.n_embd, a.fused_gate_up ? 2 * n_ff : n_ff, a.ffn_bias);
        matrix(p + "ffn_down", n_ff, s.n_embd, a.ffn_bias);
        if (a.post_norms) norm(p + "post_ffw_norm");
    }
    return ts;
}

}  // namespace

std::string synth_architecture_names() {
    return synth_arch_names();
}

void synth_check(const synth_spec &s) {
    auto require = [](bool ok, const std::string &what) {
        if (!ok) throw error(what);
    };
    require(s.block_scale >= 0.0f && s.block_scale <= 1.0f,
            "synth: block_scale is " + std::to_string(s.block_scale) + ", must be in [0, 1]");
    require(find_synth_arch(s.arch) != nullptr,
            "synth: architecture '" + s.arch + "' is not one of " + synth_arch_names());
    require(s.n_expert >= 0 && s.n_expert_used >= 0, "synth: experts and experts-used must not be negative");
    require(s.n_expert == 0 || s.arch == "llama" || s.arch == "qwen2moe" || s.arch == "qwen3moe" ||
                s.arch == "deepseek2" || s.arch == "glm4moe" || s.arch == "qwen3next" ||
                s.arch == "qwen35moe" || s.arch == "gpt-oss" || s.arch == "llama4" || s.arch == "gemma4",
            "synth: experts are for llama, qwen2moe, qwen3moe, deepseek2, glm4moe, qwen3next, qwen35moe, "
            "gpt-oss, llama4 and gemma4 only");
    if (is_delta_net_arch(s.arch))
        require(s.ssm_d_conv >= 2 && s.ssm_d_conv <= 16, "synth: the convolution width must be in [2, 16]");
    require(moe_of(s).n_used <= moe_of(s).n_expert,
            "synth: experts-used " + std::to_string(s.n_expert_used) + " must not exceed the experts");
    if (s.arch == "mamba2" || s.arch == "granitehybrid")
        require(s.n_embd % 8 == 0 && s.n_embd > 0,
                "synth: " + s.arch + " needs an embd that is a multiple of 8 (Mamba-2 heads of 16 channels)");
    if (s.arch == "mamba" || s.arch == "mamba2") {
        require(s.n_expert == 0, "synth: " + s.arch + " has no experts");
        require(s.n_embd > 0 && s.n_layer > 0 && s.n_ctx > 0, "synth: embd, layers and ctx must be positive");
        require(s.ssm_d_state >= 1 && s.ssm_d_state <= 256, "synth: the SSM state size must be in [1, 256]");
        require(s.ssm_d_conv >= 2 && s.ssm_d_conv <= 16,
                "synth: the SSM convolution width must be in [2, 16]");
    } else {
        require(s.n_embd > 0 && s.n_layer > 0 && s.n_head > 0 && s.n_head_kv > 0 && s.n_ff > 0 && s.n_ctx > 0,
                "synth: embd, layers, heads, kv-heads, ff and ctx must be positive");
        require(s.n_head % s.n_head_kv == 0, "synth: kv-heads " + std::to_string(s.n_head_kv) +
                                                 " must divide heads " + std::to_string(s.n_head));
        require(head_dim_of(s) > 0 && head_dim_of(s) % 2 == 0,
                "synth: the head size (embd / heads, or head-dim) must be even and positive");
        require(s.arch != "deepseek2" || (head_dim_of(s) % 4 == 0 && s.n_embd % 2 == 0),
                "synth: deepseek2 needs a head size that is a multiple of 4 and an even embd");
    }
    require(
        s.sliding_window >= -1 && ((s.arch != "gemma3" && s.arch != "gemma4") || s.sliding_window != 0),
        "synth: sliding-window must be -1 (the default), 0 (none; not gemma3 or gemma4) or a window size");
    require(s.arch != "gemma4" || (s.n_embd % 2 == 0 && head_dim_of(s) % 4 == 0),
            "synth: gemma4 needs an even embd and a head size that is a multiple of 4");
    require(s.n_vocab >= 260, "synth: vocab must be at least 260 (3 special tokens, 256 bytes, one piece)");
    require(!s.reranker || s.arch == "bert", "synth: a reranker is a bert (--arch bert --reranker)");
    require(s.arch != "bert" || s.head_dim == 0 || s.head_dim * s.n_head == s.n_embd,
            "synth: bert's heads split embd (head-dim must be embd / heads)");
    require(s.arch != "bert" || s.n_expert == 0, "synth: bert has no experts");
    require(!s.fim || s.n_vocab >= 268,
            "synth: --fim needs a vocab of at least 268 (its six tokens replace the last pieces)");
    if (!type_traits(s.type).is_quantized) return;
    const int64_t bs = type_traits(s.type).block_size;
    for (const synth_tensor &t : plan_tensors(s))
        if (t.type == s.type && t.ne[0] % bs != 0)
            throw error("synth: tensor '" + t.name + "' has rows of " + std::to_string(t.ne[0]) +
                        " values; " + type_name(s.type) + " needs a multiple of " + std::to_string(bs));
}

namespace {
// The vocabulary and every tensor, after the architecture's metadata.
void synth_fill_vocab_and_tensors(const synth_spec &s, gguf_writer &w);
}  // namespace

void synth_fill_writer(const synth_spec &s, gguf_writer &w) {
    synth_check(s);
    const int64_t hd = head_dim_of(s);
    const std::string &a = s.arch;
    w.set_string("general.architecture", a);
    w.set_string("general.name", "synth-" + a);
    w.set_u32(a + ".context_length", uint32_t(s.n_ctx));
    w.set_u32(a + ".embedding_length", uint32_t(s.n_embd));
    w.set_u32(a + ".block_count", uint32_t(s.n_layer));
    if (a == "mamba2") {  // zero heads and FFN, the mixer's sizes (time_step_rank: its heads)
        const synth_mamba2 m = mamba2_of(s);
        w.set_u32(a + ".feed_forward_length", 0);
        w.set_u32(a + ".attention.head_count", 0);
        w.set_u32(a + ".ssm.conv_kernel", uint32_t(m.d_conv));
        w.set_u32(a + ".ssm.inner_size", uint32_t(m.d_inner));
        w.set_u32(a + ".ssm.state_size", uint32_t(m.d_state));
        w.set_u32(a + ".ssm.time_step_rank", uint32_t(m.n_head));
        w.set_u32(a + ".ssm.group_count", uint32_t(m.n_group));
        w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
        return synth_fill_vocab_and_tensors(s, w);
    }
    if (a == "mamba") {  // the reference's keys: zero heads and FFN, the mixer's sizes
        const synth_ssm m = ssm_of(s);
        w.set_u32(a + ".feed_forward_length", 0);
        w.set_u32(a + ".attention.head_count", 0);
        w.set_u32(a + ".ssm.conv_kernel", uint32_t(m.d_conv));
        w.set_u32(a + ".ssm.inner_size", uint32_t(m.d_inner));
        w.set_u32(a + ".ssm.state_size", uint32_t(m.d_state));
        w.set_u32(a + ".ssm.time_step_rank", uint32_t(m.dt_rank));
        w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
        if (s.ssm_dt_b_c_rms) w.set_bool(a + ".ssm.dt_b_c_rms", true);
        return synth_fill_vocab_and_tensors(s, w);
    }
    if (a == "bert") {  // an encoder: attention both ways, LayerNorm, pooling mean or (a reranker) rank
        w.set_u32(a + ".feed_forward_length", uint32_t(s.n_ff));
        w.set_u32(a + ".attention.head_count", uint32_t(s.n_head));
        w.set_u32(a + ".attention.head_count_kv", uint32_t(s.n_head));
        w.set_f32(a + ".attention.layer_norm_epsilon", 1e-12f);
        w.set_bool(a + ".attention.causal", false);
        w.set_u32(a + ".pooling_type", s.reranker ? 4u : 1u);
        if (s.reranker) w.set_string_array(a + ".classifier.output_labels", {"LABEL_0"});
        return synth_fill_bert_vocab_and_tensors(s, w);
    }
    if (a == "gemma4") {  // per-layer FFN widths, KV heads and windows; see plan_gemma4_tensors
        const synth_gemma4 g = gemma4_of(s);
        std::vector<uint32_t> n_ff, kv_heads;
        std::vector<uint8_t> window;
        for (int64_t il = 0; il < s.n_layer; ++il) {
            n_ff.push_back(uint32_t(gemma4_dense_ff(s, g, il)));
            kv_heads.push_back(uint32_t(g.kv_heads(il)));
            window.push_back(g.global(il) ? 0 : 1);
        }
        w.set_array(a + ".feed_forward_length", gguf_type::u32, n_ff.data(), n_ff.size());
        w.set_u32(a + ".attention.head_count", uint32_t(s.n_head));
        w.set_array(a + ".attention.head_count_kv", gguf_type::u32, kv_heads.data(), kv_heads.size());
        w.set_u32(a + ".attention.key_length", uint32_t(g.head_global));
        w.set_u32(a + ".attention.value_length", uint32_t(g.head_global));
        w.set_u32(a + ".attention.key_length_swa", uint32_t(g.head_swa));
        w.set_u32(a + ".attention.value_length_swa", uint32_t(g.head_swa));
        w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
        w.set_f32(a + ".rope.freq_base", 1000000.0f);
        w.set_f32(a + ".rope.freq_base_swa", 10000.0f);
        w.set_u32(a + ".rope.dimension_count", uint32_t(g.head_global));
        w.set_u32(a + ".rope.dimension_count_swa", uint32_t(g.head_swa));
        w.set_u32(a + ".attention.sliding_window", uint32_t(s.sliding_window < 0 ? 4 : s.sliding_window));
        w.set_array(a + ".attention.sliding_window_pattern", gguf_type::boolean, window.data(),
                    window.size());
        w.set_u32(a + ".attention.shared_kv_layers", uint32_t(s.n_layer - g.first_shared));
        w.set_u32(a + ".embedding_length_per_layer_input", uint32_t(g.n_per_layer));
        w.set_f32(a + ".final_logit_softcapping", 10.0f);
        if (g.n_expert > 0) {
            w.set_u32(a + ".expert_count", uint32_t(g.n_expert));
            w.set_u32(a + ".expert_used_count", uint32_t(moe_of(s).n_used));
            w.set_u32(a + ".expert_feed_forward_length", uint32_t(s.n_ff));
        }
        return synth_fill_vocab_and_tensors(s, w);
    }
    w.set_u32(a + ".feed_forward_length", uint32_t(s.n_ff));
    w.set_u32(a + ".attention.head_count", uint32_t(s.n_head));
    const synth_arch &features = *find_synth_arch(a);
    // latent attention has every head's own K and V
    if (a == "granitehybrid") {  // 0 KV heads mark the Mamba-2 layers; their sizes; no RoPE (4.0-H)
        std::vector<uint32_t> kv_heads;
        for (int64_t il = 0; il < s.n_layer; ++il)
            kv_heads.push_back(hybrid_attention_layer(s, il, granitehybrid_period) ? uint32_t(s.n_head_kv)
                                                                                   : 0u);
        w.set_array(a + ".attention.head_count_kv", gguf_type::u32, kv_heads.data(), kv_heads.size());
        const synth_mamba2 m = mamba2_of(s);
        w.set_u32(a + ".ssm.conv_kernel", uint32_t(m.d_conv));
        w.set_u32(a + ".ssm.inner_size", uint32_t(m.d_inner));
        w.set_u32(a + ".ssm.state_size", uint32_t(m.d_state));
        w.set_u32(a + ".ssm.time_step_rank", uint32_t(m.n_head));
        w.set_u32(a + ".ssm.group_count", uint32_t(m.n_group));
        w.set_bool(a + ".rope.scaling.finetuned", false);
    } else if (is_delta_net_arch(a)) {  // the delta net's sizes; attention every fourth layer
        w.set_u32(a + ".attention.head_count_kv", uint32_t(s.n_head_kv));
        const synth_delta_net d = delta_net_of(s);
        w.set_u32(a + ".ssm.conv_kernel", uint32_t(d.d_conv));
        w.set_u32(a + ".ssm.inner_size", uint32_t(d.value_dim()));
        w.set_u32(a + ".ssm.state_size", uint32_t(d.head));
        w.set_u32(a + ".ssm.time_step_rank", uint32_t(d.n_head_v));
        w.set_u32(a + ".ssm.group_count", uint32_t(d.n_head_k));
        w.set_u32(a + ".full_attention_interval", uint32_t(std::min(delta_net_period, s.n_layer)));
        if (a != "qwen3next") {  // Qwen3.5's rotary pairs in sections (Qwen3.5's proportions 11:11:10)
            const int32_t pairs = int32_t(hd / 2 / 2), third = pairs / 3;
            const int32_t sections[4] = {pairs - 2 * third, third, third, 0};
            w.set_array(a + ".rope.dimension_sections", gguf_type::i32, sections, 4);
        }
    } else if (a == "lfm2") {  // 0 KV heads mark the short-convolution layers
        std::vector<uint32_t> kv_heads;
        for (int64_t il = 0; il < s.n_layer; ++il)
            kv_heads.push_back(hybrid_attention_layer(s, il, lfm2_period) ? uint32_t(s.n_head_kv) : 0u);
        w.set_array(a + ".attention.head_count_kv", gguf_type::u32, kv_heads.data(), kv_heads.size());
        w.set_u32(a + ".shortconv.l_cache", uint32_t(lfm2_l_cache));
    } else {
        w.set_u32(a + ".attention.head_count_kv", uint32_t(features.latent_attn ? s.n_head : s.n_head_kv));
    }
    if (features.layer_norm)
        w.set_f32(a + ".attention.layer_norm_epsilon", 1e-5f);
    else
        w.set_f32(a + ".attention.layer_norm_rms_epsilon", a == "llama" ? 1e-5f : 1e-6f);
    w.set_f32(a + ".rope.freq_base", a == "llama" ? 10000.0f : a == "gpt-oss" ? 150000.0f : 1000000.0f);
    if (features.v3_routing) {  // DeepSeek-V3's choices: sigmoid gating, renormalized and scaled weights
        w.set_u32(a + ".leading_dense_block_count", uint32_t(moe_of(s).dense_lead));
        w.set_u32(a + ".expert_shared_count", 1);
        w.set_f32(a + ".expert_weights_scale", 2.5f);
        w.set_bool(a + ".expert_weights_norm", true);
        w.set_u32(a + ".expert_gating_func", 2);
    }
    if (a == "glm4moe") w.set_u32(a + ".nextn_predict_layers", 0);  // no multi-token prediction layer
    if (features.latent_attn) {
        const synth_latent la = latent_of(s);
        w.set_u32(a + ".rope.dimension_count", uint32_t(la.n_rot));
        w.set_u32(a + ".attention.key_length", uint32_t(la.head_k));
        w.set_u32(a + ".attention.value_length", uint32_t(la.head_v));
        w.set_u32(a + ".attention.q_lora_rank", uint32_t(la.rank_q));
        w.set_u32(a + ".attention.kv_lora_rank", uint32_t(la.rank_kv));
    } else {
        w.set_u32(a + ".rope.dimension_count", uint32_t(features.partial_rope ? hd / 2 / 2 * 2 : hd));
    }
    if (hd * s.n_head != s.n_embd && !features.latent_attn) {
        w.set_u32(a + ".attention.key_length", uint32_t(hd));
        w.set_u32(a + ".attention.value_length", uint32_t(hd));
    }
    if (const synth_moe moe = moe_of(s); moe.n_expert > 0) {
        w.set_u32(a + ".expert_count", uint32_t(moe.n_expert));
        w.set_u32(a + ".expert_used_count", uint32_t(moe.n_used));
        if (moe.shared || a == "qwen3moe" || a == "gpt-oss")
            w.set_u32(a + ".expert_feed_forward_length", uint32_t(s.n_ff));
        if (moe.shared_gate) w.set_u32(a + ".expert_shared_feed_forward_length", uint32_t(s.n_ff));
    }
    if (a == "granite" || a == "granitehybrid") {  // Granite's multipliers, each far enough from 1 to matter
        w.set_f32(a + ".embedding_scale", 4.0f);
        w.set_f32(a + ".residual_scale", 0.5f);
        w.set_f32(a + ".attention.scale", 1.0f / float(hd));
        w.set_f32(a + ".logit_scale", 2.0f);
    }
    if (a == "command-r") w.set_f32(a + ".logit_scale", 0.5f);
    if (a == "gemma2") {  // soft caps low enough to act, windows on the even layers
        w.set_f32(a + ".attn_logit_softcapping", 20.0f);
        w.set_f32(a + ".final_logit_softcapping", 10.0f);
    }
    if ((a == "gemma2" || a == "gemma3" || a == "phi3") && s.sliding_window != 0)
        w.set_u32(a + ".attention.sliding_window", uint32_t(s.sliding_window < 0 ? 4 : s.sliding_window));
    // Ministral 3's YaRN (factor 16 over 16384 positions, yarn_log_multiplier 1: no magnitude) and
    // attention temperature (0.1, stepping every 16384 positions), at a tiny scale: steps every 8
    // positions, within the tests' sequences
    if (a == "mistral3") {
        w.set_string(a + ".rope.scaling.type", "yarn");
        w.set_f32(a + ".rope.scaling.factor", 4.0f);
        w.set_f32(a + ".rope.scaling.yarn_log_multiplier", 1.0f);
        w.set_u32(a + ".rope.scaling.original_context_length", 8);
        w.set_f32(a + ".rope.scaling.yarn_beta_fast", 32.0f);
        w.set_f32(a + ".rope.scaling.yarn_beta_slow", 1.0f);
        w.set_f32(a + ".attention.temperature_scale", 0.1f);
    }
    if (a == "llama4") {  // the dense FFNs twice the experts' width, experts on every second layer
        w.set_u32(a + ".feed_forward_length", uint32_t(dense_ff_of(s)));
        w.set_u32(a + ".interleave_moe_layer_step", uint32_t(moe_of(s).step));
    }
    if (a == "gpt-oss") {  // gpt-oss's window (128) and YaRN (factor 32 over 4096 positions), tiny
        w.set_u32(a + ".attention.sliding_window", 4);
        w.set_string(a + ".rope.scaling.type", "yarn");
        w.set_f32(a + ".rope.scaling.factor", 4.0f);
        w.set_u32(a + ".rope.scaling.original_context_length", 512);
    }
    if (a == "gemma3") {  // the 4B-and-up setting: the global layers' RoPE linearly scaled
        w.set_string(a + ".rope.scaling.type", "linear");
        w.set_f32(a + ".rope.scaling.factor", 8.0f);
    }

    synth_fill_vocab_and_tensors(s, w);
}

namespace {
void synth_fill_vocab_and_tensors(const synth_spec &s, gguf_writer &w) {
    std::vector<std::string> extra_control = find_synth_arch(s.arch)->extra_control_tokens;
    // fill-in-the-middle: Qwen2.5-Coder's six tokens; the ids of prefix, suffix and middle are
    // written, pad, repo and file separator are left for the vocabulary to find by their text
    static const char *const fim_texts[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                                            "<|fim_pad|>",    "<|repo_name|>",  "<|file_sep|>"};
    if (s.fim) extra_control.insert(extra_control.end(), std::begin(fim_texts), std::end(fim_texts));
    const synth_vocab v = make_vocab(s.n_vocab, extra_control);
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", v.tokens);
    w.set_array("tokenizer.ggml.scores", gguf_type::f32, v.scores.data(), v.scores.size());
    w.set_array("tokenizer.ggml.token_type", gguf_type::i32, v.types.data(), v.types.size());
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
    if (s.fim) {
        const int64_t first = s.n_vocab - int64_t(std::size(fim_texts));
        w.set_u32("tokenizer.ggml.fim_pre_token_id", uint32_t(first));
        w.set_u32("tokenizer.ggml.fim_suf_token_id", uint32_t(first + 1));
        w.set_u32("tokenizer.ggml.fim_mid_token_id", uint32_t(first + 2));
    }

    for (const synth_tensor &t : plan_tensors(s)) {
        const uint32_t seed = s.seed;
        w.add_tensor_fill(t.name, t.type, t.ne,
                          [t, seed](uint8_t *dst, size_t nbytes) { fill_tensor(t, seed, dst, nbytes); });
    }
}
}  // namespace

int64_t synth_write(const synth_spec &s, const std::string &path) {
    gguf_writer w;
    synth_fill_writer(s, w);
    w.write(path);
    int64_t n_params = 0;
    for (const synth_tensor &t : plan_tensors(s)) {
        int64_t n = 1;
        for (int64_t d : t.ne) n *= d;
        n_params += n;
    }
    return n_params;
}

int64_t synth_lora_write(const synth_spec &s, int64_t rank, float alpha, const std::string &path) {
    synth_check(s);
    if (rank < 1) throw error("synth: the LoRA rank must be at least 1, got " + std::to_string(rank));
    gguf_writer w;
    w.set_string("general.architecture", s.arch);
    w.set_string("general.type", "adapter");
    w.set_string("general.name", "synth-" + s.arch + "-lora");
    w.set_string("adapter.type", "lora");
    w.set_f32("adapter.lora.alpha", alpha);
    int64_t n_pairs = 0;
    const uint32_t seed = s.seed ^ 0x10a4u;  // not the base's values
    for (const synth_tensor &t : plan_tensors(s)) {
        // every block matrix (2-D, of the model's matrix type); norms, biases and expert stacks not
        if (!t.name.starts_with("blk.") || !t.name.ends_with(".weight") || t.ne.size() != 2 ||
            t.type != s.type)
            continue;
        const std::string stem = t.name.substr(0, t.name.size() - std::string_view(".weight").size());
        const int64_t n_in = t.ne[0], n_out = t.ne[1];
        // A like a weight of n_in inputs; B small enough that the adapter nudges, large enough to matter
        const synth_tensor a{stem + ".lora_a", {n_in, rank}, dtype::f32, 0.0f, std::sqrt(3.0f / float(n_in))};
        const synth_tensor b{
            stem + ".lora_b", {rank, n_out}, dtype::f32, 0.0f, 0.5f * std::sqrt(3.0f / float(rank))};
        for (const synth_tensor &x : {a, b})
            w.add_tensor_fill(x.name, x.type, x.ne,
                              [x, seed](uint8_t *dst, size_t nbytes) { fill_tensor(x, seed, dst, nbytes); });
        ++n_pairs;
    }
    w.write(path);
    return n_pairs;
}

}  // namespace weft
