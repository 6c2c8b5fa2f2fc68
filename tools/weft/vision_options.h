// tools/weft/vision_options.h — images in a prompt, with the established engine's names: --mmproj FILE
// (the vision projector) and --image FILE (repeatable).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "weft/model/model.h"
#include "weft/serving/engine.h"

namespace weft::tool {

// A prompt with images: tokens with placeholders, and the images' embedding rows.
struct image_prompt {
    std::vector<token> tokens;
    std::vector<serving::embd_chunk> media;
};

struct vision_options {
    std::string mmproj;               // --mmproj FILE
    std::vector<std::string> images;  // --image FILE, in order

    // No images: an empty result (the caller tokenizes as usual). Otherwise loads the mmproj (checked
    // against the text model), decodes and encodes every image and tokenizes the prompt with each image
    // where a <__image__> marker is, or all of them before the text when it has no marker. Throws
    // weft::error naming the file and the problem (no --mmproj, a bad image, a projector of another width).
    image_prompt encode(const model &m, const std::string &prompt, int n_threads, const char *command) const;
};

void add_vision_options(CLI::App &app, vision_options &o);

}  // namespace weft::tool
