// src/backends/cpu/numa.h — machines of several NUMA nodes: which CPUs each node has (sysfs), where
// each thread of the pool runs, and which node first touches the repacked weights' pages.
//
// Linux places an anonymous page on the node of the thread that first writes it. The CPU backend
// repacks most weights into memory of its own (cpu_repack_weights); under --numa the pages holding
// the rows a thread will compute are first touched by a thread of that thread's node (the rows from
// the kernels' own partition, partition.h), so decode's threads stream their weights from local
// memory. Threads are spread in contiguous blocks over the nodes (threads [0, n/2) on node 0 ...):
// a node's threads hold one contiguous range of every product's rows, and the barrier's groups of
// consecutive threads (thread_pool) stay on one node. Standard library and Linux system calls only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/cpu/partition.h"
#include "weft/backends/cpu.h"

namespace weft::cpu {

// "0-3,8,10-11" (sysfs cpulist) as CPU numbers; throws weft::error on anything else.
std::vector<int> parse_cpu_list(std::string_view text);

// The CPUs of each node under `dir` (node0/cpulist, node1/cpulist ...), nodes without CPUs left
// out; empty when there is no such directory (not Linux, or no NUMA information).
std::vector<std::vector<int>> read_numa_nodes(const std::string &dir);
// The directory read: $WEFT_NUMA_NODE_DIR when set (tests give a fake one), else
// /sys/devices/system/node.
std::string numa_node_dir();

// Where the threads of a pool run: the nodes used, each with its CPUs and its block of threads.
struct numa_node_use {
    int node = 0;           // index into the nodes read
    std::vector<int> cpus;  // the CPUs its threads may run on
    index_range threads;    // of the n_threads planned for
};
struct numa_placement {
    numa_strategy strategy = numa_strategy::disabled;
    int n_threads = 1;
    std::vector<numa_node_use> nodes;  // empty: nothing is pinned or placed
    // The node use of thread ith (threads beyond n_threads wrap around).
    const numa_node_use *of_thread(int ith) const;
    // More than one node: the weights' pages are placed by the threads' nodes.
    bool places_memory() const { return nodes.size() > 1; }
};

// The plan: distribute spreads n_threads in contiguous blocks over every node with CPUs; isolate
// keeps them on current_node; numactl spreads them over the nodes of `allowed` (the CPUs the process
// was started with), each node's CPUs cut to those allowed. With one node (or none read), or
// strategy disabled, nothing is planned.
numa_placement plan_numa(numa_strategy strategy, const std::vector<std::vector<int>> &nodes, int n_threads,
                         int current_node, const std::vector<int> &allowed);

// The process's placement (set by cpu_set_numa); disabled until then.
const numa_placement &current_numa();
// Pins the calling thread, thread ith of a pool, to its node's CPUs (nothing without a placement).
void pin_thread_to_node(int ith);
// Pins the calling thread to the CPUs of `use`.
void pin_thread_to(const numa_node_use &use);

// One weight repacked to `dst`: groups of `group_bytes` (16 rows), in row order.
struct first_touch_job {
    std::byte *dst;
    int64_t groups;
    size_t group_bytes;
};
// The bytes of each node's share of every job, [begin, end) from dst: the groups of the chunks that
// the node's threads take (plan_chunks and split_range at the placement's thread count).
std::vector<std::pair<size_t, size_t>> node_share_bytes(const first_touch_job &job,
                                                        const numa_placement &placement,
                                                        const numa_node_use &node);
// Writes a zero into every page of each node's shares from a thread pinned to that node, before
// anything else writes them (the memory is freshly mapped, so zeros change nothing).
void first_touch(std::span<const first_touch_job> jobs, const numa_placement &placement);

}  // namespace weft::cpu
