// tools/weft/device_options.h — the device options of the commands that compute with a model, with the
// reference engine's names: --device (-dev) and -ngl / --n-gpu-layers, and the model load they steer.
//
//   --device CPU (or none)  everything on the host
//   --device Vulkan0        offload to that GPU: -ngl N blocks (default: all of them and the output)
//   -ngl N                  offload N blocks to the first GPU; none found: a warning, the CPU
// A device the user named is forced: when it cannot take the model the command fails. One picked
// on the user's behalf falls back to the CPU, with a warning, when it cannot.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "weft/backends/vulkan.h"
#include "weft/core/device.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft::tool {

struct device_options {
    std::string device;      // --device: empty: the CPU unless -ngl asks for a GPU
    int n_gpu_layers = -1;   // -ngl; -1: not given
    bool fell_back = false;  // set by load: the offload failed and the CPU took the model

    static constexpr int all_layers = 999;

    // Picks the device to offload to, once (an unknown --device name throws weft::error listing the
    // devices): null for none; `forced` when the user named it.
    weft::device *offload_device() {
        if (resolved_) return offload_;
        resolved_ = true;
        if (device == "none" || n_gpu_layers == 0) return nullptr;
        if (!device.empty()) {
            weft::device &d = select_device(device);
            if (d.default_buffer_type().is_host()) {
                if (n_gpu_layers > 0)
                    std::fprintf(stderr, "weft: -ngl %d: %s is the host's device; nothing is offloaded\n",
                                 n_gpu_layers, d.name());
                return nullptr;
            }
            forced_ = true;
            return offload_ = &d;
        }
        if (n_gpu_layers < 0) return nullptr;
        for (weft::device *d : available_devices())
            if (!d->default_buffer_type().is_host()) return offload_ = d;
        std::fprintf(stderr, "weft: -ngl %d: no GPU device (Vulkan: %s); computing on the CPU\n",
                     n_gpu_layers, vulkan_status().c_str());
        return nullptr;
    }

    // The host device the context computes the rest on: the named one when it is a host device.
    void apply(inference_params &ip) const {
        if (!device.empty() && device != "none" && select_device(device).default_buffer_type().is_host())
            ip.device = device;
    }

    // Loads the model (through `load_model`, a function of model_params) with the offload the options
    // ask for; an offload the user did not force that fails is retried on the CPU, with a warning.
    template <class Load>
    auto load(model_params mp, const Load &load_model) {
        weft::device *d = offload_device();
        if (d) {
            mp.offload_device = d;
            mp.n_gpu_layers = n_gpu_layers < 0 ? all_layers : n_gpu_layers;
        }
        if (!d || forced_) return load_model(mp);
        try {
            return load_model(mp);
        } catch (const load_cancelled &) {
            throw;
        } catch (const error &e) {
            std::fprintf(stderr, "weft: %s; loading on the CPU instead\n", e.what());
            fell_back = true;
            mp.offload_device = nullptr;
            mp.n_gpu_layers = 0;
            return load_model(mp);
        }
    }

  private:
    bool resolved_ = false, forced_ = false;
    weft::device *offload_ = nullptr;
};

inline void add_device_options(CLI::App &app, device_options &o) {
    app.add_option("--device", o.device,
                   "the device to compute on, also -dev: CPU, none (the CPU), or a GPU that takes the -ngl "
                   "blocks (see `weft devices`; default: the CPU, or the first GPU with -ngl)");
    app.add_option("--n-gpu-layers,--gpu-layers", o.n_gpu_layers,
                   "also -ngl: blocks to offload to the GPU, the last ones; more than the model has "
                   "offloads the output head too (default with a GPU --device: all)")
        ->check(CLI::Range(0, 1 << 20));
}

// Where the model's blocks compute, to stderr: "weft run: device CPU (...): every layer's weights,
// KV cache and computation", or the offloaded blocks' device and the host's share.
inline void report_placement(const model &m, const inference_params &ip, const char *command) {
    const weft::device &host = select_device(ip.device);
    if (const weft::device *d = m.offload_device()) {
        const int64_t end = m.layers().end, n = m.n_offloaded_layers();
        std::fprintf(stderr,
                     "weft %s: blocks [%lld, %lld)%s on %s (%s): their weights, KV cache and computation "
                     "(ops it lacks on the host); the rest on %s\n",
                     command, (long long)(end - n), (long long)end,
                     m.output_offloaded() ? " and the output head" : "", d->name(), d->description().c_str(),
                     host.name());
        return;
    }
    std::fprintf(stderr, "weft %s: device %s (%s): every layer's weights, KV cache and computation\n",
                 command, host.name(), host.description().c_str());
}

// The devices and their memory as a table, and the Vulkan backend's state (`weft devices`).
inline void print_device_table() {
    std::printf("%-10s %-12s %10s %10s  %s\n", "name", "kind", "total GiB", "free GiB", "description");
    for (weft::device *d : available_devices()) {
        const device_memory mem = d->memory();
        std::printf("%-10s %-12s %10.2f %10.2f  %s\n", d->name(), device_kind_name(d->kind()),
                    double(mem.total) / double(size_t(1) << 30), double(mem.free) / double(size_t(1) << 30),
                    d->description().c_str());
    }
    std::printf("Vulkan: %s\n", vulkan_status().c_str());
}

}  // namespace weft::tool
