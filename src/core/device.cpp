// src/core/device.cpp — the device registry.
#include "weft/core/device.h"

#include <algorithm>
#include <cctype>
#include <mutex>

#include "weft/core/error.h"

namespace weft {

namespace {

struct registry {
    std::mutex mutex;
    std::vector<std::unique_ptr<device>> devices;
};

registry &the_registry() {
    static registry r;
    return r;
}

bool same_name(const std::string &a, const char *b) {
    const std::string_view bv(b);
    return a.size() == bv.size() && std::equal(a.begin(), a.end(), bv.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

}  // namespace

const char *device_kind_name(device_kind k) {
    switch (k) {
        case device_kind::cpu:
            return "cpu";
        case device_kind::gpu:
            return "gpu";
        case device_kind::accelerator:
            return "accelerator";
        case device_kind::remote:
            return "remote";
    }
    return "?";
}

device &register_device(std::unique_ptr<device> d) {
    if (!d) throw error("register_device: no device");
    registry &r = the_registry();
    std::lock_guard lock(r.mutex);
    for (const auto &have : r.devices)
        if (same_name(have->name(), d->name()))
            throw error(std::string("register_device: a device named '") + d->name() +
                        "' is already registered");
    r.devices.push_back(std::move(d));
    return *r.devices.back();
}

std::vector<device *> devices() {
    registry &r = the_registry();
    std::lock_guard lock(r.mutex);
    std::vector<device *> out;
    for (const auto &d : r.devices) out.push_back(d.get());
    return out;
}

device *find_device(const std::string &name) {
    for (device *d : devices())
        if (same_name(name, d->name())) return d;
    return nullptr;
}

device &device_by_name(const std::string &name) {
    if (device *d = find_device(name)) return *d;
    std::string known;
    for (device *d : devices()) known += (known.empty() ? "" : ", ") + std::string(d->name());
    throw error("unknown device " + quoted(name) + "; the devices are: " + (known.empty() ? "none" : known));
}

}  // namespace weft
