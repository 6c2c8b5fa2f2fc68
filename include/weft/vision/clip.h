// weft/vision/clip.h — a CLIP vision encoder and projector from an mmproj GGUF (the reference's clip
// format): image in, one embedding row per image token out, for a text model's embedding batch.
//
// Usage:
//   auto proj = weft::vision::clip_model::load("mmproj.gguf");
//   proj->check_text_model(*llm);                        // projector width == the LLM's n_embd
//   std::vector<float> e = proj->encode_image(weft::vision::image_load("pic.png"), n_threads);
//   // e: proj->n_image_tokens() rows of proj->n_output_embd() floats, token-major
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weft/vision/image.h"

namespace weft {
class model;
class gguf_set;
}  // namespace weft

namespace weft::vision {

// The projectors weft runs (clip.projector_type): "mlp" (LLaVA-1.5: mm.0, GELU, mm.2), "mlp_norm"
// (Yi-VL: mm.0, LayerNorm mm.1, GELU, mm.3, LayerNorm mm.4) and "ldpv2" (MobileVLM V2: an MLP, a 2 x 2
// average pool over the patch grid, then a depthwise 3 x 3 convolution added to it, the PEG).
enum class projector_kind { mlp, mlp_norm, ldpv2 };
// The encoder's FFN activation: clip.use_gelu picks GELU (tanh form), clip.use_silu SiLU, neither
// QuickGELU x·σ(1.702x) (OpenAI CLIP's).
enum class clip_activation { quick_gelu, gelu, silu };

struct clip_hparams {
    projector_kind projector = projector_kind::mlp;
    std::string projector_name;         // as the file says
    int64_t image_size = 0;             // clip.vision.image_size: the square the image is resized to
    int64_t patch_size = 0;             // clip.vision.patch_size
    int64_t n_embd = 0;                 // clip.vision.embedding_length
    int64_t n_ff = 0;                   // clip.vision.feed_forward_length
    int64_t n_head = 0;                 // clip.vision.attention.head_count
    int64_t n_layer = 0;                // clip.vision.block_count
    int64_t n_layer_run = 0;            // blocks computed: n_layer - 1 (LLaVA's second-to-last layer) or
                                        // clip.vision.feature_layer
    float eps = 1e-5f;                  // clip.vision.attention.layer_norm_epsilon
    std::array<float, 3> image_mean{};  // clip.vision.image_mean
    std::array<float, 3> image_std{};   // clip.vision.image_std
    clip_activation activation = clip_activation::quick_gelu;
    int64_t n_output_embd = 0;  // the projector's output width (must equal the text model's n_embd)

    int64_t n_patches_side() const { return image_size / patch_size; }
    int64_t n_patches() const { return n_patches_side() * n_patches_side(); }
    // Embedding rows of one image: the patches, or a quarter of them after ldpv2's pooling.
    int64_t n_image_tokens() const {
        return projector == projector_kind::ldpv2 ? n_patches() / 4 : n_patches();
    }
};

struct clip_weights;  // src/vision/clip.cpp

class clip_model {
  public:
    // Opens and checks an mmproj file: general.architecture "clip" with a vision encoder, a projector
    // weft runs, consistent sizes and every tensor the encoder and projector need, of the right shape.
    // Throws weft::error naming the file and the problem (unknown projector type with the supported
    // list, missing key or tensor, shape mismatch).
    static std::unique_ptr<clip_model> load(const std::string &path);
    ~clip_model();
    clip_model(const clip_model &) = delete;
    clip_model &operator=(const clip_model &) = delete;

    const std::string &path() const { return path_; }
    const clip_hparams &hparams() const { return hp_; }
    // Embedding rows one image becomes (the patches: class token dropped).
    int64_t n_image_tokens() const { return hp_.n_image_tokens(); }
    int64_t n_output_embd() const { return hp_.n_output_embd; }
    // "clip mlp, image 336 (patch 14, 576 tokens), 24 layers (23 run), n_embd 1024, 16 heads, n_ff 4096,
    // output 4096, f16, 596 MiB"
    std::string describe() const;
    // Throws weft::error naming both files when the projector's width is not m's n_embd.
    void check_text_model(const model &m) const;

    // The image as the encoder takes it: padded to a square with the mean colour, resized (bicubic) to
    // image_size, normalized with image_mean / image_std; planar f32 [3][image_size][image_size].
    std::vector<float> preprocess(const rgb_image &img) const;
    // The encoder and projector on preprocessed pixels: n_image_tokens() rows of n_output_embd()
    // floats. Thread-safe (each call computes in a graph and buffer of its own).
    std::vector<float> encode(std::span<const float> pixels, int n_threads) const;
    std::vector<float> encode_image(const rgb_image &img, int n_threads) const {
        return encode(preprocess(img), n_threads);
    }

  private:
    clip_model();
    std::string path_;
    clip_hparams hp_;
    std::unique_ptr<gguf_set> file_;
    std::unique_ptr<clip_weights> w_;
};

}  // namespace weft::vision
