// tests/backends/test_cpu_host_memory.cpp — host blocks: alignment, sizes, moves, and huge pages
// for large blocks where the kernel offers them.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "backends/cpu/host_memory.h"
#include "weft/core/error.h"

namespace {

using weft::cpu::host_block;
using weft::cpu::huge_page_bytes;

uintptr_t address(const host_block &b) {
    return reinterpret_cast<uintptr_t>(b.data());
}

TEST(CpuHostMemory, SmallBlocksAreCacheLineAligned) {
    for (size_t bytes : {size_t(0), size_t(1), size_t(63), size_t(65), size_t(4096), huge_page_bytes - 1}) {
        host_block b(bytes, "test memory");
        ASSERT_NE(b.data(), nullptr) << bytes;
        EXPECT_EQ(address(b) % 64, 0u) << bytes;
        EXPECT_EQ(b.size(), bytes == 0 ? 1 : bytes);
        std::memset(b.data(), 0xA5, b.size());  // every byte writable (ASan checks the bounds)
    }
}

TEST(CpuHostMemory, LargeBlocksAreHugePageAlignedAndWritable) {
    for (size_t bytes : {huge_page_bytes, huge_page_bytes + 1, 3 * huge_page_bytes + 12345}) {
        host_block b(bytes, "test memory");
        ASSERT_NE(b.data(), nullptr);
        EXPECT_EQ(address(b) % huge_page_bytes, 0u) << bytes;
        std::memset(b.data(), 0x5A, bytes);
        EXPECT_EQ(b.data()[bytes - 1], std::byte{0x5A});
    }
}

TEST(CpuHostMemory, MovesTransferOwnership) {
    host_block a(3 * huge_page_bytes, "test memory");
    std::byte *const at = a.data();
    host_block b(std::move(a));
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(b.data(), at);
    host_block c(100, "test memory");
    c = std::move(b);  // c's small block is freed, b's large one taken
    EXPECT_EQ(c.data(), at);
    EXPECT_EQ(c.size(), 3 * huge_page_bytes);
    EXPECT_EQ(b.data(), nullptr);
}

TEST(CpuHostMemory, ImpossibleSizeIsAClearError) {
    try {
        host_block b(SIZE_MAX - 10, "test memory");
        FAIL() << "allocated SIZE_MAX - 10 bytes";
    } catch (const weft::error &e) {
        EXPECT_NE(std::string(e.what()).find("test memory"), std::string::npos) << e.what();
    }
}

// Where transparent huge pages are given on request (and the kernel compacts memory for advised
// regions), a large block touched everywhere is backed by them: the point of the class, decode
// streaming weights without a page walk every 4 KiB.
std::string selected(const char *path) {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    const size_t open = line.find('['), close = line.find(']');
    return open < close && close != std::string::npos ? line.substr(open + 1, close - open - 1) : "";
}

TEST(CpuHostMemory, LargeBlocksGetHugePagesWhereOffered) {
    const std::string enabled = selected("/sys/kernel/mm/transparent_hugepage/enabled");
    const std::string defrag = selected("/sys/kernel/mm/transparent_hugepage/defrag");
    if ((enabled != "always" && enabled != "madvise") ||
        (defrag != "always" && defrag != "madvise" && defrag != "defer+madvise"))
        GTEST_SKIP() << "transparent huge pages are not given on request here (enabled [" << enabled
                     << "], defrag [" << defrag << "])";
    host_block b(8 * huge_page_bytes, "test memory");
    std::memset(b.data(), 1, b.size());
    // the block's mapping in /proc/self/smaps ("start-end perms ..." lines), then its AnonHugePages
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool in_block = false;
    long huge_kib = -1;
    while (std::getline(smaps, line)) {
        const size_t dash = line.find('-');
        if (dash != std::string::npos && dash <= 16 && line.find(' ') > dash &&
            std::isxdigit(static_cast<unsigned char>(line[0]))) {
            const uintptr_t start = std::stoull(line.substr(0, dash), nullptr, 16);
            const uintptr_t end = std::stoull(line.substr(dash + 1), nullptr, 16);
            in_block = start <= address(b) && address(b) < end;
        } else if (in_block && line.rfind("AnonHugePages:", 0) == 0) {
            huge_kib = std::stol(line.substr(14));
            break;
        }
    }
    ASSERT_GE(huge_kib, 0) << "the block's mapping is not in /proc/self/smaps";
    EXPECT_GT(huge_kib, 0) << "a 16 MiB block advised MADV_HUGEPAGE has no huge pages";
}

}  // namespace
