// tools/weft/cmd_synth.cpp — `weft synth`: write a random-weight model of a real shape.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/core/type.h"
#include "weft/model/synth.h"
#include "weft/quant/quant.h"
#include "weft/vision/clip_synth.h"

namespace {

int synth_main(int argc, char **argv) {
    CLI::App app{
        "Write a random-weight model of a real shape (Llama, Qwen2 or Qwen3 layout) with an SPM "
        "byte-fallback vocabulary, for tests and benchmarks. Tensors are generated and quantized one "
        "at a time while the file is written (atomically), so memory stays near one tensor.",
        "weft synth"};
    weft::synth_spec s;
    s.n_embd = 256;
    s.n_head = 8;
    s.n_head_kv = 4;
    s.n_ff = 512;
    s.n_vocab = 512;
    std::string out, type_text = "f32";
    app.add_option("output", out, "the GGUF file to write")->required();
    const std::string arch_names = weft::synth_architecture_names();
    app.add_option(
           "--arch", s.arch,
           "one of " + arch_names +
               " (mamba, mamba2: --ssm-state, --ssm-conv); clip: a vision projector (mmproj) for --mmproj")
        ->capture_default_str()
        ->check(CLI::Validator(
            [arch_names](std::string &arch) {
                if (arch == "clip" ||
                    (", " + arch_names + ", ").find(", " + arch + ", ") != std::string::npos)
                    return std::string();
                return "'" + arch + "' is not one of " + arch_names + ", clip";
            },
            "ARCH"));
    app.add_option("--embd", s.n_embd, "embedding length")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(65536)));
    app.add_option("--layers", s.n_layer, "blocks")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(1024)));
    app.add_option("--heads", s.n_head, "attention heads")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(1024)));
    app.add_option("--kv-heads", s.n_head_kv, "key/value heads (grouped-query attention)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(1024)));
    app.add_option("--head-dim", s.head_dim, "head size (0: embd / heads)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(0), int64_t(4096)));
    app.add_option("--ff", s.n_ff, "feed-forward length")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(262144)));
    app.add_option(
           "--experts", s.n_expert,
           "experts of the FFN (llama: 0 is a dense FFN; gemma4: 0 is the dense model, more is the "
           "26B-A4B's form, experts beside the dense FFN on every layer; qwen2moe, qwen3moe, deepseek2, "
           "glm4moe: 0 is 4)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(0), int64_t(1024)));
    app.add_option("--experts-used", s.n_expert_used, "experts per token (0: 2)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(0), int64_t(1024)));
    app.add_option("--vocab", s.n_vocab, "vocabulary size (>= 260)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(260), int64_t(4194304)));
    app.add_option("--ctx", s.n_ctx, "training context length recorded in the file")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(16777216)));
    app.add_option("--type", type_text,
                   "matrix type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K .. q6_K, iq4_nl, iq4_xs, "
                   "tq1_0, tq2_0")
        ->capture_default_str();
    app.add_option("--seed", s.seed, "random seed")->capture_default_str();
    app.add_option(
           "--block-scale", s.block_scale,
           "draw the blocks' output projections this many times smaller: below 1, a model of the same "
           "seed with fewer layers predicts mostly what this one does (a draft for speculative "
           "decoding benchmarks)")
        ->capture_default_str()
        ->check(CLI::Range(0.0f, 1.0f));
    app.add_option("--ssm-state", s.ssm_d_state, "mamba: state values per channel (d_state)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(256)));
    app.add_option("--ssm-conv", s.ssm_d_conv, "mamba: the causal convolution's width (d_conv)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(2), int64_t(16)));
    app.add_option("--sliding-window", s.sliding_window,
                   "gemma2, gemma3, phi3: the attention window (-1: 4; 0: none, not for gemma3)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(-1), int64_t(1) << 31));
    app.add_flag("--reranker", s.reranker,
                 "bert: a reranker (pooling rank and a classification head, cls + cls.output), for `weft "
                 "serve --reranking` and `weft embed --rerank`");
    app.add_flag("--tied", s.tied, "no output.weight: the output projection is token_embd");
    app.add_flag("--fim", s.fim,
                 "fill-in-the-middle tokens (Qwen2.5-Coder's <|fim_prefix|> ... <|file_sep|>) at the end of "
                 "the vocabulary, for `weft serve`'s /infill");
    std::string lora_out;
    int64_t lora_rank = 8;
    float lora_alpha = 16.0f;
    app.add_option(
        "--lora", lora_out,
        "also write a random LoRA adapter for this model to this file (an f32 pair for every block "
        "matrix; different values than the model's)");
    app.add_option("--rank", lora_rank, "the adapter's rank")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app.add_option("--lora-alpha", lora_alpha, "the adapter's adapter.lora.alpha")
        ->capture_default_str()
        ->check(CLI::Range(0.0f, 1e6f));
    weft::vision::clip_synth_spec clip;
    app.add_option("--image-size", clip.image_size, "clip: the square images are resized to")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(4096)));
    app.add_option("--patch-size", clip.patch_size, "clip: the patch side (image size a multiple of it)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(512)));
    app.add_option("--proj-embd", clip.n_output_embd,
                   "clip: the projector's output width: the n_embd of the text model it serves")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(65536)));
    app.add_option("--projector", clip.projector,
                   "clip: mlp (LLaVA-1.5), mlp_norm (Yi-VL) or ldpv2 (MobileVLM V2)")
        ->capture_default_str();
    app.add_flag("--use-gelu", clip.use_gelu,
                 "clip: GELU in the encoder's FFN (default: QuickGELU, as CLIP)");
    app.add_flag("--post-ln", clip.post_ln, "clip: a final LayerNorm (v.post_ln; LLaVA's files have none)");
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;

    const auto type = weft::type_from_name(type_text);
    if (!type || !weft::has_quant_traits(*type) || *type == weft::dtype::q8_1 || *type == weft::dtype::q8_k ||
        !weft::quant_traits_of(*type).from_float_ref)
        throw weft::error("--type '" + type_text + "' is not a weight type weft can write");
    s.type = *type;

    if (s.arch == "clip") {
        clip.n_embd = s.n_embd;
        clip.n_layer = s.n_layer;
        clip.n_head = s.n_head;
        clip.n_ff = s.n_ff;
        clip.type = s.type;
        clip.seed = s.seed;
        const int64_t n = weft::vision::clip_synth_write(clip, out);
        std::fprintf(
            stderr,
            "weft synth: wrote %s: clip %s, image %lld (patch %lld), %lld layers, n_embd %lld, %lld heads, "
            "n_ff %lld, output %lld, %.3f M params, %s\n",
            out.c_str(), clip.projector.c_str(), (long long)clip.image_size, (long long)clip.patch_size,
            (long long)clip.n_layer, (long long)clip.n_embd, (long long)clip.n_head, (long long)clip.n_ff,
            (long long)clip.n_output_embd, double(n) / 1e6, weft::type_name(clip.type));
        return 0;
    }

    const int64_t n_params = weft::synth_write(s, out);
    if (!lora_out.empty()) {
        const int64_t n_pairs = weft::synth_lora_write(s, lora_rank, lora_alpha, lora_out);
        std::fprintf(stderr,
                     "weft synth: wrote %s: a LoRA adapter of rank %lld (alpha %g) for %lld matrices\n",
                     lora_out.c_str(), (long long)lora_rank, double(lora_alpha), (long long)n_pairs);
    }
    if (s.arch == "mamba") {
        std::fprintf(
            stderr,
            "weft synth: wrote %s: mamba, %lld layers, n_embd %lld, d_inner %lld, d_state %lld, d_conv %lld, "
            "vocab %lld, %.3f B params, %s\n",
            out.c_str(), (long long)s.n_layer, (long long)s.n_embd, (long long)(2 * s.n_embd),
            (long long)s.ssm_d_state, (long long)s.ssm_d_conv, (long long)s.n_vocab, double(n_params) / 1e9,
            weft::type_name(s.type));
        return 0;
    }
    const int64_t n_kv_heads = s.arch == "deepseek2" ? s.n_head : s.n_head_kv;  // latent attention: per head
    std::fprintf(
        stderr,
        "weft synth: wrote %s: %s, %lld layers, n_embd %lld, %lld heads (%lld KV), n_ff %lld, vocab %lld, "
        "%.3f B params, %s\n",
        out.c_str(), s.arch.c_str(), (long long)s.n_layer, (long long)s.n_embd, (long long)s.n_head,
        (long long)n_kv_heads, (long long)s.n_ff, (long long)s.n_vocab, double(n_params) / 1e9,
        weft::type_name(s.type));
    return 0;
}

const bool registered_synth = weft::tool::register_command(
    {"synth", "write a random-weight model of a given shape (for tests and benchmarks)", &synth_main});

}  // namespace
