// src/model/registry.cpp — the architectures model::load knows, keyed by general.architecture.
#include <array>

#include "model/architecture.h"

namespace weft {

std::span<const architecture_entry> architecture_registry() {
    static const std::array<architecture_entry, 6> entries = {{
        {"llama", &make_arch_llama},
        {"qwen2", &make_arch_qwen2},
        {"qwen3", &make_arch_qwen3},
        {"granite", &make_arch_granite},
        {"starcoder2", &make_arch_starcoder2},
        {"qwen2moe", &make_arch_qwen2moe},
    }};
    return entries;
}

std::vector<std::string> supported_architectures() {
    std::vector<std::string> names;
    for (const auto &e : architecture_registry()) names.emplace_back(e.name);
    return names;
}

}  // namespace weft
