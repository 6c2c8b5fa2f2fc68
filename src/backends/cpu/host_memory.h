// src/backends/cpu/host_memory.h — the memory behind the CPU backend's buffers: large blocks on
// transparent huge pages.
//
// Decoding streams every weight once per token. With 4 KiB pages that is a TLB miss every 4 KiB,
// and in a virtual machine each miss walks two page tables (guest and host): measured on the
// bench machine (a 2-core Zen 4 VM), tg of a 1.1B Q4_0 model went from 15-63 t/s (bimodal, with
// the host's state) to a steady 68-75 t/s once the repacked weights sat on 2 MiB pages. Linux
// gives anonymous memory huge pages only when asked (THP "madvise" mode is the common default),
// so blocks of 2 MiB and more are mapped 2 MiB-aligned and advised MADV_HUGEPAGE; where the
// kernel has no huge pages to give, they are ordinary pages and nothing else changes.
#pragma once

#include <cstddef>

namespace weft::cpu {

// Blocks at least this large are placed on huge pages.
constexpr size_t huge_page_bytes = size_t(2) << 20;

// An owned block of host memory, 64-byte aligned (2 MiB aligned and huge-page backed when at least
// huge_page_bytes). Move-only; frees on destruction.
class host_block {
  public:
    host_block() = default;
    // Allocates `bytes` (at least 1); throws weft::error naming `what` when the memory is not there.
    host_block(size_t bytes, const char *what);
    ~host_block();
    host_block(host_block &&other) noexcept;
    host_block &operator=(host_block &&other) noexcept;
    host_block(const host_block &) = delete;
    host_block &operator=(const host_block &) = delete;

    std::byte *data() const { return base_; }
    size_t size() const { return size_; }

  private:
    static void release(std::byte *base, size_t size);

    std::byte *base_ = nullptr;
    size_t size_ = 0;
};

}  // namespace weft::cpu
