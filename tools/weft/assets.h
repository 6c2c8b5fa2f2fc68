// tools/weft/assets.h — the model built into the `weft` executable (the chat page is the server library's).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "weft/model/model.h"

namespace weft::tool {

// models/stories260K.gguf (MIT, from the llama2.c project): what `weft run` and `weft serve` use
// when no -m is given, so a fresh build can generate text at once.
std::span<const uint8_t> default_model();
inline constexpr const char *default_model_name = "stories260K.gguf (built in)";

// The model at `path`, or the built-in one when path is empty.
inline std::unique_ptr<model> load_model_or_default(const std::string &path, model_params params = {}) {
    if (!path.empty()) return model::load(path, params);
    params.memory = default_model();
    return model::load(default_model_name, params);
}

}  // namespace weft::tool
