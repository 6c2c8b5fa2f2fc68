// tests/runtime/test_vulkan_model.cpp — whole models on a Vulkan device (lavapipe, Mesa's software
// driver, in CI): the tiny fixtures' logits with every block offloaded (-ngl 99) and with part of them
// (-ngl 2) against the CPU's, within NMSE 1e-4; ops the device lacks fall back to the host per op.
// Skips, saying why, without a Vulkan device or without ../shared.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/fixtures.h"
#include "runtime/context_test_util.h"
#include "weft/backends/vulkan.h"
#include "weft/core/device.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"

namespace weft {
namespace {

device *first_gpu() {
    for (device *d : available_devices())
        if (!d->default_buffer_type().is_host()) return d;
    return nullptr;
}

#define REQUIRE_VULKAN_DEVICE()                                                                             \
    do {                                                                                                    \
        if (first_gpu() == nullptr) GTEST_SKIP() << "no Vulkan device (Vulkan: " << vulkan_status() << ")"; \
    } while (0)

// sum (x - ref)^2 / sum ref^2 over every row
double nmse(const std::vector<std::vector<float>> &x, const std::vector<std::vector<float>> &ref) {
    double err = 0, norm = 0;
    for (size_t r = 0; r < ref.size(); ++r)
        for (size_t i = 0; i < ref[r].size(); ++i) {
            const double d = double(x[r][i]) - double(ref[r][i]);
            err += d * d;
            norm += double(ref[r][i]) * double(ref[r][i]);
        }
    return norm > 0 ? err / norm : err;
}

// A prompt's logits at every position, then four greedy-free steps (fixed tokens), with n_gpu_layers
// blocks on the GPU (0: the CPU alone).
std::vector<std::vector<float>> logits_with(const std::string &path, int n_gpu_layers,
                                            dtype cache = dtype::f16) {
    model_params mp;
    if (n_gpu_layers > 0) {
        mp.offload_device = first_gpu();
        mp.n_gpu_layers = n_gpu_layers;
    }
    auto m = model::load(path, mp);
    inference_params ip = test::params_with(64, 512);
    ip.type_k = ip.type_v = cache;
    inference_context ctx(*m, ip);
    const std::vector<token> prompt = test::some_tokens(7, int32_t(m->hparams().n_vocab));
    std::vector<std::vector<float>> rows = test::all_logits(ctx, prompt);
    for (int i = 0; i < 4; ++i) {
        batch b;
        b.add(token(5 + 11 * i), llm_pos(prompt.size() + size_t(i)), {0}, true);
        EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        rows.push_back(test::last_logits(ctx));
    }
    return rows;
}

TEST(VulkanModel, DeviceIsListedWithMemory) {
    REQUIRE_VULKAN_DEVICE();
    device &d = *first_gpu();
    EXPECT_EQ(std::string(d.name()).rfind("Vulkan", 0), 0u) << d.name();
    EXPECT_EQ(d.kind(), device_kind::gpu);
    EXPECT_GT(d.memory().total, size_t(0));
}

TEST(VulkanModel, TinyFixturesMatchTheCpu) {
    WEFT_REQUIRE_FIXTURES();
    REQUIRE_VULKAN_DEVICE();
    for (const char *name : {"tiny-llama-F32", "tiny-llama-F16", "tiny-llama-Q8_0", "tiny-llama-Q4_0",
                             "tiny-llama-Q4_K", "tiny-llama-Q6_K", "tiny-qwen2-Q8_0"}) {
        const std::string path = test::fixture(std::string("models/") + name + ".gguf");
        const std::vector<std::vector<float>> cpu = logits_with(path, 0);
        for (int ngl : {99, 2}) {
            const std::vector<std::vector<float>> gpu = logits_with(path, ngl);
            ASSERT_EQ(gpu.size(), cpu.size());
            EXPECT_LE(nmse(gpu, cpu), 1e-4) << name << " -ngl " << ngl;
        }
    }
}

// A q8_0 cache of offloaded blocks lives on the device too (it stores and attends over q8_0 rows).
TEST(VulkanModel, QuantizedCacheWithOffloadedBlocks) {
    WEFT_REQUIRE_FIXTURES();
    REQUIRE_VULKAN_DEVICE();
    const std::string path = test::fixture("models/tiny-llama-Q8_0.gguf");
    const std::vector<std::vector<float>> cpu = logits_with(path, 0, dtype::q8_0);
    const std::vector<std::vector<float>> gpu = logits_with(path, 99, dtype::q8_0);
    ASSERT_EQ(gpu.size(), cpu.size());
    model_params mp;
    mp.offload_device = first_gpu();
    mp.n_gpu_layers = 99;
    auto m = model::load(path, mp);
    inference_params ip = test::params_with(64, 512);
    ip.type_k = ip.type_v = dtype::q8_0;
    inference_context ctx(*m, ip);
    EXPECT_FALSE(ctx.kv().layers()[0].k->buffer->is_host());
    EXPECT_LE(nmse(gpu, cpu), 1e-4);
}

}  // namespace
}  // namespace weft
