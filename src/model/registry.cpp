// src/model/registry.cpp — the architectures model::load knows, keyed by general.architecture.
#include "model/architecture.h"

namespace weft {

std::span<const architecture_entry> architecture_registry() {
    static const architecture_entry entries[] = {
        {"llama", &make_arch_llama},
        {"qwen2", &make_arch_qwen2},
        {"qwen3", &make_arch_qwen3},
        {"granite", &make_arch_granite},
        {"starcoder2", &make_arch_starcoder2},
        {"gemma", &make_arch_gemma},
        {"gemma2", &make_arch_gemma2},
        {"phi2", &make_arch_phi2},
        {"phi3", &make_arch_phi3},
        {"olmo2", &make_arch_olmo2},
        {"command-r", &make_arch_command_r},
        {"bert", &make_arch_bert},
        {"qwen2moe", &make_arch_qwen2moe},
        {"deepseek2", &make_arch_deepseek2},
        {"qwen3moe", &make_arch_qwen3moe},
        {"gemma3", &make_arch_gemma3},
        {"mamba", &make_arch_mamba},
        {"smollm3", &make_arch_smollm3},
        {"glm4moe", &make_arch_glm4moe},
        {"gpt-oss", &make_arch_gpt_oss},
        {"llama4", &make_arch_llama4},
        {"mistral3", &make_arch_mistral3},
        {"lfm2", &make_arch_lfm2},
        {"mamba2", &make_arch_mamba2},
        {"granitehybrid", &make_arch_granitehybrid},
        {"qwen3next", &make_arch_qwen3next},
        {"qwen35", &make_arch_qwen35},
        {"qwen35moe", &make_arch_qwen35moe},
        {"gemma4", &make_arch_gemma4},
    };
    return entries;
}

std::vector<std::string> supported_architectures() {
    std::vector<std::string> names;
    for (const auto &e : architecture_registry()) names.emplace_back(e.name);
    return names;
}

}  // namespace weft
