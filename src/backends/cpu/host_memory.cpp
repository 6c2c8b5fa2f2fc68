// src/backends/cpu/host_memory.cpp — host blocks: small ones from the heap, large ones mapped
// anonymously on 2 MiB boundaries and advised MADV_HUGEPAGE (see host_memory.h).
#include "backends/cpu/host_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "weft/core/checked.h"
#include "weft/core/error.h"

namespace weft::cpu {

namespace {

constexpr size_t small_alignment = 64;

// `bytes` rounded up to whole huge pages, mapped at a huge-page boundary: one mapping of a page
// more than needed, the misaligned head and the tail unmapped again.
std::byte *map_huge(size_t bytes) {
    const size_t length = align_up(bytes, huge_page_bytes);
    if (length < bytes || length + huge_page_bytes < length) return nullptr;
    void *raw =
        ::mmap(nullptr, length + huge_page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const auto start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = align_up(start, huge_page_bytes);
    if (aligned > start) ::munmap(raw, aligned - start);
    const size_t tail = start + huge_page_bytes - aligned;
    if (tail) ::munmap(reinterpret_cast<void *>(aligned + length), tail);
    // advice only: without transparent huge pages the block is ordinary memory
    ::madvise(reinterpret_cast<void *>(aligned), length, MADV_HUGEPAGE);
    return reinterpret_cast<std::byte *>(aligned);
}

}  // namespace

host_block::host_block(size_t bytes, const char *what) : size_(bytes == 0 ? 1 : bytes) {
    if (size_ >= huge_page_bytes)
        base_ = map_huge(size_);
    else
        base_ =
            static_cast<std::byte *>(std::aligned_alloc(small_alignment, align_up(size_, small_alignment)));
    if (base_ == nullptr) throw error("[cpu] cannot allocate " + std::to_string(bytes) + " bytes of " + what);
}

host_block::~host_block() {
    release(base_, size_);
}

host_block::host_block(host_block &&other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

host_block &host_block::operator=(host_block &&other) noexcept {
    if (this != &other) {
        release(base_, size_);
        base_ = std::exchange(other.base_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void host_block::release(std::byte *base, size_t size) {
    if (base == nullptr) return;
    if (size >= huge_page_bytes)
        ::munmap(base, align_up(size, huge_page_bytes));
    else
        std::free(base);
}

}  // namespace weft::cpu
