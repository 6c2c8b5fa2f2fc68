// src/backends/vulkan/vulkan_unavailable.cpp — the public functions of weft/backends/vulkan.h in a build
// without the Vulkan headers or glslc (CMakeLists.txt compiles this file instead of the others).
#include "backends/vulkan/vk_testing.h"
#include "weft/backends/vulkan.h"

namespace weft {

void register_vulkan_devices() {}

std::string vulkan_status() {
    return "built without Vulkan";
}

bool vulkan_built() {
    return false;
}

}  // namespace weft

namespace weft::vk {

void set_force_staging(bool) {}
void set_disable_subgroups(bool) {}
void set_mul_mat_path(mul_mat_path) {}

}  // namespace weft::vk
