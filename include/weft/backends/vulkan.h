// weft/backends/vulkan.h — the Vulkan compute backend: its devices ("Vulkan0", "Vulkan1" ...) join the
// device registry (weft/core/device.h); everything else goes through the device and backend interfaces.
//
// The Vulkan loader (libvulkan.so.1) is opened at run time: a machine without it, or without a Vulkan
// device, runs everything on the CPU. WEFT_VK_VISIBLE_DEVICES=0,2 picks physical devices by index (an
// empty value: none).
#pragma once

#include <string>

namespace weft {

// Registers one device per usable Vulkan physical device, once; later calls do nothing. Never throws:
// what went wrong (no loader, no device, an instance that would not start) is kept for vulkan_status.
void register_vulkan_devices();
// "" before register_vulkan_devices, "N device(s)" after it found some, else why there are none
// ("no Vulkan loader (libvulkan.so.1) found", "no Vulkan device", "built without Vulkan" ...).
std::string vulkan_status();
// Whether this build has the Vulkan backend (the headers and glslc were found when it was configured).
bool vulkan_built();

}  // namespace weft
