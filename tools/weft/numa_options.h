// tools/weft/numa_options.h — --numa for the commands that compute (run, bench, serve, chat): the
// reference's flag, applied before the model is loaded (weft/backends/cpu.h: cpu_set_numa).
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "weft/backends/cpu.h"

namespace weft::tool {

inline void add_numa_option(CLI::App &app, std::string &numa) {
    app.add_option(
           "--numa", numa,
           "machines of several NUMA nodes: distribute (threads spread over every node, in blocks), "
           "isolate (threads on the node weft started on), numactl (spread over the nodes of the CPUs "
           "numactl gave); threads are pinned to their node's CPUs and the repacked weights placed on "
           "the node of the threads that compute them. With one node nothing changes")
        ->check(CLI::IsMember({"distribute", "isolate", "numactl"}))
        ->option_text("distribute|isolate|numactl");
}

// Applies --numa (nothing when it was not given) for n_threads threads (0: the hardware's, at most 4,
// as serve and chat take it); says what it did on stderr.
inline void apply_numa_option(const std::string &numa, int n_threads) {
    if (numa.empty()) return;
    if (n_threads <= 0) n_threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
    static const std::map<std::string, numa_strategy> strategies = {{"distribute", numa_strategy::distribute},
                                                                    {"isolate", numa_strategy::isolate},
                                                                    {"numactl", numa_strategy::numactl}};
    std::fprintf(stderr, "%s\n", cpu_set_numa(strategies.at(numa), n_threads).c_str());
}

}  // namespace weft::tool
