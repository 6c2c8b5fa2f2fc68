// tools/weft/vision_options.cpp — --mmproj and --image: images encoded into a prompt's embedding rows.
#include "weft/vision_options.h"

#include <chrono>
#include <cstdio>

#include "weft/core/error.h"
#include "weft/file_arguments.h"
#include "weft/vision/clip.h"
#include "weft/vision/image.h"
#include "weft/vision/media_prompt.h"

namespace weft::tool {

image_prompt vision_options::encode(const model &m, const std::string &prompt, int n_threads,
                                    const char *command) const {
    image_prompt out;
    if (images.empty()) {
        if (!mmproj.empty())
            std::fprintf(stderr, "weft %s: --mmproj without --image: no image to encode\n", command);
        return out;
    }
    if (mmproj.empty())
        throw error("--image needs --mmproj FILE: the vision projector (mmproj GGUF) of " + m.name());
    const auto proj = vision::clip_model::load(mmproj);
    proj->check_text_model(m);
    std::fprintf(stderr, "weft %s: mmproj %s: %s\n", command, mmproj.c_str(), proj->describe().c_str());
    std::string text = prompt;
    const size_t n_marked = vision::count_markers(text);
    if (n_marked == 0) {
        std::string marks;
        for (size_t i = 0; i < images.size(); ++i) marks += vision::image_marker;
        text = marks + text;
    } else if (n_marked != images.size()) {
        throw error("the prompt marks " + std::to_string(n_marked) + " places " +
                    std::string(vision::image_marker) + " for " + std::to_string(images.size()) +
                    " --image files");
    }
    std::vector<int32_t> n_tokens;
    for (const std::string &path : images) {
        const auto t0 = std::chrono::steady_clock::now();
        const vision::rgb_image img =
            vision::image_load(path, vision::image_limits_for_encoder(proj->hparams().image_size));
        serving::embd_chunk c;
        c.n_tokens = int32_t(proj->n_image_tokens());
        c.embd = proj->encode_image(img, n_threads);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "weft %s: image %s: %d x %d pixels, %d tokens, encoded in %.1f ms\n", command,
                     path.c_str(), img.width, img.height, c.n_tokens, ms);
        n_tokens.push_back(c.n_tokens);
        out.media.push_back(std::move(c));
    }
    vision::marked_prompt marked = vision::tokenize_with_markers(m.vocab(), text, n_tokens, true);
    for (size_t i = 0; i < out.media.size(); ++i) out.media[i].at = marked.image_at[i];
    out.tokens = std::move(marked.tokens);
    return out;
}

void add_vision_options(CLI::App &app, vision_options &o) {
    app.add_option("--mmproj", o.mmproj,
                   "the vision projector of a multimodal model (mmproj GGUF: CLIP + projector)")
        ->check(weft::tool::input_file());
    app.add_option("--image", o.images,
                   "an image for the prompt (PNG, JPEG, BMP or GIF; repeatable): where the prompt says "
                   "<__image__>, else before the prompt text; needs --mmproj")
        ->check(weft::tool::input_file());
}

}  // namespace weft::tool
