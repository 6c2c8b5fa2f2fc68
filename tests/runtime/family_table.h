// tests/runtime/family_table.h — the model families checked against the 2026 reference engine: one
// line each. test_family_reference.cpp compares weft's logits with the fixtures that
// tests/data/families/record.sh recorded for each line (refdump on the file `weft synth` writes with
// the same flags); test_batch_invariance.cpp decodes every family in every batch split.
//
// To add a family: a line below, a line in record.sh with the same flags (the test checks that the
// fixtures were recorded with them), run record.sh, check in the two fixtures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/model/synth.h"

namespace weft::test {

struct family_case {
    const char *arch;  // general.architecture, as the reference spells it
    // The tiny shape every family shares unless its line says otherwise.
    int64_t layers = 2;
    int64_t embd = 64;
    int64_t heads = 4;
    int64_t kv_heads = 2;
    int64_t ff = 96;
    int64_t experts = 0;  // --experts (0: the architecture's default)
    int64_t experts_used = 0;
    int64_t sliding_window = -1;  // --sliding-window (-1: the architecture's default)
    const char *variant = "";     // told apart in the fixture name: <arch>-<variant>

    std::string name() const { return *variant ? std::string(arch) + "-" + variant : std::string(arch); }

    // The spec `weft synth` builds from synth_args() (at f32; the Q8_0 fixture's file is the same at q8_0).
    synth_spec spec(dtype type = dtype::f32) const {
        synth_spec s;
        s.arch = arch;
        s.n_embd = embd;
        s.n_layer = layers;
        s.n_head = heads;
        s.n_head_kv = kv_heads;
        s.n_ff = ff;
        s.n_vocab = 300;
        s.n_expert = experts;
        s.n_expert_used = experts_used;
        s.seed = 7;
        s.sliding_window = sliding_window;
        s.type = type;
        return s;
    }

    // The flags of `weft synth` that write the same file (record.sh's line for this family).
    std::string synth_args() const {
        const synth_spec s = spec();
        std::string a = "--arch " + s.arch + " --embd " + std::to_string(s.n_embd) + " --layers " +
                        std::to_string(s.n_layer) + " --heads " + std::to_string(s.n_head) + " --kv-heads " +
                        std::to_string(s.n_head_kv) + " --ff " + std::to_string(s.n_ff) + " --vocab " +
                        std::to_string(s.n_vocab);
        if (s.n_expert > 0) a += " --experts " + std::to_string(s.n_expert);
        if (s.n_expert_used > 0) a += " --experts-used " + std::to_string(s.n_expert_used);
        if (s.sliding_window >= 0) a += " --sliding-window " + std::to_string(s.sliding_window);
        return a + " --seed " + std::to_string(s.seed);
    }
};

inline const std::vector<family_case> &families() {
    static const std::vector<family_case> table = {
        {.arch = "llama"},
        {.arch = "llama", .experts = 4, .experts_used = 2, .variant = "moe"},
        {.arch = "qwen2"},
        {.arch = "qwen3"},
        {.arch = "granite"},
        {.arch = "starcoder2"},
        {.arch = "gemma"},
        {.arch = "gemma2", .layers = 4},  // windows on the even layers
        {.arch = "gemma3", .layers = 6},  // five sliding layers, one global
        {.arch = "phi2"},
        {.arch = "phi3", .sliding_window = 0},  // the reference ignores phi3's window
        {.arch = "olmo2"},
        {.arch = "command-r"},
        {.arch = "qwen2moe", .experts = 4, .experts_used = 2},
        {.arch = "qwen3moe", .experts = 4, .experts_used = 2},
        {.arch = "deepseek2", .experts = 4, .experts_used = 2},
        {.arch = "mamba"},
        {.arch = "mamba2"},                      // 8 heads of 16 channels, one group
        {.arch = "lfm2", .layers = 4},           // short convolutions at layers 0, 1, 3, attention at 2
        {.arch = "granitehybrid", .layers = 4},  // Mamba-2 at layers 0-2, attention (no RoPE) at 3
        {.arch = "smollm3", .layers = 4},        // layer 3 without RoPE
        {.arch = "mistral3"},
        {.arch = "glm4moe", .experts = 4, .experts_used = 2},               // layer 0 dense, layer 1 routed
        {.arch = "gpt-oss", .layers = 4, .experts = 4, .experts_used = 2},  // windows on layers 0 and 2
        // dense FFNs at layers 0 and 2, experts (+ a shared one) at 1 and 3; RoPE, Q/K norms and
        // chunks of 8192 at 0-2, NoPE with the attention temperature at 3 (test_llama4.cpp: past 8192)
        {.arch = "llama4", .layers = 4, .experts = 4, .experts_used = 2},
        // gated delta nets at layers 0-2, gated attention at 3; 2 q/k heads for 4 value heads
        {.arch = "qwen3next", .layers = 4, .experts = 4, .experts_used = 2},
        {.arch = "qwen35", .layers = 4},
        {.arch = "qwen35moe", .layers = 4, .experts = 4, .experts_used = 2},
        // windows on layers 0, 1, 3, 4 (heads of 16), global layers 2 and 5 (heads of 32, a quarter
        // rotating, 1 KV head, V = K); layers 3-5 reuse the KV rows of layers 1 and 2; per-layer inputs
        {.arch = "gemma4", .layers = 6},
        // the 26B-A4B's form: the same windows and heads, no shared KV layers or per-layer inputs;
        // on every layer a router and 4 GELU experts (gate and up fused) beside the dense FFN
        {.arch = "gemma4", .layers = 6, .experts = 4, .experts_used = 2, .variant = "moe"},
    };
    return table;
}

}  // namespace weft::test
