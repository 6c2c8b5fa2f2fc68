// src/backends/vulkan/vk_shaders.h — the SPIR-V of the compute shaders, embedded at build time
// (embed_spirv.cmake writes the table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace weft::vk {

struct shader_code {
    const char *name;  // "mul_mat_q4_0", "rope" ...
    const uint32_t *words;
    size_t n_words;
};

std::span<const shader_code> embedded_shaders();

}  // namespace weft::vk
