// NUMA placement from a fake sysfs (this machine has one node): the CPU lists, the plan of each
// strategy, each node's share of a repacked weight (the kernels' own partition), the first touch.
#include <gtest/gtest.h>

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/numa.h"
#include "weft/core/error.h"

namespace weft {
namespace {

// node0 ... nodeN-1 with the given cpulists, removed afterwards
class fake_node_dir {
  public:
    explicit fake_node_dir(const std::vector<std::string> &cpulists)
        : dir_(std::filesystem::temp_directory_path() / ("weft-numa-" + std::to_string(::getpid()))) {
        for (size_t n = 0; n < cpulists.size(); ++n) {
            std::filesystem::create_directories(dir_ / ("node" + std::to_string(n)));
            std::ofstream(dir_ / ("node" + std::to_string(n)) / "cpulist") << cpulists[n] << "\n";
        }
    }
    ~fake_node_dir() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    std::string path() const { return dir_.string(); }

  private:
    std::filesystem::path dir_;
};

TEST(CpuNuma, CpuListsAreParsedAndBadOnesRefused) {
    EXPECT_EQ(cpu::parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
    EXPECT_EQ(cpu::parse_cpu_list(""), std::vector<int>{});
    for (const char *bad : {"a", "3-1", "1,,2", "-1", "0-", "99999999"})
        EXPECT_THROW(cpu::parse_cpu_list(bad), error) << bad;
}

TEST(CpuNuma, NodesAreReadFromTheGivenDirectory) {
    const fake_node_dir two({"0-3", "4-7"});
    EXPECT_EQ(cpu::read_numa_nodes(two.path()), (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    EXPECT_TRUE(cpu::read_numa_nodes(two.path() + "/missing").empty());
    ::setenv("WEFT_NUMA_NODE_DIR", two.path().c_str(), 1);
    EXPECT_EQ(cpu::numa_node_dir(), two.path());
    ::unsetenv("WEFT_NUMA_NODE_DIR");
    EXPECT_EQ(cpu::numa_node_dir(), "/sys/devices/system/node");
}

TEST(CpuNuma, EachStrategyPlacesTheThreads) {
    const std::vector<std::vector<int>> two = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
    // distribute: blocks of threads per node
    const cpu::numa_placement d = cpu::plan_numa(numa_strategy::distribute, two, 7, 0, all);
    ASSERT_EQ(d.nodes.size(), 2u);
    EXPECT_EQ(d.nodes[0].threads.begin, 0);
    EXPECT_EQ(d.nodes[0].threads.end, 4);
    EXPECT_EQ(d.nodes[1].threads.end, 7);
    EXPECT_EQ(d.of_thread(5)->node, 1);
    EXPECT_EQ(d.of_thread(7)->node, 0);  // beyond the planned threads: around again
    EXPECT_TRUE(d.places_memory());
    // isolate: the current node only
    const cpu::numa_placement i = cpu::plan_numa(numa_strategy::isolate, two, 8, 1, all);
    ASSERT_EQ(i.nodes.size(), 1u);
    EXPECT_EQ(i.nodes[0].node, 1);
    EXPECT_EQ(i.nodes[0].cpus, (std::vector<int>{4, 5, 6, 7}));
    EXPECT_FALSE(i.places_memory());
    // numactl: the nodes of the CPUs allowed, cut to them
    const cpu::numa_placement n = cpu::plan_numa(numa_strategy::numactl, two, 4, 0, {2, 3, 6});
    ASSERT_EQ(n.nodes.size(), 2u);
    EXPECT_EQ(n.nodes[0].cpus, (std::vector<int>{2, 3}));
    EXPECT_EQ(n.nodes[1].cpus, (std::vector<int>{6}));
    // one node, or disabled: nothing
    EXPECT_TRUE(cpu::plan_numa(numa_strategy::distribute, {{0, 1}}, 2, 0, {0, 1}).nodes.empty());
    EXPECT_TRUE(cpu::plan_numa(numa_strategy::disabled, two, 8, 0, all).nodes.empty());
    // more nodes than threads: only nodes with threads
    EXPECT_EQ(cpu::plan_numa(numa_strategy::distribute, {{0}, {1}, {2}}, 2, 0, {0, 1, 2}).nodes.size(), 2u);
}

// Each node's share of a weight is the rows its threads compute (the same chunks as the kernels'),
// and the shares cover the weight once.
TEST(CpuNuma, NodeSharesAreTheRowsTheirThreadsCompute) {
    const std::vector<std::vector<int>> four = {{0}, {1}, {2}, {3}};
    for (const int nth : {4, 8, 16, 32, 64})
        for (const int64_t groups : {int64_t(16), int64_t(128), int64_t(352), int64_t(2000)}) {
            const cpu::numa_placement p =
                cpu::plan_numa(numa_strategy::distribute, four, nth, 0, {0, 1, 2, 3});
            const size_t group_bytes = 4608;  // q4_K, 2048 columns, 16 rows
            const cpu::first_touch_job job{nullptr, groups, group_bytes};
            size_t next = 0;
            for (const cpu::numa_node_use &node : p.nodes) {
                const auto shares = cpu::node_share_bytes(job, p, node);
                int64_t its_groups = 0;
                for (int64_t t = node.threads.begin; t < node.threads.end; ++t)
                    its_groups += cpu::groups_of_thread(
                        std::vector<int64_t>{groups},
                        cpu::plan_chunks(std::vector<int64_t>{groups}, nth).groups_per_chunk, int(t), nth);
                if (shares.empty()) {
                    EXPECT_EQ(its_groups, 0);
                    continue;
                }
                ASSERT_EQ(shares.size(), 1u);
                EXPECT_EQ(shares[0].first, next) << nth << " threads, " << groups << " groups";
                EXPECT_EQ(shares[0].second - shares[0].first, size_t(its_groups) * group_bytes);
                next = shares[0].second;
            }
            EXPECT_EQ(next, size_t(groups) * group_bytes) << nth << " threads, " << groups << " groups";
        }
}

TEST(CpuNuma, FirstTouchWritesEveryPageOfTheSharesFromPinnedThreads) {
    // two "nodes" of this machine's first CPU (pinning to it always works)
    cpu_set_t before;
    ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
    const cpu::numa_placement p = cpu::plan_numa(numa_strategy::distribute, {{0}, {0}}, 2, 0, {0});
    ASSERT_TRUE(p.places_memory());
    std::vector<std::byte> memory(size_t(64) * 4096, std::byte{7});
    const cpu::first_touch_job jobs[] = {{memory.data(), 64, 4096}};
    cpu::first_touch(jobs, p);
    for (size_t page = 0; page < 64; ++page) EXPECT_EQ(memory[page * 4096], std::byte{0}) << "page " << page;
    EXPECT_EQ(memory[1], std::byte{7});  // one byte a page
    // the test's own thread is left as it was
    cpu_set_t set;
    ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    EXPECT_TRUE(CPU_EQUAL(&set, &before));
}

}  // namespace
}  // namespace weft
