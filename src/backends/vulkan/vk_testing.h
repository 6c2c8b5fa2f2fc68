// src/backends/vulkan/vk_testing.h — hooks for the Vulkan backend's tests (no Vulkan types: the tests
// include it in a build without Vulkan too, where the hooks do nothing).
#pragma once

namespace weft::vk {

// Buffers allocated while this is on are not mapped even in host-visible memory: their copies go
// through the staging buffer and the queue, as on a device without mappable memory.
void set_force_staging(bool on);
// Graphs recorded while this is on reduce in shared memory even where the device has subgroup
// arithmetic.
void set_disable_subgroups(bool on);

}  // namespace weft::vk
