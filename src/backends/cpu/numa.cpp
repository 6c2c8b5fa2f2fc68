// src/backends/cpu/numa.cpp — NUMA nodes from sysfs, the threads' placement and pinning, and the
// first touch of the repacked weights (see numa.h).
#include "backends/cpu/numa.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "weft/core/error.h"

namespace weft::cpu {

namespace {

numa_placement process_placement;
std::mutex placement_mutex;

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

int parse_cpu_number(std::string_view text, std::string_view whole) {
    if (text.empty() || text.size() > 6 || !std::all_of(text.begin(), text.end(), is_digit))
        throw error("cpu list '" + std::string(whole) + "': '" + std::string(text) + "' is not a CPU number");
    return std::stoi(std::string(text));
}

}  // namespace

std::vector<int> parse_cpu_list(std::string_view text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
    std::vector<int> cpus;
    const std::string_view whole = text;
    while (!text.empty()) {
        const size_t comma = text.find(',');
        const std::string_view item = text.substr(0, comma);
        const size_t dash = item.find('-');
        const int first = parse_cpu_number(item.substr(0, dash), whole);
        const int last =
            dash == std::string_view::npos ? first : parse_cpu_number(item.substr(dash + 1), whole);
        if (last < first)
            throw error("cpu list '" + std::string(whole) + "': range " + std::string(item) +
                        " is backwards");
        for (int c = first; c <= last; ++c) cpus.push_back(c);
        text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    }
    return cpus;
}

std::string numa_node_dir() {
    const char *dir = std::getenv("WEFT_NUMA_NODE_DIR");
    return dir && *dir ? dir : "/sys/devices/system/node";
}

std::vector<std::vector<int>> read_numa_nodes(const std::string &dir) {
    std::vector<std::vector<int>> nodes;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) return nodes;
    for (int node = 0;; ++node) {
        std::ifstream in(dir + "/node" + std::to_string(node) + "/cpulist");
        if (!in) break;
        std::string text;
        std::getline(in, text);
        std::vector<int> cpus = parse_cpu_list(text);
        if (!cpus.empty()) nodes.push_back(std::move(cpus));
    }
    return nodes;
}

const numa_node_use *numa_placement::of_thread(int ith) const {
    if (nodes.empty()) return nullptr;
    const int t = ith % n_threads;
    for (const numa_node_use &use : nodes)
        if (t >= use.threads.begin && t < use.threads.end) return &use;
    return &nodes.front();
}

numa_placement plan_numa(numa_strategy strategy, const std::vector<std::vector<int>> &nodes, int n_threads,
                         int current_node, const std::vector<int> &allowed) {
    numa_placement p;
    p.strategy = strategy;
    p.n_threads = std::max(1, n_threads);
    if (strategy == numa_strategy::disabled || nodes.size() < 2) return p;
    std::vector<numa_node_use> used;
    for (int node = 0; node < int(nodes.size()); ++node) {
        numa_node_use use;
        use.node = node;
        if (strategy == numa_strategy::isolate && node != current_node) continue;
        for (const int cpu : nodes[size_t(node)])
            if (strategy != numa_strategy::numactl ||
                std::find(allowed.begin(), allowed.end(), cpu) != allowed.end())
                use.cpus.push_back(cpu);
        if (!use.cpus.empty()) used.push_back(std::move(use));
    }
    // blocks of threads per node, no node more threads than others by more than one
    const int n_used = int(used.size());
    for (int j = 0; j < n_used; ++j) used[size_t(j)].threads = split_range(p.n_threads, j, n_used);
    // a node without threads (more nodes than threads) holds none of the work
    std::erase_if(used, [](const numa_node_use &u) { return u.threads.size() == 0; });
    p.nodes = std::move(used);
    return p;
}

const numa_placement &current_numa() {
    return process_placement;
}

void pin_thread_to_node(int ith) {
    if (const numa_node_use *use = process_placement.of_thread(ith)) pin_thread_to(*use);
}

void pin_thread_to(const numa_node_use &use) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (const int cpu : use.cpus)
        if (cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
    // advice: a CPU taken offline (or outside a cgroup's set) makes this fail; the thread then runs anywhere
    (void)sched_setaffinity(0, sizeof set, &set);
}

std::vector<std::pair<size_t, size_t>> node_share_bytes(const first_touch_job &job,
                                                        const numa_placement &placement,
                                                        const numa_node_use &node) {
    const int nth = placement.n_threads;
    const int64_t groups[] = {job.groups};
    const chunk_plan plan = plan_chunks(groups, nth);
    const int64_t c_begin = split_range(plan.n_chunks, int(node.threads.begin), nth).begin;
    const int64_t c_end = split_range(plan.n_chunks, int(node.threads.end - 1), nth).end;
    const int64_t g_begin = std::min(job.groups, c_begin * plan.groups_per_chunk);
    const int64_t g_end = std::min(job.groups, c_end * plan.groups_per_chunk);
    if (g_begin >= g_end) return {};
    return {{size_t(g_begin) * job.group_bytes, size_t(g_end) * job.group_bytes}};
}

void first_touch(std::span<const first_touch_job> jobs, const numa_placement &placement) {
    if (!placement.places_memory()) return;
    constexpr size_t page = 4096;
    std::vector<std::thread> touchers;
    for (const numa_node_use &node : placement.nodes)
        touchers.emplace_back([&jobs, &placement, &node] {
            pin_thread_to(node);
            for (const first_touch_job &job : jobs)
                for (const auto &[begin, end] : node_share_bytes(job, placement, node))
                    for (size_t at = begin; at < end; at += page)
                        std::atomic_ref<std::byte>(job.dst[at])
                            .store(std::byte{0}, std::memory_order_relaxed);
        });
    for (auto &t : touchers) t.join();
}

}  // namespace weft::cpu

namespace weft {

std::string cpu_set_numa(numa_strategy strategy, int n_threads) {
    const std::vector<std::vector<int>> nodes = cpu::read_numa_nodes(cpu::numa_node_dir());
    std::vector<int> allowed;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &set)) allowed.push_back(c);
    int current_node = 0;
    const int cpu_now = sched_getcpu();
    for (int n = 0; n < int(nodes.size()); ++n)
        if (std::find(nodes[size_t(n)].begin(), nodes[size_t(n)].end(), cpu_now) != nodes[size_t(n)].end())
            current_node = n;
    std::lock_guard<std::mutex> lock(cpu::placement_mutex);
    cpu::process_placement = cpu::plan_numa(strategy, nodes, n_threads, current_node, allowed);
    if (strategy == numa_strategy::disabled) return "numa: off";
    std::string line = "numa: " + std::to_string(nodes.size()) + " node" + (nodes.size() == 1 ? "" : "s");
    if (cpu::process_placement.nodes.empty())
        return line + ": nothing to place (threads and memory as without --numa)";
    for (const cpu::numa_node_use &u : cpu::process_placement.nodes)
        line += "; node " + std::to_string(u.node) + ": threads " + std::to_string(u.threads.begin) + "-" +
                std::to_string(u.threads.end - 1) + " on " + std::to_string(u.cpus.size()) + " CPUs";
    return line + (cpu::process_placement.places_memory() ? "; repacked weights placed by node" : "");
}

}  // namespace weft
