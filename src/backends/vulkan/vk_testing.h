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
// Which shader graphs recorded from now on use for mul_mat: the tiled one from some number of columns
// up where the device has the shared memory for it (automatic), or always one of the two.
enum class mul_mat_path { automatic, vector, tiled };
void set_mul_mat_path(mul_mat_path path);

}  // namespace weft::vk
