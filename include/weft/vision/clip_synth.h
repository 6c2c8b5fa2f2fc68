// weft/vision/clip_synth.h — a random mmproj of a real shape (`weft synth --arch clip`), for tests.
#pragma once

#include <cstdint>
#include <string>

#include "weft/core/type.h"

namespace weft::vision {

struct clip_synth_spec {
    std::string projector = "mlp";  // clip.projector_type: mlp, mlp_norm or ldpv2
    int64_t image_size = 336;
    int64_t patch_size = 14;
    int64_t n_embd = 1024;
    int64_t n_layer = 24;  // blocks in the file (LLaVA computes n_layer - 1 of them)
    int64_t n_head = 16;
    int64_t n_ff = 4096;
    int64_t n_output_embd = 4096;  // the projector's output: the text model's n_embd
    bool use_gelu = false;         // clip.use_gelu: GELU in the encoder's FFN (false: QuickGELU)
    bool post_ln = false;          // v.post_ln (LLaVA's files have none)
    dtype type = dtype::f32;       // of the matrices (f32 or f16); norms, biases and embeddings stay f32
    uint32_t seed = 42;
};

// Checks the spec, then writes the file atomically; throws weft::error naming the problem. Returns
// the number of parameters.
int64_t clip_synth_write(const clip_synth_spec &s, const std::string &path);

}  // namespace weft::vision
