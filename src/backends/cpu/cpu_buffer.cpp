// src/backends/cpu/cpu_buffer.cpp — host buffers: 64-byte aligned heap blocks and wrapped host memory.
#include <cstdlib>
#include <cstring>
#include <string>

#include "weft/backends/cpu.h"
#include "weft/core/error.h"

namespace weft {

namespace {

constexpr size_t host_alignment = 64;

class cpu_buffer final : public backend_buffer {
  public:
    // owned: the block came from cpu_host_buffer_type::alloc and is freed here.
    cpu_buffer(buffer_type &type, void *base, size_t size, bool owned)
        : type_(type), base_(base), size_(size), owned_(owned) {}
    ~cpu_buffer() override {
        if (owned_) std::free(base_);
    }

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
    void *base_;
    size_t size_;
    bool owned_;
};

class cpu_host_buffer_type final : public buffer_type {
  public:
    const char *name() const override { return "CPU"; }
    size_t alignment() const override { return host_alignment; }
    bool is_host() const override { return true; }

    std::unique_ptr<backend_buffer> alloc(size_t size) override {
        // aligned_alloc wants a multiple of the alignment; a zero-sized buffer still gets a block
        const size_t bytes =
            std::max(host_alignment, (size + host_alignment - 1) / host_alignment * host_alignment);
        void *block = std::aligned_alloc(host_alignment, bytes);
        if (block == nullptr)
            throw error("[cpu] cannot allocate a host buffer of " + std::to_string(size) + " bytes");
        return std::make_unique<cpu_buffer>(*this, block, size, true);
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
    return std::make_unique<cpu_buffer>(cpu_buffer_type(), ptr, size, false);
}

}  // namespace weft
