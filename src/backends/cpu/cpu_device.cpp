// src/backends/cpu/cpu_device.cpp — the CPU as a device: host memory, the CPU backend.
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "weft/backends/cpu.h"
#include "weft/core/device.h"

namespace weft {

namespace {

class cpu_device final : public device {
  public:
    const char *name() const override { return "CPU"; }
    std::string description() const override {
        std::ifstream in("/proc/cpuinfo");
        for (std::string line; std::getline(in, line);)
            if (line.rfind("model name", 0) == 0)
                if (const size_t colon = line.find(':'); colon != std::string::npos)
                    return line.substr(line.find_first_not_of(' ', colon + 1)) + ", " +
                           std::to_string(std::thread::hardware_concurrency()) + " threads";
        return std::to_string(std::thread::hardware_concurrency()) + " threads";
    }
    device_kind kind() const override { return device_kind::cpu; }
    device_memory memory() const override {
        const long page = ::sysconf(_SC_PAGESIZE);
        const long total = ::sysconf(_SC_PHYS_PAGES), avail = ::sysconf(_SC_AVPHYS_PAGES);
        device_memory m;
        if (page > 0 && total > 0) m.total = size_t(total) * size_t(page);
        if (page > 0 && avail > 0) m.free = size_t(avail) * size_t(page);
        return m;
    }
    buffer_type &default_buffer_type() override { return cpu_buffer_type(); }
    std::unique_ptr<backend> make_backend(int n_threads) override {
        return std::make_unique<cpu_backend>(n_threads);
    }
};

}  // namespace

void register_cpu_device() {
    static std::once_flag once;
    std::call_once(once, [] { register_device(std::make_unique<cpu_device>()); });
}

}  // namespace weft
