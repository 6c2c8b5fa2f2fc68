// weft/core/device.h — devices: what a backend runs on (the CPU today; a GPU or a remote rank later),
// found by name in one process-wide registry.
//
// The model, the KV cache and the inference context ask a device for its buffer type and for a
// backend to compute with; they never name a concrete backend class. A backend registers its
// devices itself (the CPU backend: register_cpu_device in weft/backends/cpu.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/backend.h"

namespace weft {

enum class device_kind { cpu, gpu, accelerator, remote };
const char *device_kind_name(device_kind k);

struct device_memory {
    size_t total = 0;  // bytes; 0 when unknown
    size_t free = 0;
};

class device {
  public:
    virtual ~device() = default;
    virtual const char *name() const = 0;         // short and unique: "CPU", "CUDA0" ...
    virtual std::string description() const = 0;  // e.g. the CPU's model line
    virtual device_kind kind() const = 0;
    virtual device_memory memory() const = 0;
    // Where this device keeps tensors (weights, KV cache, compute memory).
    virtual buffer_type &default_buffer_type() = 0;
    // A backend computing on this device with n_threads host threads where that applies.
    virtual std::unique_ptr<backend> make_backend(int n_threads) = 0;
};

// Adds a device; its name must be new (weft::error otherwise). The registry owns it for the life
// of the process.
device &register_device(std::unique_ptr<device> d);
// Every registered device, in registration order.
std::vector<device *> devices();
// The device named `name` (case-insensitive); nullptr when none.
device *find_device(const std::string &name);
// The same, or weft::error naming the unknown device and listing the registered ones.
device &device_by_name(const std::string &name);

}  // namespace weft
