// tests/runtime/test_devices.cpp — the device registry: the CPU registers itself, names are looked up
// case-insensitively, an unknown name is an error listing the devices, and an inference context
// computes on (and takes its KV cache from) the device it is given, never a fixed backend.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/context_test_util.h"
#include "weft/backends/cpu.h"
#include "weft/core/device.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft {
namespace {

using test::synth_file;

// A device that is the CPU under another name, counting the graphs its backends compute and the
// buffers its buffer type allocates: it shows which device a context really uses.
std::atomic<int> counted_graphs{0};
std::atomic<int> counted_buffers{0};

class counting_buffer_type final : public buffer_type {
  public:
    const char *name() const override { return "counting"; }
    std::unique_ptr<backend_buffer> alloc(size_t size) override {
        ++counted_buffers;
        return cpu_buffer_type().alloc(size);
    }
    size_t alignment() const override { return cpu_buffer_type().alignment(); }
    bool is_host() const override { return true; }
};

class counting_backend final : public backend {
  public:
    explicit counting_backend(int n_threads) : cpu_(n_threads) {}
    const char *name() const override { return "counting"; }
    buffer_type &default_buffer_type() override { return cpu_.default_buffer_type(); }
    bool supports_op(const tensor &node) const override { return cpu_.supports_op(node); }
    bool supports_buffer_type(const buffer_type &bt) const override { return bt.is_host(); }
    compute_status graph_compute(graph &g, const eval_callback &cb) override {
        ++counted_graphs;
        return cpu_.graph_compute(g, cb);
    }
    void set_n_threads(int n) override { cpu_.set_n_threads(n); }

  private:
    cpu_backend cpu_;
};

class counting_device final : public device {
  public:
    const char *name() const override { return "Test-Counting"; }
    std::string description() const override { return "the CPU, counted"; }
    device_kind kind() const override { return device_kind::accelerator; }
    device_memory memory() const override { return {}; }
    buffer_type &default_buffer_type() override { return buffers_; }
    std::unique_ptr<backend> make_backend(int n_threads) override {
        return std::make_unique<counting_backend>(n_threads);
    }

  private:
    counting_buffer_type buffers_;
};

device &counting() {
    static device &d = register_device(std::make_unique<counting_device>());
    return d;
}

TEST(Devices, TheCpuIsFirstAndFoundByName) {
    const std::vector<device *> all = available_devices();
    ASSERT_FALSE(all.empty());
    EXPECT_STREQ(all.front()->name(), "CPU");
    EXPECT_EQ(all.front()->kind(), device_kind::cpu);
    EXPECT_GT(all.front()->memory().total, size_t(0));
    EXPECT_FALSE(all.front()->description().empty());
    EXPECT_EQ(&select_device(""), all.front());
    EXPECT_EQ(&select_device("cpu"), all.front());
    EXPECT_EQ(find_device("nothing"), nullptr);
    try {
        select_device("cuda7");
        FAIL() << "an unknown device was accepted";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("unknown device 'cuda7'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("CPU"), std::string::npos) << e.what();
    }
}

TEST(Devices, NamesAreUnique) {
    counting();
    EXPECT_THROW(register_device(std::make_unique<counting_device>()), error);
    EXPECT_EQ(find_device("TEST-COUNTING"), &counting());
}

TEST(Devices, AContextComputesOnItsDeviceWithTheSameResults) {
    synth_file f("devices", test::small_spec());
    auto m = model::load(f.path());
    counting();
    const std::vector<token> toks = {1, 17, 42, 99, 3};
    auto logits_on = [&](const std::string &dev) {
        inference_params p = test::params_with(32, 512);
        p.device = dev;
        inference_context ctx(*m, p);
        EXPECT_EQ(&ctx.device(), &select_device(dev));
        EXPECT_EQ(ctx.decode(batch::from_tokens(toks)), decode_ok) << ctx.last_error();
        const float *r = ctx.get_logits_ith(-1);
        return std::vector<float>(r, r + ctx.n_vocab());
    };
    const int graphs_before = counted_graphs, buffers_before = counted_buffers;
    const std::vector<float> on_cpu = logits_on("CPU");
    EXPECT_EQ(counted_graphs, graphs_before);
    const std::vector<float> on_counting = logits_on("test-counting");
    EXPECT_GT(counted_graphs, graphs_before);
    EXPECT_GT(counted_buffers, buffers_before);  // the KV cache came from the device's buffer type
    ASSERT_EQ(on_cpu.size(), on_counting.size());
    EXPECT_EQ(std::memcmp(on_cpu.data(), on_counting.data(), on_cpu.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace weft
