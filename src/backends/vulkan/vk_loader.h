// src/backends/vulkan/vk_loader.h — the Vulkan entry points weft uses, loaded at run time from
// libvulkan.so.1 through vkGetInstanceProcAddr (no link-time dependency on the loader).
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

namespace weft::vk {

// X-macros: the functions by the level they are loaded at.
#define WEFT_VK_GLOBAL_FUNCTIONS(X) \
    X(vkCreateInstance)             \
    X(vkEnumerateInstanceVersion)

#define WEFT_VK_INSTANCE_FUNCTIONS(X)           \
    X(vkDestroyInstance)                        \
    X(vkEnumeratePhysicalDevices)               \
    X(vkGetPhysicalDeviceProperties)            \
    X(vkGetPhysicalDeviceProperties2)           \
    X(vkGetPhysicalDeviceMemoryProperties)      \
    X(vkGetPhysicalDeviceMemoryProperties2)     \
    X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkEnumerateDeviceExtensionProperties)     \
    X(vkCreateDevice)                           \
    X(vkGetDeviceProcAddr)

#define WEFT_VK_DEVICE_FUNCTIONS(X)  \
    X(vkDestroyDevice)               \
    X(vkGetDeviceQueue)              \
    X(vkCreateBuffer)                \
    X(vkDestroyBuffer)               \
    X(vkGetBufferMemoryRequirements) \
    X(vkAllocateMemory)              \
    X(vkFreeMemory)                  \
    X(vkBindBufferMemory)            \
    X(vkMapMemory)                   \
    X(vkUnmapMemory)                 \
    X(vkCreateShaderModule)          \
    X(vkDestroyShaderModule)         \
    X(vkCreateDescriptorSetLayout)   \
    X(vkDestroyDescriptorSetLayout)  \
    X(vkCreatePipelineLayout)        \
    X(vkDestroyPipelineLayout)       \
    X(vkCreateComputePipelines)      \
    X(vkDestroyPipeline)             \
    X(vkCreateDescriptorPool)        \
    X(vkDestroyDescriptorPool)       \
    X(vkResetDescriptorPool)         \
    X(vkAllocateDescriptorSets)      \
    X(vkUpdateDescriptorSets)        \
    X(vkCreateCommandPool)           \
    X(vkDestroyCommandPool)          \
    X(vkAllocateCommandBuffers)      \
    X(vkResetCommandBuffer)          \
    X(vkBeginCommandBuffer)          \
    X(vkEndCommandBuffer)            \
    X(vkCmdBindPipeline)             \
    X(vkCmdBindDescriptorSets)       \
    X(vkCmdPushConstants)            \
    X(vkCmdDispatch)                 \
    X(vkCmdPipelineBarrier)          \
    X(vkCmdFillBuffer)               \
    X(vkCmdCopyBuffer)               \
    X(vkQueueSubmit)                 \
    X(vkQueueWaitIdle)               \
    X(vkCreateFence)                 \
    X(vkDestroyFence)                \
    X(vkWaitForFences)               \
    X(vkResetFences)                 \
    X(vkGetFenceStatus)

struct functions {
#define WEFT_VK_MEMBER(name) PFN_##name name = nullptr;
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
    WEFT_VK_GLOBAL_FUNCTIONS(WEFT_VK_MEMBER)
    WEFT_VK_INSTANCE_FUNCTIONS(WEFT_VK_MEMBER)
    WEFT_VK_DEVICE_FUNCTIONS(WEFT_VK_MEMBER)
#undef WEFT_VK_MEMBER
};

// The process-wide table. load_loader fills the global level (false, with `why`, when there is no
// loader); load_instance the rest, device functions included: through the instance they are the
// loader's trampolines, which dispatch to whichever device a call names.
functions &fn();
bool load_loader(std::string &why);
void load_instance(VkInstance instance);

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" ...
const char *result_name(VkResult r);

}  // namespace weft::vk
