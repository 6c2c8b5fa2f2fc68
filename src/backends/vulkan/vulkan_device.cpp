// src/backends/vulkan/vulkan_device.cpp — the Vulkan devices: loader and instance, one logical device
// per physical device (WEFT_VK_VISIBLE_DEVICES picks them), the registry entries, pipelines.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "backends/vulkan/vk_context.h"
#include "backends/vulkan/vk_shaders.h"
#include "weft/backends/vulkan.h"
#include "weft/core/error.h"

namespace weft::vk {

void check(VkResult r, const char *what) {
    if (r != VK_SUCCESS) throw error(std::string("[vulkan] ") + what + ": " + result_name(r));
}

namespace {

bool has_extension(VkPhysicalDevice phys, const char *name) {
    uint32_t n = 0;
    if (fn().vkEnumerateDeviceExtensionProperties(phys, nullptr, &n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkExtensionProperties> exts(n);
    if (fn().vkEnumerateDeviceExtensionProperties(phys, nullptr, &n, exts.data()) != VK_SUCCESS) return false;
    for (const auto &e : exts)
        if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
}

}  // namespace

device_context::device_context(VkPhysicalDevice p, int index) : phys(p) {
    const functions &f = fn();
    name = "Vulkan" + std::to_string(index);
    f.vkGetPhysicalDeviceProperties(phys, &props);
    f.vkGetPhysicalDeviceMemoryProperties(phys, &mem_props);
    VkPhysicalDeviceDriverProperties driver{};
    driver.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
    VkPhysicalDeviceProperties2 props2{};
    props2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    const bool has_driver_props =
        props.apiVersion >= VK_API_VERSION_1_2 || has_extension(phys, "VK_KHR_driver_properties");
    if (has_driver_props) props2.pNext = &driver;
    if (f.vkGetPhysicalDeviceProperties2) f.vkGetPhysicalDeviceProperties2(phys, &props2);
    description = props.deviceName;
    if (has_driver_props && driver.driverName[0])
        description += std::string(" (") + driver.driverName + (driver.driverInfo[0] ? " " : "") +
                       driver.driverInfo + ")";
    if (props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) description += " (software)";
    has_memory_budget = has_extension(phys, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    min_offset_alignment = size_t(props.limits.minStorageBufferOffsetAlignment);
    max_range = size_t(props.limits.maxStorageBufferRange);
    max_shared = size_t(props.limits.maxComputeSharedMemorySize);
    VkPhysicalDeviceMaintenance3Properties maint3{};
    maint3.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES;
    props2.pNext = &maint3;
    if (f.vkGetPhysicalDeviceProperties2) f.vkGetPhysicalDeviceProperties2(phys, &props2);
    max_alloc = maint3.maxMemoryAllocationSize ? size_t(maint3.maxMemoryAllocationSize) : size_t(1) << 32;
    VkPhysicalDeviceSubgroupProperties subgroup{};
    subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
    props2.pNext = &subgroup;
    if (f.vkGetPhysicalDeviceProperties2) f.vkGetPhysicalDeviceProperties2(phys, &props2);
    subgroup_arithmetic = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                          (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);

    // memory: device local, preferably host visible and coherent (mapped once, memcpy); staging: host
    // visible and coherent
    const VkMemoryPropertyFlags local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const VkMemoryPropertyFlags host =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (uint32_t i = 0; i < mem_props.memoryTypeCount; ++i) {
        const VkMemoryPropertyFlags fl = mem_props.memoryTypes[i].propertyFlags;
        if ((fl & (local | host)) == (local | host) && !device_memory_mappable) {
            device_memory_type = i;
            device_memory_mappable = true;
        } else if ((fl & local) == local && device_memory_type == UINT32_MAX) {
            device_memory_type = i;
        }
        if ((fl & host) == host && staging_memory_type == UINT32_MAX) staging_memory_type = i;
    }
    // A mappable device-local type on a heap much smaller than the main one (the 256 MiB BAR window of
    // a discrete GPU) would cap every buffer: then use the largest device-local heap with staging.
    if (device_memory_mappable && props.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) {
        const uint32_t heap = mem_props.memoryTypes[device_memory_type].heapIndex;
        for (uint32_t i = 0; i < mem_props.memoryTypeCount; ++i) {
            const auto &t = mem_props.memoryTypes[i];
            if ((t.propertyFlags & local) &&
                mem_props.memoryHeaps[t.heapIndex].size > 2 * mem_props.memoryHeaps[heap].size) {
                device_memory_type = i;
                device_memory_mappable = false;
                break;
            }
        }
    }
    if (device_memory_type == UINT32_MAX) {
        // no device-local type (some software drivers): any host-visible one
        device_memory_type = staging_memory_type;
        device_memory_mappable = true;
    }
    if (device_memory_type == UINT32_MAX) throw error("[vulkan] " + name + ": no usable memory type");

    uint32_t n_families = 0;
    f.vkGetPhysicalDeviceQueueFamilyProperties(phys, &n_families, nullptr);
    std::vector<VkQueueFamilyProperties> families(n_families);
    f.vkGetPhysicalDeviceQueueFamilyProperties(phys, &n_families, families.data());
    queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < n_families; ++i)  // a compute queue, one that also draws when there is no other
        if ((families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) &&
            (queue_family == UINT32_MAX || !(families[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)))
            queue_family = i;
    if (queue_family == UINT32_MAX) throw error("[vulkan] " + name + ": no compute queue");

    const float priority = 1.0f;
    VkDeviceQueueCreateInfo qinfo{};
    qinfo.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qinfo.queueFamilyIndex = queue_family;
    qinfo.queueCount = 1;
    qinfo.pQueuePriorities = &priority;
    VkDeviceCreateInfo dinfo{};
    dinfo.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    dinfo.queueCreateInfoCount = 1;
    dinfo.pQueueCreateInfos = &qinfo;
    check(f.vkCreateDevice(phys, &dinfo, nullptr, &dev), "vkCreateDevice");
    f.vkGetDeviceQueue(dev, queue_family, 0, &queue);

    VkDescriptorSetLayoutBinding bindings[max_bindings]{};
    for (uint32_t i = 0; i < max_bindings; ++i) {
        bindings[i].binding = i;
        bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        bindings[i].descriptorCount = 1;
        bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo linfo{};
    linfo.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    linfo.bindingCount = max_bindings;
    linfo.pBindings = bindings;
    check(f.vkCreateDescriptorSetLayout(dev, &linfo, nullptr, &set_layout), "vkCreateDescriptorSetLayout");
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo pinfo{};
    pinfo.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    pinfo.setLayoutCount = 1;
    pinfo.pSetLayouts = &set_layout;
    pinfo.pushConstantRangeCount = 1;
    pinfo.pPushConstantRanges = &range;
    check(f.vkCreatePipelineLayout(dev, &pinfo, nullptr, &pipeline_layout), "vkCreatePipelineLayout");

    VkCommandPoolCreateInfo cinfo{};
    cinfo.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    cinfo.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    cinfo.queueFamilyIndex = queue_family;
    check(f.vkCreateCommandPool(dev, &cinfo, nullptr, &one_off_pool_), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ainfo{};
    ainfo.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ainfo.commandPool = one_off_pool_;
    ainfo.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ainfo.commandBufferCount = 1;
    check(f.vkAllocateCommandBuffers(dev, &ainfo, &one_off_cmd_), "vkAllocateCommandBuffers");
    VkFenceCreateInfo finfo{};
    finfo.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    check(f.vkCreateFence(dev, &finfo, nullptr, &one_off_fence_), "vkCreateFence");
}

device_context::~device_context() {
    // Devices live in the registry until the process exits; the driver may already be going away
    // then, so nothing is destroyed here (the OS takes the memory back).
}

device_memory device_context::memory() const {
    device_memory m;
    for (uint32_t h = 0; h < mem_props.memoryHeapCount; ++h)
        if (mem_props.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
            m.total = std::max(m.total, size_t(mem_props.memoryHeaps[h].size));
    if (m.total == 0 && mem_props.memoryHeapCount > 0) m.total = size_t(mem_props.memoryHeaps[0].size);
    m.free = m.total;
    if (has_memory_budget && fn().vkGetPhysicalDeviceMemoryProperties2) {
        VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{};
        budget.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT;
        VkPhysicalDeviceMemoryProperties2 p2{};
        p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2;
        p2.pNext = &budget;
        fn().vkGetPhysicalDeviceMemoryProperties2(phys, &p2);
        for (uint32_t h = 0; h < p2.memoryProperties.memoryHeapCount; ++h)
            if (size_t(p2.memoryProperties.memoryHeaps[h].size) == m.total && budget.heapBudget[h] > 0) {
                const size_t used = size_t(budget.heapUsage[h]), cap = size_t(budget.heapBudget[h]);
                m.free = cap > used ? cap - used : 0;
                break;
            }
    }
    return m;
}

VkPipeline device_context::pipeline(const std::string &shader) {
    std::lock_guard<std::mutex> lock(pipeline_mutex_);
    if (auto it = pipelines_.find(shader); it != pipelines_.end()) return it->second;
    const shader_code *code = nullptr;
    for (const shader_code &s : embedded_shaders())
        if (shader == s.name) code = &s;
    WEFT_ASSERT(code != nullptr);
    const functions &f = fn();
    VkShaderModuleCreateInfo minfo{};
    minfo.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    minfo.codeSize = code->n_words * sizeof(uint32_t);
    minfo.pCode = code->words;
    VkShaderModule module = VK_NULL_HANDLE;
    check(f.vkCreateShaderModule(dev, &minfo, nullptr, &module), "vkCreateShaderModule");
    VkComputePipelineCreateInfo cinfo{};
    cinfo.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    cinfo.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cinfo.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cinfo.stage.module = module;
    cinfo.stage.pName = "main";
    cinfo.layout = pipeline_layout;
    VkPipeline pipe = VK_NULL_HANDLE;
    const VkResult r = f.vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cinfo, nullptr, &pipe);
    f.vkDestroyShaderModule(dev, module, nullptr);
    check(r, ("vkCreateComputePipelines(" + shader + ")").c_str());
    pipelines_[shader] = pipe;
    return pipe;
}

VkResult device_context::submit(const VkSubmitInfo &info, VkFence fence) {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    return fn().vkQueueSubmit(queue, 1, &info, fence);
}

void device_context::submit_and_wait(const std::function<void(VkCommandBuffer)> &record) {
    std::lock_guard<std::mutex> lock(one_off_mutex_);
    const functions &f = fn();
    check(f.vkResetCommandBuffer(one_off_cmd_, 0), "vkResetCommandBuffer");
    VkCommandBufferBeginInfo binfo{};
    binfo.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    binfo.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(f.vkBeginCommandBuffer(one_off_cmd_, &binfo), "vkBeginCommandBuffer");
    record(one_off_cmd_);
    // everything earlier on the queue (other backends' graphs) comes first, and the host sees the result
    VkMemoryBarrier barrier{};
    barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    f.vkCmdPipelineBarrier(one_off_cmd_,
                           VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                           VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0, nullptr);
    check(f.vkEndCommandBuffer(one_off_cmd_), "vkEndCommandBuffer");
    VkSubmitInfo sinfo{};
    sinfo.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    sinfo.commandBufferCount = 1;
    sinfo.pCommandBuffers = &one_off_cmd_;
    check(f.vkResetFences(dev, 1, &one_off_fence_), "vkResetFences");
    check(submit(sinfo, one_off_fence_), "vkQueueSubmit");
    check(f.vkWaitForFences(dev, 1, &one_off_fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
}

VkBuffer device_context::staging(size_t bytes, void **mapped) {
    if (staging_size_ < bytes) {
        const functions &f = fn();
        if (staging_buffer_) {
            f.vkUnmapMemory(dev, staging_memory_);
            f.vkDestroyBuffer(dev, staging_buffer_, nullptr);
            f.vkFreeMemory(dev, staging_memory_, nullptr);
            staging_buffer_ = VK_NULL_HANDLE;
            staging_size_ = 0;
        }
        VkBufferCreateInfo binfo{};
        binfo.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        binfo.size = bytes;
        binfo.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        binfo.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
        check(f.vkCreateBuffer(dev, &binfo, nullptr, &staging_buffer_), "vkCreateBuffer (staging)");
        VkMemoryRequirements req;
        f.vkGetBufferMemoryRequirements(dev, staging_buffer_, &req);
        VkMemoryAllocateInfo ainfo{};
        ainfo.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
        ainfo.allocationSize = req.size;
        ainfo.memoryTypeIndex = staging_memory_type;
        check(f.vkAllocateMemory(dev, &ainfo, nullptr, &staging_memory_), "vkAllocateMemory (staging)");
        check(f.vkBindBufferMemory(dev, staging_buffer_, staging_memory_, 0), "vkBindBufferMemory (staging)");
        check(f.vkMapMemory(dev, staging_memory_, 0, VK_WHOLE_SIZE, 0, &staging_mapped_),
              "vkMapMemory (staging)");
        staging_size_ = bytes;
    }
    *mapped = staging_mapped_;
    return staging_buffer_;
}

namespace {

class vulkan_device final : public device {
  public:
    explicit vulkan_device(std::unique_ptr<device_context> ctx) : ctx_(std::move(ctx)) {}
    const char *name() const override { return ctx_->name.c_str(); }
    std::string description() const override { return ctx_->description; }
    device_kind kind() const override { return device_kind::gpu; }
    device_memory memory() const override { return ctx_->memory(); }
    buffer_type &default_buffer_type() override { return ctx_->buffer_type(); }
    std::unique_ptr<backend> make_backend(int n_threads) override {
        (void)n_threads;  // the device computes; no host threads
        return make_vulkan_backend(*ctx_);
    }

  private:
    std::unique_ptr<device_context> ctx_;
};

std::mutex status_mutex;
std::string status_text;

void set_status(std::string s) {
    std::lock_guard<std::mutex> lock(status_mutex);
    status_text = std::move(s);
}

// The indices WEFT_VK_VISIBLE_DEVICES names; all when it is unset.
std::vector<bool> visible_devices(size_t n) {
    const char *env = std::getenv("WEFT_VK_VISIBLE_DEVICES");
    if (env == nullptr) return std::vector<bool>(n, true);
    std::vector<bool> visible(n, false);
    std::stringstream in(env);
    for (std::string item; std::getline(in, item, ',');) {
        char *end = nullptr;
        const long i = std::strtol(item.c_str(), &end, 10);
        if (end != item.c_str() && i >= 0 && size_t(i) < n) visible[size_t(i)] = true;
    }
    return visible;
}

void register_all() {
    std::string why;
    if (!load_loader(why)) return set_status(why);
    const functions &f = fn();
    uint32_t api = VK_API_VERSION_1_0;
    if (f.vkEnumerateInstanceVersion) f.vkEnumerateInstanceVersion(&api);
    if (api < VK_API_VERSION_1_1)
        return set_status("the Vulkan loader supports only Vulkan 1.0 (1.1 needed)");
    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "weft";
    app.pEngineName = "weft";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo iinfo{};
    iinfo.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    iinfo.pApplicationInfo = &app;
    VkInstance instance = VK_NULL_HANDLE;
    if (const VkResult r = f.vkCreateInstance(&iinfo, nullptr, &instance); r != VK_SUCCESS)
        return set_status(std::string("vkCreateInstance failed: ") + result_name(r));
    load_instance(instance);  // the instance lives as long as the process: devices are never unregistered
    uint32_t n = 0;
    if (const VkResult r = f.vkEnumeratePhysicalDevices(instance, &n, nullptr); r != VK_SUCCESS)
        return set_status(std::string("vkEnumeratePhysicalDevices failed: ") + result_name(r));
    std::vector<VkPhysicalDevice> phys(n);
    if (n > 0) f.vkEnumeratePhysicalDevices(instance, &n, phys.data());
    const std::vector<bool> visible = visible_devices(phys.size());
    int registered = 0;
    std::string failures;
    for (size_t i = 0; i < phys.size(); ++i) {
        if (!visible[i]) continue;
        VkPhysicalDeviceProperties props;
        f.vkGetPhysicalDeviceProperties(phys[i], &props);
        if (props.apiVersion < VK_API_VERSION_1_1) continue;
        try {
            register_device(
                std::make_unique<vulkan_device>(std::make_unique<device_context>(phys[i], registered)));
            ++registered;
        } catch (const std::exception &e) {
            failures += std::string(failures.empty() ? "" : "; ") + props.deviceName + ": " + e.what();
        }
    }
    if (registered > 0)
        set_status(std::to_string(registered) + " device(s)");
    else
        set_status(failures.empty() ? "no Vulkan device" : "no usable Vulkan device: " + failures);
}

}  // namespace

}  // namespace weft::vk

namespace weft {

void register_vulkan_devices() {
    static std::once_flag once;
    std::call_once(once, [] {
        try {
            vk::register_all();
        } catch (const std::exception &e) {
            vk::set_status(std::string("Vulkan initialization failed: ") + e.what());
        }
    });
}

std::string vulkan_status() {
    std::lock_guard<std::mutex> lock(vk::status_mutex);
    return vk::status_text;
}

bool vulkan_built() {
    return true;
}

}  // namespace weft
