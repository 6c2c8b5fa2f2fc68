// src/backends/vulkan/vulkan_buffer.cpp — device memory: a VkBuffer bound to one allocation, mapped once
// when the memory is host visible (copies are a memcpy) and copied through the staging buffer otherwise.
//
// base() is a made-up address, unique per buffer and far from any real one: tensors keep
// data = base() + offset, and the backend binds the buffer at that offset.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "backends/vulkan/vk_context.h"
#include "weft/core/error.h"

namespace weft::vk {

namespace {

std::string mib(size_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / double(1 << 20));
    return text;
}

std::atomic<bool> force_staging{false};

// a fresh fake base address: 1 TiB apart, never dereferenced
void *next_base() {
    static std::atomic<uintptr_t> next{1};
    return reinterpret_cast<void *>(next.fetch_add(1) << 40);
}

class vk_buffer final : public backend_buffer {
  public:
    vk_buffer(vk_buffer_type &type, size_t size)
        : type_(type), ctx_(type.context()), size_(size), base_(next_base()) {
        const functions &f = fn();
        const size_t bytes = std::max<size_t>(size, 256);
        VkBufferCreateInfo binfo{};
        binfo.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        binfo.size = bytes;
        binfo.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                      VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        binfo.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
        if (f.vkCreateBuffer(ctx_.dev, &binfo, nullptr, &buffer_) != VK_SUCCESS) fail(size);
        VkMemoryRequirements req;
        f.vkGetBufferMemoryRequirements(ctx_.dev, buffer_, &req);
        VkMemoryAllocateInfo ainfo{};
        ainfo.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
        ainfo.allocationSize = req.size;
        ainfo.memoryTypeIndex = ctx_.device_memory_type;
        if (!(req.memoryTypeBits & (1u << ctx_.device_memory_type))) {
            release();
            throw error("[vulkan] " + ctx_.name + ": no memory type for a buffer of " + mib(size));
        }
        if (f.vkAllocateMemory(ctx_.dev, &ainfo, nullptr, &memory_) != VK_SUCCESS) {
            release();
            fail(size);
        }
        if (const VkResult r = f.vkBindBufferMemory(ctx_.dev, buffer_, memory_, 0); r != VK_SUCCESS) {
            release();
            check(r, "vkBindBufferMemory");
        }
        if (ctx_.device_memory_mappable && !force_staging.load() &&
            f.vkMapMemory(ctx_.dev, memory_, 0, VK_WHOLE_SIZE, 0, &mapped_) != VK_SUCCESS) {
            release();
            throw error("[vulkan] " + ctx_.name + ": could not map a buffer of " + mib(size));
        }
    }
    ~vk_buffer() override { release(); }

    buffer_type &type() const override { return type_; }
    void *base() const override { return base_; }
    size_t size() const override { return size_; }
    VkBuffer handle() const { return buffer_; }
    size_t vk_size() const { return std::max<size_t>(size_, 256); }

    void set_tensor(tensor &t, const void *src, size_t offset, size_t n) override {
        const size_t at = offset_of(t) + offset;
        WEFT_ASSERT(at + n <= size_);
        if (n == 0) return;
        if (mapped_) {
            std::memcpy(static_cast<char *>(mapped_) + at, src, n);
            return;
        }
        through_staging(at, n,
                        [&](void *staging, size_t done, size_t chunk) {
                            std::memcpy(staging, static_cast<const char *>(src) + done, chunk);
                        },
                        {});
    }

    void get_tensor(const tensor &t, void *dst, size_t offset, size_t n) const override {
        const size_t at = offset_of(t) + offset;
        WEFT_ASSERT(at + n <= size_);
        if (n == 0) return;
        if (mapped_) {
            std::memcpy(dst, static_cast<const char *>(mapped_) + at, n);
            return;
        }
        through_staging(at, n, {}, [&](const void *staging, size_t done, size_t chunk) {
            std::memcpy(static_cast<char *>(dst) + done, staging, chunk);
        });
    }

    // Bytes [at, at + n) of this buffer to or from the host, a staging chunk at a time: `fill`
    // (uploads) writes each chunk into the staging memory before the copy into the buffer, `drain`
    // (downloads) reads it after the copy out of the buffer.
    void through_staging(size_t at, size_t n, const std::function<void(void *, size_t, size_t)> &fill,
                         const std::function<void(const void *, size_t, size_t)> &drain) const {
        std::lock_guard<std::mutex> lock(ctx_.staging_mutex);
        for (size_t done = 0; done < n;) {
            const size_t chunk = std::min(n - done, staging_chunk);
            void *mapped = nullptr;
            VkBuffer staging = ctx_.staging(chunk, &mapped);
            if (fill) fill(mapped, done, chunk);
            ctx_.submit_and_wait([&](VkCommandBuffer cmd) {
                const VkBufferCopy region =
                    fill ? VkBufferCopy{0, at + done, chunk} : VkBufferCopy{at + done, 0, chunk};
                fn().vkCmdCopyBuffer(cmd, fill ? staging : buffer_, fill ? buffer_ : staging, 1, &region);
            });
            if (drain) drain(mapped, done, chunk);
            done += chunk;
        }
    }

    void clear(uint8_t value) override {
        if (mapped_) {
            std::memset(mapped_, value, size_);
            return;
        }
        const uint32_t word = uint32_t(value) * 0x01010101u;
        ctx_.submit_and_wait(
            [&](VkCommandBuffer cmd) { fn().vkCmdFillBuffer(cmd, buffer_, 0, VK_WHOLE_SIZE, word); });
    }

  private:
    static constexpr size_t staging_chunk = size_t(64) << 20;

    size_t offset_of(const tensor &t) const {
        WEFT_ASSERT(t.buffer == this && t.data != nullptr);
        return size_t(static_cast<const char *>(t.data) - static_cast<const char *>(base_));
    }

    [[noreturn]] void fail(size_t size) {
        throw error("[vulkan] out of device memory: " + mib(size) + " on " + ctx_.name);
    }

    void release() {
        const functions &f = fn();
        if (mapped_) f.vkUnmapMemory(ctx_.dev, memory_);
        if (buffer_) f.vkDestroyBuffer(ctx_.dev, buffer_, nullptr);
        if (memory_) f.vkFreeMemory(ctx_.dev, memory_, nullptr);
        mapped_ = nullptr;
        buffer_ = VK_NULL_HANDLE;
        memory_ = VK_NULL_HANDLE;
    }

    vk_buffer_type &type_;
    device_context &ctx_;
    size_t size_;
    void *base_;
    VkBuffer buffer_ = VK_NULL_HANDLE;
    VkDeviceMemory memory_ = VK_NULL_HANDLE;
    void *mapped_ = nullptr;
};

}  // namespace

const char *vk_buffer_type::name() const {
    return ctx_.name.c_str();
}

size_t vk_buffer_type::alignment() const {
    return std::max<size_t>(64, ctx_.min_offset_alignment);
}

std::unique_ptr<backend_buffer> vk_buffer_type::alloc(size_t size) {
    if (size > ctx_.max_alloc)
        throw error("[vulkan] out of device memory: " + mib(size) + " on " + ctx_.name +
                    " (one allocation may be at most " + mib(ctx_.max_alloc) + ")");
    return std::make_unique<vk_buffer>(*this, size);
}

void set_force_staging(bool on) {
    force_staging.store(on);
}

buffer_ref buffer_of(const backend_buffer &b) {
    const auto *vb = dynamic_cast<const vk_buffer *>(&b);
    WEFT_ASSERT(vb != nullptr);
    return {vb->handle(), vb->vk_size()};
}

}  // namespace weft::vk
