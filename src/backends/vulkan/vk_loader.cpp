// src/backends/vulkan/vk_loader.cpp — opens libvulkan.so.1 and loads the entry points of vk_loader.h.
#include "backends/vulkan/vk_loader.h"

#include <dlfcn.h>

namespace weft::vk {

functions &fn() {
    static functions f;
    return f;
}

bool load_loader(std::string &why) {
    functions &f = fn();
    if (f.vkGetInstanceProcAddr) return true;
    void *lib = ::dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = ::dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        why = "no Vulkan loader (libvulkan.so.1) found";
        return false;
    }
    // the library stays open for the life of the process: devices live in the registry until exit
    f.vkGetInstanceProcAddr =
        reinterpret_cast<PFN_vkGetInstanceProcAddr>(::dlsym(lib, "vkGetInstanceProcAddr"));
    if (f.vkGetInstanceProcAddr == nullptr) {
        why = "the Vulkan loader has no vkGetInstanceProcAddr";
        return false;
    }
#define WEFT_VK_LOAD(name) f.name = reinterpret_cast<PFN_##name>(f.vkGetInstanceProcAddr(nullptr, #name));
    WEFT_VK_GLOBAL_FUNCTIONS(WEFT_VK_LOAD)
#undef WEFT_VK_LOAD
    if (f.vkCreateInstance == nullptr) {
        why = "the Vulkan loader has no vkCreateInstance";
        return false;
    }
    return true;
}

void load_instance(VkInstance instance) {
    functions &f = fn();
#define WEFT_VK_LOAD(name) f.name = reinterpret_cast<PFN_##name>(f.vkGetInstanceProcAddr(instance, #name));
    WEFT_VK_INSTANCE_FUNCTIONS(WEFT_VK_LOAD)
    WEFT_VK_DEVICE_FUNCTIONS(WEFT_VK_LOAD)
#undef WEFT_VK_LOAD
}

const char *result_name(VkResult r) {
    switch (r) {
#define WEFT_VK_RESULT(name) \
    case name:               \
        return #name;
        WEFT_VK_RESULT(VK_SUCCESS)
        WEFT_VK_RESULT(VK_NOT_READY)
        WEFT_VK_RESULT(VK_TIMEOUT)
        WEFT_VK_RESULT(VK_INCOMPLETE)
        WEFT_VK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
        WEFT_VK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        WEFT_VK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
        WEFT_VK_RESULT(VK_ERROR_DEVICE_LOST)
        WEFT_VK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
        WEFT_VK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
        WEFT_VK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
        WEFT_VK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
        WEFT_VK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
        WEFT_VK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
        WEFT_VK_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
        WEFT_VK_RESULT(VK_ERROR_FRAGMENTED_POOL)
        WEFT_VK_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
        WEFT_VK_RESULT(VK_ERROR_UNKNOWN)
#undef WEFT_VK_RESULT
        default:
            return "VkResult(unknown)";
    }
}

}  // namespace weft::vk
