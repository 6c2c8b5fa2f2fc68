// src/backends/cpu/cpu_buffer.cpp — host buffers: host blocks (host_memory.h) and wrapped host memory.
#include <cstring>
#include <string>
#include <utility>

#include "backends/cpu/host_memory.h"
#include "weft/backends/cpu.h"
#include "weft/core/error.h"

namespace weft {

namespace {

constexpr size_t host_alignment = 64;  // host_block's alignment

class cpu_buffer final : public backend_buffer {
  public:
    // Wraps memory owned elsewhere.
    cpu_buffer(buffer_type &type, void *base, size_t size) : type_(type), base_(base), size_(size) {}
    // Owns `block` (from cpu_host_buffer_type::alloc), freed with the buffer.
    cpu_buffer(buffer_type &type, cpu::host_block block, size_t size)
        : type_(type), block_(std::move(block)), base_(block_.data()), size_(size) {}

    buffer_type &type() const override { return type_; }
    void *base() const override { return base_; }
    size_t size() const override { return size_; }

    void set_tensor(tensor &t, const void *src, size_t offset, size_t n) override {
        check_range(t, offset, n);
        std::memcpy(static_cast<char *>(t.data) + offset, src, n);
    }
    void get_tensor(const tensor &t, void *dst, size_t offset, size_t n) const override {
        check_range(t, offset, n);
        std::memcpy(dst, static_cast<const char *>(t.data) + offset, n);
    }
    void clear(uint8_t value) override {
        if (size_) std::memset(base_, value, size_);
    }

  private:
    void check_range(const tensor &t, size_t offset, size_t n) const {
        WEFT_ASSERT(t.data != nullptr);
        WEFT_ASSERT(offset <= t.nbytes() && n <= t.nbytes() - offset);
        const auto *begin = static_cast<const char *>(base_);
        const auto *at = static_cast<const char *>(t.data) + offset;
        WEFT_ASSERT(at >= begin && at + n <= begin + size_);
    }

    buffer_type &type_;
    cpu::host_block block_;  // empty when the memory is not the buffer's own
    void *base_;
    size_t size_;
};

class cpu_host_buffer_type final : public buffer_type {
  public:
    const char *name() const override { return "CPU"; }
    size_t alignment() const override { return host_alignment; }
    bool is_host() const override { return true; }

    std::unique_ptr<backend_buffer> alloc(size_t size) override {
        // a zero-sized buffer still gets a block; large ones sit on huge pages (host_memory.h)
        return std::make_unique<cpu_buffer>(*this, cpu::host_block(size, "host buffer memory"), size);
    }
};

}  // namespace

buffer_type &cpu_buffer_type() {
    static cpu_host_buffer_type type;
    return type;
}

std::unique_ptr<backend_buffer> cpu_buffer_from_host_ptr(void *ptr, size_t size) {
    if (ptr == nullptr && size != 0)
        throw error("[cpu] cpu_buffer_from_host_ptr: null pointer for " + std::to_string(size) + " bytes");
    return std::make_unique<cpu_buffer>(cpu_buffer_type(), ptr, size);
}

}  // namespace weft
