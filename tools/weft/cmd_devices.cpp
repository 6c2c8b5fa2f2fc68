// tools/weft/cmd_devices.cpp — `weft devices [--json]`: the devices weft can compute on, with their memory.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "weft/backends/vulkan.h"
#include "weft/command.h"
#include "weft/core/device.h"
#include "weft/device_options.h"
#include "weft/runtime/context.h"

namespace weft::tool {
namespace {

using json = nlohmann::ordered_json;

int devices_main(int argc, char **argv) {
    CLI::App app{
        "Lists the devices weft can compute on: name (what --device takes), kind, description and "
        "memory (total, free). GPUs take the blocks -ngl offloads; the CPU computes the rest. "
        "Without a GPU the Vulkan line says why (no loader, no device, a build without Vulkan).",
        "weft devices"};
    bool as_json = false;
    app.add_flag("--json", as_json, "print one JSON object instead of the table");
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
    const std::vector<device *> all = available_devices();
    const std::string vulkan = vulkan_status();
    if (as_json) {
        json out;
        out["devices"] = json::array();
        for (device *d : all) {
            const device_memory mem = d->memory();
            out["devices"].push_back({{"name", d->name()},
                                      {"kind", device_kind_name(d->kind())},
                                      {"description", d->description()},
                                      {"memory_total", mem.total},
                                      {"memory_free", mem.free},
                                      {"host_memory", d->default_buffer_type().is_host()}});
        }
        out["vulkan"] = {{"built", vulkan_built()}, {"status", vulkan}};
        std::cout << out.dump(2) << '\n';
        return 0;
    }
    print_device_table();
    return 0;
}

const bool registered_devices = register_command(
    {"devices", "list the devices weft computes on (CPU, Vulkan GPUs) with their memory", &devices_main});

}  // namespace
}  // namespace weft::tool
