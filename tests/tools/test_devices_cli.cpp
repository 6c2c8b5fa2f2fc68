// tests/tools/test_devices_cli.cpp — `weft devices` and the device options (--device, -ngl) as a user
// meets them: the list with memory, an unknown device named, -ngl without a GPU (a warning, the CPU),
// and with the Vulkan device of the machine (lavapipe in CI) the same greedy text as the CPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "common/fixtures.h"
#include "common/run_weft.h"

namespace {

using weft::test::run_weft;
using weft::test::run_weft_shell;

bool has_vulkan_device() {
    const auto r = run_weft({"devices", "--json"});
    if (r.status != 0) return false;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    for (const auto &d : j["devices"])
        if (d["name"].get<std::string>().rfind("Vulkan", 0) == 0) return true;
    return false;
}

TEST(DevicesCli, ListsTheCpuWithMemoryAndTheVulkanState) {
    const auto table = run_weft({"devices"});
    ASSERT_EQ(table.status, 0) << table.err;
    EXPECT_NE(table.out.find("CPU"), std::string::npos) << table.out;
    EXPECT_NE(table.out.find("Vulkan: "), std::string::npos) << table.out;
    const auto r = run_weft({"devices", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_FALSE(j["devices"].empty());
    EXPECT_EQ(j["devices"][0]["name"], "CPU");
    EXPECT_EQ(j["devices"][0]["host_memory"], true);
    EXPECT_GT(j["devices"][0]["memory_total"].get<double>(), 0.0);
    EXPECT_TRUE(j["vulkan"].contains("status"));
    const auto help = run_weft({"devices", "--help"});
    EXPECT_EQ(help.status, 0);
    EXPECT_NE(help.out.find("-ngl"), std::string::npos) << help.out;
}

TEST(DevicesCli, AnUnknownDeviceIsAnErrorListingTheDevices) {
    const auto r = run_weft({"run", "-p", "Once", "-n", "2", "--device", "cuda7"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("unknown device 'cuda7'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("CPU"), std::string::npos) << r.err;
}

TEST(DevicesCli, WithoutAGpuNglWarnsAndComputesOnTheCpu) {
    // no Vulkan device visible: the same run as without -ngl, and a warning saying why
    const std::string args = "run -p 'Once upon a time' -n 12 --temp 0";
    const auto cpu = run_weft_shell(args);
    ASSERT_EQ(cpu.status, 0) << cpu.err;
    const auto r = weft::test::run_shell("WEFT_VK_VISIBLE_DEVICES= " + weft::test::shell_quote(WEFT_BINARY) +
                                         " " + args + " -ngl 99");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, cpu.out);
    EXPECT_NE(r.err.find("-ngl 99: no GPU device"), std::string::npos) << r.err;
}

TEST(DevicesCli, OffloadedRunsGiveTheCpusText) {
    WEFT_REQUIRE_FIXTURES();
    if (!has_vulkan_device()) GTEST_SKIP() << "no Vulkan device (see `weft devices`)";
    const std::string model = weft::test::fixture("models/stories260K.gguf");
    const std::string args =
        "run -m " + weft::test::shell_quote(model) + " -p 'Once upon a time' -n 24 --temp 0";
    const auto cpu = run_weft_shell(args);
    ASSERT_EQ(cpu.status, 0) << cpu.err;
    for (const std::string extra : {"-ngl 99", "-ngl 2", "--device Vulkan0"}) {
        const auto gpu = run_weft_shell(args + " " + extra);
        ASSERT_EQ(gpu.status, 0) << extra << ": " << gpu.err;
        EXPECT_EQ(gpu.out, cpu.out) << extra;
        EXPECT_NE(gpu.err.find("on Vulkan0"), std::string::npos) << gpu.err;
    }
    const auto graph = run_weft({"graph", "-m", model, "-ngl", "2"});
    ASSERT_EQ(graph.status, 0) << graph.err;
    EXPECT_NE(graph.out.find("placement: "), std::string::npos) << graph.out;
    EXPECT_NE(graph.out.find("Vulkan0  ("), std::string::npos) << graph.out;
    const auto bench = run_weft(
        {"bench", "-m", model, "-p", "8", "-n", "4", "-r", "1", "-ngl", "99", "--json", "--no-bandwidth"});
    ASSERT_EQ(bench.status, 0) << bench.err;
    EXPECT_EQ(nlohmann::json::parse(bench.out)["device"], "Vulkan0");
}

}  // namespace
