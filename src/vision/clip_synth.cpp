// src/vision/clip_synth.cpp — random mmproj files in the reference's clip layout (LLaVA projectors).
#include "weft/vision/clip_synth.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/fp16.h"
#include "weft/gguf/gguf.h"

namespace weft::vision {

namespace {

struct planned_tensor {
    std::string name;
    std::vector<int64_t> ne;
    dtype type = dtype::f32;
    float mean = 0.0f, stddev = 0.0f;
};

void fill_tensor(const planned_tensor &t, uint32_t seed, uint8_t *dst, size_t nbytes) {
    std::mt19937_64 rng((uint64_t(seed) << 32) ^ std::hash<std::string>{}(t.name));
    std::normal_distribution<float> dist(t.mean, t.stddev);
    const size_t n = nbytes / (t.type == dtype::f16 ? sizeof(fp16_t) : sizeof(float));
    for (size_t i = 0; i < n; ++i) {
        const float v = dist(rng);
        if (t.type == dtype::f16) {
            const fp16_t h = fp32_to_fp16(v);
            std::memcpy(dst + i * sizeof h, &h, sizeof h);
        } else {
            std::memcpy(dst + i * sizeof v, &v, sizeof v);
        }
    }
}

}  // namespace

int64_t clip_synth_write(const clip_synth_spec &s, const std::string &path) {
    auto positive = [](int64_t v, const char *what) {
        if (v <= 0)
            throw error(std::string("synth clip: ") + what + " must be positive, got " + std::to_string(v));
    };
    positive(s.image_size, "the image size");
    positive(s.patch_size, "the patch size");
    positive(s.n_embd, "n_embd");
    positive(s.n_layer, "the layer count");
    positive(s.n_head, "the head count");
    positive(s.n_ff, "n_ff");
    positive(s.n_output_embd, "the projector's output width");
    if (s.n_layer < 2) throw error("synth clip: at least 2 layers (LLaVA computes all but the last)");
    if (s.image_size % s.patch_size != 0)
        throw error("synth clip: the image size must be a multiple of the patch size");
    if (s.n_embd % s.n_head != 0) throw error("synth clip: n_embd must be a multiple of the head count");
    if (s.projector != "mlp" && s.projector != "mlp_norm" && s.projector != "ldpv2")
        throw error("synth clip: projector " + weft::quoted(s.projector) +
                    " is not one of mlp, mlp_norm, ldpv2");
    if (s.projector == "ldpv2" && (s.image_size / s.patch_size) % 2 != 0)
        throw error("synth clip: ldpv2 pools 2 x 2 patches: the patches on a side must be even");
    if (s.type != dtype::f32 && s.type != dtype::f16) throw error("synth clip: --type must be f32 or f16");

    gguf_writer w;
    w.set_string("general.architecture", "clip");
    w.set_string("general.name", "weft synth clip " + s.projector);
    w.set_string("general.description", "random weights (weft synth --arch clip)");
    w.set_u32("general.file_type", s.type == dtype::f16 ? 1 : 0);
    w.set_bool("clip.has_text_encoder", false);
    w.set_bool("clip.has_vision_encoder", true);
    w.set_bool("clip.has_llava_projector", true);
    w.set_string("clip.projector_type", s.projector);
    w.set_bool("clip.use_gelu", s.use_gelu);
    w.set_u32("clip.vision.image_size", uint32_t(s.image_size));
    w.set_u32("clip.vision.patch_size", uint32_t(s.patch_size));
    w.set_u32("clip.vision.embedding_length", uint32_t(s.n_embd));
    w.set_u32("clip.vision.feed_forward_length", uint32_t(s.n_ff));
    w.set_u32("clip.vision.projection_dim", uint32_t(s.n_output_embd));
    w.set_u32("clip.vision.attention.head_count", uint32_t(s.n_head));
    w.set_f32("clip.vision.attention.layer_norm_epsilon", 1e-5f);
    w.set_u32("clip.vision.block_count", uint32_t(s.n_layer));
    const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f},
                stddev[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    w.set_array("clip.vision.image_mean", gguf_type::f32, mean, 3);
    w.set_array("clip.vision.image_std", gguf_type::f32, stddev, 3);

    std::vector<planned_tensor> plan;
    auto matrix = [&](const std::string &name, int64_t n_in, int64_t n_out) {
        plan.push_back({name + ".weight", {n_in, n_out}, s.type, 0.0f, 1.0f / std::sqrt(float(n_in))});
        plan.push_back({name + ".bias", {n_out}, dtype::f32, 0.0f, 0.1f});
    };
    auto norm = [&](const std::string &name, int64_t n) {
        plan.push_back({name + ".weight", {n}, dtype::f32, 1.0f, 0.1f});
        plan.push_back({name + ".bias", {n}, dtype::f32, 0.0f, 0.1f});
    };
    const int64_t p = s.patch_size, n_pos = (s.image_size / p) * (s.image_size / p) + 1;
    plan.push_back(
        {"v.patch_embd.weight", {p, p, 3, s.n_embd}, s.type, 0.0f, 1.0f / std::sqrt(float(p * p * 3))});
    plan.push_back({"v.class_embd", {s.n_embd}, dtype::f32, 0.0f, 0.5f});
    plan.push_back({"v.position_embd.weight", {s.n_embd, n_pos}, dtype::f32, 0.0f, 0.5f});
    norm("v.pre_ln", s.n_embd);
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string b = "v.blk." + std::to_string(il) + ".";
        norm(b + "ln1", s.n_embd);
        for (const char *m : {"attn_q", "attn_k", "attn_v", "attn_out"}) matrix(b + m, s.n_embd, s.n_embd);
        norm(b + "ln2", s.n_embd);
        matrix(b + "ffn_up", s.n_embd, s.n_ff);
        matrix(b + "ffn_down", s.n_ff, s.n_embd);
    }
    if (s.post_ln) norm("v.post_ln", s.n_embd);
    if (s.projector == "mlp") {
        matrix("mm.0", s.n_embd, s.n_output_embd);
        matrix("mm.2", s.n_output_embd, s.n_output_embd);
    } else if (s.projector == "ldpv2") {
        matrix("mm.model.mlp.0", s.n_embd, s.n_output_embd);
        matrix("mm.model.mlp.2", s.n_output_embd, s.n_output_embd);
        plan.push_back({"mm.model.peg.0.weight", {3, 3, s.n_output_embd, 1}, dtype::f32, 0.0f, 0.3f});
        plan.push_back({"mm.model.peg.0.bias", {s.n_output_embd}, dtype::f32, 0.0f, 0.1f});
    } else {
        matrix("mm.0", s.n_embd, s.n_output_embd);
        norm("mm.1", s.n_output_embd);
        matrix("mm.3", s.n_output_embd, s.n_output_embd);
        norm("mm.4", s.n_output_embd);
    }
    int64_t n_params = 0;
    for (const planned_tensor &t : plan) {
        int64_t n = 1;
        for (int64_t d : t.ne) n *= d;
        n_params += n;
        const uint32_t seed = s.seed;
        w.add_tensor_fill(t.name, t.type, t.ne,
                          [t, seed](uint8_t *dst, size_t nbytes) { fill_tensor(t, seed, dst, nbytes); });
    }
    w.write(path);
    return n_params;
}

}  // namespace weft::vision
