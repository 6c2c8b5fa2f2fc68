// src/backends/vulkan/vk_context.h — what the Vulkan device, its buffers and its backends share: one
// logical device per physical device (its queue, limits, memory types, the pipeline layout every
// shader uses and the pipelines, created once each), and the buffer type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backends/vulkan/vk_loader.h"
#include "backends/vulkan/vk_testing.h"
#include "weft/core/backend.h"
#include "weft/core/device.h"

namespace weft::vk {

// Every shader binds up to this many tensors (storage buffers 0..5 of set 0) and takes its
// parameters as push constants of at most push_bytes (the least every device offers).
constexpr uint32_t max_bindings = 6;
constexpr uint32_t push_bytes = 128;

// Throws weft::error "[vulkan] <what>: VK_ERROR_..." unless r is VK_SUCCESS.
void check(VkResult r, const char *what);

class device_context;

class vk_buffer_type final : public buffer_type {
  public:
    explicit vk_buffer_type(device_context &ctx) : ctx_(ctx) {}
    const char *name() const override;
    std::unique_ptr<backend_buffer> alloc(size_t size) override;
    size_t alignment() const override;
    bool is_host() const override { return false; }
    device_context &context() const { return ctx_; }

  private:
    device_context &ctx_;
};

class device_context {
  public:
    // Creates the logical device; throws weft::error naming the VkResult when it fails.
    device_context(VkPhysicalDevice phys, int index);
    ~device_context();
    device_context(const device_context &) = delete;
    device_context &operator=(const device_context &) = delete;

    std::string name;         // "Vulkan0"
    std::string description;  // deviceName, driver info, " (software)" for a CPU device
    VkPhysicalDevice phys = VK_NULL_HANDLE;
    VkDevice dev = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    uint32_t queue_family = 0;
    VkPhysicalDeviceProperties props{};
    VkPhysicalDeviceMemoryProperties mem_props{};
    bool has_memory_budget = false;
    uint32_t device_memory_type = UINT32_MAX;   // device local (host visible when mappable)
    bool device_memory_mappable = false;        // then buffers are mapped and copied with memcpy
    uint32_t staging_memory_type = UINT32_MAX;  // host visible and coherent
    size_t min_offset_alignment = 16;           // minStorageBufferOffsetAlignment
    size_t max_range = 0;                       // maxStorageBufferRange
    size_t max_alloc = 0;                       // maxMemoryAllocationSize
    size_t max_shared = 0;                      // maxComputeSharedMemorySize
    bool subgroup_arithmetic = false;           // subgroupAdd in compute shaders

    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout pipeline_layout = VK_NULL_HANDLE;

    vk_buffer_type &buffer_type() { return buffer_type_; }
    device_memory memory() const;
    // The compute pipeline of an embedded shader ("mul_mat_q4_0"), created on first use.
    VkPipeline pipeline(const std::string &shader);
    // Records commands with `record` into a one-off command buffer, submits it and waits (buffer
    // transfers through the staging buffer, fills).
    void submit_and_wait(const std::function<void(VkCommandBuffer)> &record);
    // vkQueueSubmit under the queue's lock (backends of one device share its queue).
    VkResult submit(const VkSubmitInfo &info, VkFence fence);

    // The host-visible staging buffer (at least `bytes`, grown on demand) and its mapping, under
    // staging_mutex.
    std::mutex staging_mutex;
    VkBuffer staging(size_t bytes, void **mapped);

  private:
    vk_buffer_type buffer_type_{*this};
    std::mutex queue_mutex_;
    std::mutex pipeline_mutex_;
    std::unordered_map<std::string, VkPipeline> pipelines_;
    std::mutex one_off_mutex_;
    VkCommandPool one_off_pool_ = VK_NULL_HANDLE;
    VkCommandBuffer one_off_cmd_ = VK_NULL_HANDLE;
    VkFence one_off_fence_ = VK_NULL_HANDLE;
    VkBuffer staging_buffer_ = VK_NULL_HANDLE;
    VkDeviceMemory staging_memory_ = VK_NULL_HANDLE;
    void *staging_mapped_ = nullptr;
    size_t staging_size_ = 0;
};

// The buffer behind a tensor of a Vulkan buffer: its VkBuffer and size (asserts the type).
struct buffer_ref {
    VkBuffer buffer;
    size_t size;
};
buffer_ref buffer_of(const backend_buffer &b);

std::unique_ptr<backend> make_vulkan_backend(device_context &ctx);

}  // namespace weft::vk
