// tests/vulkan/test_vulkan_ops.cpp — the Vulkan backend against the CPU: every op its shaders compute, on
// odd shapes, broadcasts and non-contiguous views, run through a scheduler (Vulkan first, the CPU behind
// it) from inputs in host memory and compared with the same graph on the CPU alone; device enumeration,
// buffers, and the fallback to the CPU of what the shaders do not compute. Skips without a Vulkan device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu_testing.h"
#include "backends/vulkan/vk_testing.h"
#include "weft/backends/cpu.h"
#include "weft/backends/vulkan.h"
#include "weft/core/device.h"
#include "weft/core/error.h"
#include "weft/core/ops.h"
#include "weft/core/scheduler.h"

using namespace weft;
using namespace weft::test;

namespace {

std::vector<device *> vulkan_devices() {
    register_cpu_device();
    register_vulkan_devices();
    std::vector<device *> out;
    for (device *d : devices())
        if (std::string(d->name()).rfind("Vulkan", 0) == 0) out.push_back(d);
    return out;
}

#define REQUIRE_VULKAN()                                       \
    const std::vector<device *> vk_devices = vulkan_devices(); \
    if (vk_devices.empty()) GTEST_SKIP() << "no Vulkan device: " << vulkan_status();

// t's values (any buffer; a device tensor must be contiguous), in logical order
std::vector<float> read_values(const tensor &t) {
    if (t.buffer == nullptr || t.buffer->is_host()) return values_of(t);
    EXPECT_TRUE(t.is_contiguous()) << t.name;
    auto ctx = data_context(t.nbytes() + (size_t(1) << 16));
    tensor *h = ctx->new_tensor(t.type, std::span<const int64_t>(t.ne, max_dims));
    t.buffer->get_tensor(t, h->data, 0, t.nbytes());
    return values_of(*h);
}

double nmse(const std::vector<float> &x, const std::vector<float> &ref) {
    EXPECT_EQ(x.size(), ref.size());
    std::vector<double> r(ref.begin(), ref.end());
    return normalized_error(x, r);
}

// The graph's inputs for one run: leafs without memory standing for host tensors (the scheduler plans
// them with their first reader, a device's memory for a node on the device), filled once placed.
class graph_inputs {
  public:
    explicit graph_inputs(context &ctx) : ctx_(ctx) {}
    tensor *operator()(tensor *host) {
        for (const auto &[h, leaf] : leafs_)
            if (h == host) return leaf;
        tensor *leaf = ctx_.new_tensor(host->type, std::span<const int64_t>(host->ne, max_dims));
        leaf->flags |= tensor_flag_input;
        leaf->set_name(std::string("in:") + host->name);
        leafs_.emplace_back(host, leaf);
        return leaf;
    }
    void upload() const {
        for (const auto &[h, leaf] : leafs_)
            if (leaf->buffer) leaf->buffer->set_tensor(*leaf, h->data, 0, h->nbytes());
    }

  private:
    context &ctx_;
    std::vector<std::pair<tensor *, tensor *>> leafs_;
};

using builder = std::function<tensor *(context &, graph_inputs &)>;

struct outcome {
    std::vector<float> vk, cpu;
    bool on_device = false;  // the output node was computed by the Vulkan backend
};

std::vector<float> run_on(std::vector<backend *> backends, const builder &build, backend **placed) {
    context ctx(context_params{context_overhead(256), true});
    graph_inputs in(ctx);
    tensor *out = build(ctx, in);
    out->flags |= tensor_flag_output;
    graph g;
    build_forward_expand(g, out);
    scheduler s(std::move(backends));
    s.alloc_graph(g);
    in.upload();
    EXPECT_EQ(s.compute(g), compute_status::ok);
    if (placed) *placed = s.backend_of(out);
    return read_values(*out);
}

// Builds the graph twice (in a fresh no_alloc context each time, over the same host inputs) and
// computes it with scheduler({vk, cpu}) and with scheduler({cpu}).
outcome run_both(device &d, const builder &build) {
    std::unique_ptr<backend> vk = d.make_backend(1);
    cpu_backend cpu(2);
    outcome r;
    backend *placed = nullptr;
    r.vk = run_on({vk.get(), &cpu}, build, &placed);
    r.on_device = placed == vk.get();
    r.cpu = run_on({&cpu}, build, nullptr);
    return r;
}

// The op runs on the device and matches the CPU within `bound` (normalized squared error).
void expect_on_device_matches(device &d, const builder &build, double bound, const std::string &what) {
    const outcome r = run_both(d, build);
    EXPECT_TRUE(r.on_device) << what << ": not placed on " << d.name();
    ASSERT_EQ(r.vk.size(), r.cpu.size()) << what;
    EXPECT_EQ(count_non_finite(r.vk), count_non_finite(r.cpu)) << what;
    const double err = nmse(r.vk, r.cpu);
    EXPECT_LE(err, bound) << what << " on " << d.name();
    if (std::getenv("WEFT_VK_TEST_VERBOSE"))
        std::printf("%-50s nmse %.3g (bound %.3g)\n", what.c_str(), err, bound);
}

// host inputs: an allocated context
struct inputs {
    std::unique_ptr<context> ctx = data_context(size_t(32) << 20);
    tensor *uniform(dtype t, std::initializer_list<int64_t> ne, uint32_t seed, float lo = -1.0f,
                    float hi = 1.0f) {
        tensor *x = ctx->new_tensor(t, ne);
        fill_uniform(*x, seed, lo, hi);
        return x;
    }
    tensor *ids(std::initializer_list<int64_t> ne, const std::vector<int64_t> &values, dtype t = dtype::i32) {
        tensor *x = ctx->new_tensor(t, ne);
        for (int64_t i = 0; i < x->nelements(); ++i) {
            const int64_t v = values[size_t(i) % values.size()];
            if (t == dtype::i64)
                std::memcpy(static_cast<char *>(x->data) + 8 * i, &v, 8);
            else
                static_cast<int32_t *>(x->data)[i] = int32_t(v);
        }
        return x;
    }
};

// --- devices and buffers ----------------------------------------------------------------------------

TEST(VulkanDevice, Enumeration) {
    if (!vulkan_built()) {
        register_vulkan_devices();
        EXPECT_EQ(vulkan_status(), "built without Vulkan");
        GTEST_SKIP() << "built without Vulkan";
    }
    REQUIRE_VULKAN();
    EXPECT_STREQ(vk_devices[0]->name(), "Vulkan0");
    for (device *d : vk_devices) {
        EXPECT_EQ(d->kind(), device_kind::gpu);
        EXPECT_FALSE(d->description().empty());
        EXPECT_GT(d->memory().total, 0u) << d->name();
        EXPECT_LE(d->memory().free, d->memory().total);
        EXPECT_FALSE(d->default_buffer_type().is_host());
        EXPECT_EQ(find_device(d->name()), d);
    }
    EXPECT_NE(vulkan_status().find("device(s)"), std::string::npos) << vulkan_status();
    register_vulkan_devices();  // a second call does nothing
    EXPECT_EQ(vulkan_devices().size(), vk_devices.size());
}

TEST(VulkanBuffer, SetGetClearRoundTrip) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices) {
        buffer_type &bt = d->default_buffer_type();
        EXPECT_GE(bt.alignment(), 64u);
        context ctx(context_params{context_overhead(4), true});
        tensor *a = ctx.new_tensor(dtype::f32, {37, 3});
        tensor *b = ctx.new_tensor(dtype::f16, {21});
        tensor *both[] = {a, b};
        std::unique_ptr<backend_buffer> buf = alloc_placed(bt, both);
        EXPECT_NE(buf->base(), nullptr);
        EXPECT_FALSE(buf->is_host());
        std::vector<float> x(37 * 3);
        for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.5f - 3.0f;
        a->buffer->set_tensor(*a, x.data(), 0, x.size() * sizeof(float));
        std::vector<float> y(x.size());
        a->buffer->get_tensor(*a, y.data(), 0, y.size() * sizeof(float));
        EXPECT_EQ(x, y);
        // a part, at an offset
        std::vector<float> part(5);
        a->buffer->get_tensor(*a, part.data(), 10 * sizeof(float), 5 * sizeof(float));
        EXPECT_EQ(part[0], x[10]);
        EXPECT_EQ(part[4], x[14]);
        buf->clear(0xAB);
        std::vector<uint8_t> bytes(b->nbytes());
        b->buffer->get_tensor(*b, bytes.data(), 0, bytes.size());
        for (uint8_t v : bytes) EXPECT_EQ(v, 0xAB);
        // two buffers: distinct base addresses
        std::unique_ptr<backend_buffer> other = bt.alloc(128);
        EXPECT_NE(other->base(), buf->base());
    }
}

// The same, and a graph, with buffers that are not mapped: copies through the staging buffer and the
// queue (what a device without host-visible device memory does).
TEST(VulkanBuffer, StagingCopies) {
    REQUIRE_VULKAN();
    vk::set_force_staging(true);
    for (device *d : vk_devices) {
        context ctx(context_params{context_overhead(4), true});
        tensor *a = ctx.new_tensor(dtype::f32, {1000, 3});
        tensor *both[] = {a};
        std::unique_ptr<backend_buffer> buf = alloc_placed(d->default_buffer_type(), both);
        std::vector<float> x(3000), y(3000);
        for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.25f;
        a->buffer->set_tensor(*a, x.data(), 0, x.size() * sizeof(float));
        a->buffer->get_tensor(*a, y.data(), 0, y.size() * sizeof(float));
        EXPECT_EQ(x, y);
        buf->clear(0);
        a->buffer->get_tensor(*a, y.data(), 0, y.size() * sizeof(float));
        EXPECT_EQ(y, std::vector<float>(3000, 0.0f));
        inputs in;
        std::vector<float> deq;
        tensor *w = make_weights(*in.ctx, dtype::q8_0, 64, 9, 1, 1, 1, deq);
        tensor *b = in.uniform(dtype::f32, {64, 4}, 2);
        expect_on_device_matches(
            *d, [&](context &c, graph_inputs &I) { return silu(c, mul_mat(c, I(w), I(b))); }, 5e-4,
            "mul_mat through staging copies");
    }
    vk::set_force_staging(false);
}

// copy_tensor_async between two buffers of one device: a copy on its queue; from host memory: declined.
TEST(VulkanBuffer, CopyBetweenDeviceBuffers) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices) {
        context ctx(context_params{context_overhead(4), true});
        tensor *a = ctx.new_tensor(dtype::f32, {1000, 3});
        tensor *b = ctx.new_tensor(dtype::f32, {1000, 3});
        tensor *one[] = {a}, *other[] = {b};
        std::unique_ptr<backend_buffer> buf_a = alloc_placed(d->default_buffer_type(), one);
        std::unique_ptr<backend_buffer> buf_b = alloc_placed(d->default_buffer_type(), other);
        std::vector<float> x(3000), y(3000);
        for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.75f - 9.0f;
        a->buffer->set_tensor(*a, x.data(), 0, x.size() * sizeof(float));
        buf_b->clear(0);
        std::unique_ptr<backend> vk = d->make_backend(1);
        EXPECT_TRUE(vk->copy_tensor_async(*vk, *a, *b));
        EXPECT_EQ(vk->synchronize(), compute_status::ok);
        b->buffer->get_tensor(*b, y.data(), 0, y.size() * sizeof(float));
        EXPECT_EQ(x, y);
        inputs in;
        tensor *host = in.uniform(dtype::f32, {1000, 3}, 1);
        EXPECT_FALSE(vk->copy_tensor_async(*vk, *host, *b));
    }
}

TEST(VulkanBuffer, TooLargeAllocationIsAnError) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices) {
        try {
            d->default_buffer_type().alloc(size_t(1) << 50);
            ADD_FAILURE() << "a 1 PiB buffer was allocated on " << d->name();
        } catch (const error &e) {
            EXPECT_NE(std::string(e.what()).find(d->name()), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("MiB"), std::string::npos) << e.what();
        }
    }
}

// --- mul_mat ------------------------------------------------------------------------------------------

double mul_mat_bound(dtype t) {  // as tests/backends/test_cpu_mul_mat.cpp: the CPU's own conversion
    switch (quant_traits_of(t).vec_dot_type) {
        case dtype::f32:
            return 1e-10;
        case dtype::f16:
            return 1e-5;
        default:
            return 5e-4;
    }
}

// The vector shader (one row of a against 8 columns), with subgroup reductions and without.
TEST(VulkanOps, MulMat) {
    REQUIRE_VULKAN();
    vk::set_mul_mat_path(vk::mul_mat_path::vector);
    for (device *d : vk_devices)
        for (bool subgroups : {true, false})
            for (dtype t : {dtype::f32, dtype::f16, dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q6_k}) {
                vk::set_disable_subgroups(!subgroups);  // the shared-memory reduction too, where they exist
                const bool k_quant = t == dtype::q4_k || t == dtype::q6_k;
                const int64_t k = k_quant ? 512 : (type_traits(t).block_size > 1 ? 96 : 67);
                inputs in;
                std::vector<float> deq;
                tensor *a = make_weights(*in.ctx, t, k, 13, 1, 1, 7, deq);
                tensor *a3 = make_weights(*in.ctx, t, k, 11, 2, 1, 8, deq);
                for (int64_t n : {1, 5, 8, 19}) {
                    tensor *b = in.uniform(dtype::f32, {k, n}, 11 + uint32_t(n));
                    expect_on_device_matches(
                        *d, [&](context &c, graph_inputs &I) { return mul_mat(c, I(a), I(b)); },
                        mul_mat_bound(t), std::string("mul_mat ") + type_name(t) + " n=" + std::to_string(n));
                }
                // a broadcast over dims 2 and 3; b's rows strided (a view of wider rows)
                tensor *wide = in.uniform(dtype::f32, {k + 5, 3, 4, 3}, 99);
                expect_on_device_matches(
                    *d,
                    [&](context &c, graph_inputs &I) {
                        tensor *b = view_4d(c, I(wide), k, 3, 4, 3, wide->nb[1], wide->nb[2], wide->nb[3], 0);
                        return mul_mat(c, I(a3), b);
                    },
                    mul_mat_bound(t), std::string("mul_mat broadcast ") + type_name(t));
                vk::set_disable_subgroups(false);
            }
    vk::set_mul_mat_path(vk::mul_mat_path::automatic);
}

// The tiled shader (64 x 64 tiles of d): rows and columns that do not fill a tile, a k that does not fill
// a unit of 32, broadcasts and strided rows of b.
TEST(VulkanOps, MulMatTiled) {
    REQUIRE_VULKAN();
    vk::set_mul_mat_path(vk::mul_mat_path::tiled);
    for (device *d : vk_devices)
        for (dtype t : {dtype::f32, dtype::f16, dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q6_k}) {
            const int64_t k = type_traits(t).block_size > 1 ? 256 : 203;
            inputs in;
            std::vector<float> deq;
            for (int64_t m : {67, 200}) {
                tensor *a = make_weights(*in.ctx, t, k, m, 1, 1, 7 + uint32_t(m), deq);
                for (int64_t n : {1, 8, 33, 100}) {
                    if (m == 200 && n < 33) continue;
                    tensor *b = in.uniform(dtype::f32, {k, n}, 11 + uint32_t(n));
                    expect_on_device_matches(
                        *d, [&](context &c, graph_inputs &I) { return mul_mat(c, I(a), I(b)); },
                        mul_mat_bound(t),
                        std::string("tiled mul_mat ") + type_name(t) + " m=" + std::to_string(m) +
                            " n=" + std::to_string(n));
                }
            }
            tensor *a3 = make_weights(*in.ctx, t, k, 70, 2, 1, 8, deq);
            tensor *wide = in.uniform(dtype::f32, {k + 5, 9, 4, 3}, 99);
            expect_on_device_matches(
                *d,
                [&](context &c, graph_inputs &I) {
                    tensor *b = view_4d(c, I(wide), k, 9, 4, 3, wide->nb[1], wide->nb[2], wide->nb[3], 0);
                    return mul_mat(c, I(a3), b);
                },
                mul_mat_bound(t), std::string("tiled mul_mat broadcast ") + type_name(t));
        }
    vk::set_mul_mat_path(vk::mul_mat_path::automatic);
}

// --- elementwise ----------------------------------------------------------------------------------

TEST(VulkanOps, Binary) {
    REQUIRE_VULKAN();
    using binary_fn = tensor *(*)(context &, tensor *, tensor *);
    const binary_fn fns[] = {add, sub, mul, div};
    for (device *d : vk_devices) {
        inputs in;
        tensor *a = in.uniform(dtype::f32, {37, 5, 3, 2}, 1);
        tensor *bs[] = {in.uniform(dtype::f32, {37, 5, 3, 2}, 2, 0.5f, 1.5f),
                        in.uniform(dtype::f32, {37, 1, 3, 1}, 3, 0.5f, 1.5f),
                        in.uniform(dtype::f32, {1, 5, 1, 2}, 4, 0.5f, 1.5f),
                        in.uniform(dtype::f16, {37, 5, 1, 1}, 5, 0.5f, 1.5f)};
        tensor *small = in.uniform(dtype::f32, {5, 1, 3, 1}, 6, 0.5f, 1.5f);  // for a permuted [5, 37, 3, 2]
        for (int op = 0; op < 4; ++op) {
            for (tensor *b : bs)
                expect_on_device_matches(
                    *d, [&](context &c, graph_inputs &I) { return fns[op](c, I(a), I(b)); }, 1e-12,
                    std::string("binary op ") + std::to_string(op) + " b " + b->shape_str());
            // a permuted view of a, b broadcast over it
            expect_on_device_matches(
                *d,
                [&](context &c, graph_inputs &I) {
                    return fns[op](c, permute(c, I(a), 1, 0, 2, 3), I(small));
                },
                1e-12, "binary of a permuted view");
        }
    }
}

TEST(VulkanOps, Unary) {
    REQUIRE_VULKAN();
    cpu_set_gelu_table(false);  // the f32 tanh form, as the shader computes it
    for (device *d : vk_devices) {
        inputs in;
        tensor *a = in.uniform(dtype::f32, {37, 5, 3}, 1, -6.0f, 6.0f);
        tensor *h = in.uniform(dtype::f16, {37, 5, 3}, 2, -6.0f, 6.0f);
        const std::vector<std::pair<const char *, std::function<tensor *(context &, tensor *)>>> ops = {
            {"scale", [](context &c, tensor *x) { return scale(c, x, -0.37f); }},
            {"silu", [](context &c, tensor *x) { return silu(c, x); }},
            {"gelu", [](context &c, tensor *x) { return gelu(c, x); }},
            {"tanh", [](context &c, tensor *x) { return weft::tanh(c, x); }},
            {"sigmoid", [](context &c, tensor *x) { return sigmoid(c, x); }}};
        for (const auto &[name, op] : ops) {
            expect_on_device_matches(
                *d, [&](context &c, graph_inputs &I) { return op(c, I(a)); }, 1e-12, name);
            expect_on_device_matches(
                *d, [&](context &c, graph_inputs &I) { return op(c, I(h)); }, 1e-12,
                std::string(name) + " f16");
            expect_on_device_matches(
                *d, [&](context &c, graph_inputs &I) { return op(c, transpose(c, I(a))); }, 1e-12,
                std::string(name) + " transposed");
        }
    }
    cpu_set_gelu_table(true);
}

TEST(VulkanOps, Glu) {
    REQUIRE_VULKAN();
    cpu_set_gelu_table(false);
    for (device *d : vk_devices) {
        inputs in;
        tensor *g = in.uniform(dtype::f32, {45, 7, 2}, 1, -5.0f, 5.0f);
        tensor *u = in.uniform(dtype::f32, {45, 7, 2}, 2);
        for (glu_kind kind : {glu_kind::swiglu, glu_kind::geglu}) {
            expect_on_device_matches(
                *d, [&](context &c, graph_inputs &I) { return glu(c, I(g), I(u), kind); }, 1e-12, "glu");
            // halves of one wider tensor, as a fused gate/up projection gives them
            tensor *both = in.uniform(dtype::f32, {90, 7}, 3, -4.0f, 4.0f);
            expect_on_device_matches(
                *d,
                [&](context &c, graph_inputs &I) {
                    tensor *gv = view_2d(c, I(both), 45, 7, both->nb[1], 0);
                    tensor *uv = view_2d(c, I(both), 45, 7, both->nb[1], 45 * sizeof(float));
                    return glu(c, gv, uv, kind);
                },
                1e-12, "glu of views");
        }
    }
    cpu_set_gelu_table(true);
}

TEST(VulkanOps, Norms) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices) {
        inputs in;
        tensor *a = in.uniform(dtype::f32, {67, 7, 3}, 1, -2.0f, 3.0f);
        tensor *big = in.uniform(dtype::f32, {1000, 3}, 2, -2.0f, 3.0f);
        for (bool rms : {true, false}) {
            auto op = [rms](context &c, tensor *x) {
                return rms ? rms_norm(c, x, 1e-5f) : norm(c, x, 1e-5f);
            };
            expect_on_device_matches(
                *d, [&](context &c, graph_inputs &I) { return op(c, I(a)); }, 1e-12,
                rms ? "rms_norm" : "norm");
            expect_on_device_matches(
                *d, [&](context &c, graph_inputs &I) { return op(c, I(big)); }, 1e-12, "norm of long rows");
            expect_on_device_matches(
                *d, [&](context &c, graph_inputs &I) { return op(c, permute(c, I(a), 1, 0, 2, 3)); }, 1e-12,
                "norm of a permuted view");
        }
    }
}

TEST(VulkanOps, SoftMax) {
    REQUIRE_VULKAN();
    constexpr float hidden = -std::numeric_limits<float>::infinity();
    for (device *d : vk_devices) {
        inputs in;
        tensor *a = in.uniform(dtype::f32, {37, 7, 4, 2}, 1, -4.0f, 4.0f);
        tensor *mask = in.uniform(dtype::f32, {37, 7}, 2, -1.0f, 0.0f);
        for (int64_t i = 0; i < 37; ++i) tensor_set_f32(*mask, hidden, i, 3);  // a row with nothing visible
        for (int64_t i = 20; i < 37; ++i) tensor_set_f32(*mask, hidden, i, 1);
        tensor *mask16 = in.ctx->new_tensor(dtype::f16, {37, 9, 2});
        for (int64_t i2 = 0; i2 < 2; ++i2)
            for (int64_t i1 = 0; i1 < 9; ++i1)
                for (int64_t i0 = 0; i0 < 37; ++i0)
                    tensor_set_f32(*mask16, i0 > 30 + i1 ? hidden : -0.25f * float(i0 % 3 + i2), i0, i1, i2);
        expect_on_device_matches(
            *d, [&](context &c, graph_inputs &I) { return soft_max(c, I(a)); }, 1e-12, "soft_max");
        expect_on_device_matches(
            *d, [&](context &c, graph_inputs &I) { return soft_max(c, I(a), I(mask), 0.3f); }, 1e-12,
            "soft_max f32 mask");
        expect_on_device_matches(
            *d, [&](context &c, graph_inputs &I) { return soft_max(c, I(a), I(mask16), 1.7f); }, 1e-12,
            "soft_max f16 mask");
    }
}

TEST(VulkanOps, Rope) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices) {
        inputs in;
        tensor *x = in.uniform(dtype::f32, {24, 3, 5}, 1);
        tensor *pos = in.ids({5}, {0, 3, 17, 100, 1234});
        tensor *factors = in.uniform(dtype::f32, {12}, 2, 1.0f, 4.0f);
        for (int32_t mode : {rope_mode_normal, rope_mode_neox})
            for (int32_t n_dims : {24, 16})
                for (int variant = 0; variant < 3; ++variant) {
                    rope_params rp;
                    rp.n_dims = n_dims;
                    rp.mode = mode;
                    rp.freq_base = 10000.0f;
                    if (variant == 2) {  // YaRN
                        rp.n_ctx_orig = 512;
                        rp.freq_scale = 0.25f;
                        rp.ext_factor = 1.0f;
                        rp.attn_factor = 1.1f;
                        rp.beta_fast = 32.0f;
                        rp.beta_slow = 1.0f;
                    }
                    tensor *ff = variant == 1 ? factors : nullptr;
                    expect_on_device_matches(
                        *d,
                        [&](context &c, graph_inputs &I) {
                            return rope(c, I(x), I(pos), rp, ff ? I(ff) : nullptr);
                        },
                        1e-11,
                        "rope mode " + std::to_string(mode) + " n_dims " + std::to_string(n_dims) +
                            " variant " + std::to_string(variant));
                }
        // a strided view (every other head) as the input
        rope_params rp;
        rp.n_dims = 24;
        tensor *wide = in.uniform(dtype::f32, {24, 6, 5}, 3);
        expect_on_device_matches(
            *d,
            [&](context &c, graph_inputs &I) {
                return rope(c, view_3d(c, I(wide), 24, 3, 5, 2 * wide->nb[1], wide->nb[2], 0), I(pos), rp);
            },
            1e-11, "rope of a strided view");
    }
}

TEST(VulkanOps, GetRows) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices)
        for (dtype t : {dtype::f32, dtype::f16, dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q6_k}) {
            inputs in;
            const int64_t n_embd =
                type_traits(t).block_size == 256 ? 256 : (type_traits(t).block_size > 1 ? 64 : 37);
            std::vector<float> deq;
            tensor *a = make_weights(*in.ctx, t, n_embd, 9, 2, 1, 5, deq);
            tensor *ids = in.ids({5, 2}, {3, 0, 8, 3, 1, 7, 2, 2, 4, 6});
            expect_on_device_matches(
                *d, [&](context &c, graph_inputs &I) { return get_rows(c, I(a), I(ids)); }, 0.0,
                std::string("get_rows ") + type_name(t));
        }
}

TEST(VulkanOps, ContAndCast) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices) {
        inputs in;
        tensor *a = in.uniform(dtype::f32, {13, 7, 3}, 1);
        tensor *h = in.uniform(dtype::f16, {13, 7, 3}, 2);
        expect_on_device_matches(
            *d, [&](context &c, graph_inputs &I) { return cont(c, permute(c, I(a), 2, 0, 1, 3)); }, 0.0,
            "cont of a permuted view");
        expect_on_device_matches(
            *d, [&](context &c, graph_inputs &I) { return cont(c, transpose(c, I(h))); }, 0.0,
            "cont of a transposed f16 view");
        expect_on_device_matches(
            *d, [&](context &c, graph_inputs &I) { return cast(c, I(a), dtype::f16); }, 0.0,
            "cast f32 -> f16");
        expect_on_device_matches(
            *d, [&](context &c, graph_inputs &I) { return cast(c, transpose(c, I(h)), dtype::f32); }, 0.0,
            "cast f16 -> f32");
    }
}

// cpy and set_rows write into memory of their own: a destination in the device's memory (a cache)
// here, and one in host memory for the CPU's run; both start the same.
struct device_cache {
    context meta{context_params{context_overhead(8), true}};
    tensor *t = nullptr;
    std::unique_ptr<backend_buffer> buf;
    device_cache(device &d, dtype type, std::initializer_list<int64_t> ne, const tensor &init) {
        t = meta.new_tensor(type, ne);
        tensor *ts[] = {t};
        buf = alloc_placed(d.default_buffer_type(), ts);
        t->buffer->set_tensor(*t, init.data, 0, init.nbytes());
    }
};

TEST(VulkanOps, CpyAndSetRowsIntoDeviceMemory) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices)
        for (dtype cache_type : {dtype::f32, dtype::f16})
            for (dtype id_type : {dtype::i32, dtype::i64}) {
                inputs in;
                tensor *host = in.uniform(cache_type, {20, 10}, 1);
                device_cache dev(*d, cache_type, {20, 10}, *host);
                tensor *src = in.uniform(dtype::f32, {20, 4}, 2);
                tensor *ids = in.ids({4}, {7, 0, 9, 3}, id_type);
                tensor *rows = in.uniform(dtype::f32, {20, 3}, 3);
                auto run = [&](tensor *cache, backend *first) {
                    std::unique_ptr<backend> cpu = std::make_unique<cpu_backend>(1);
                    std::unique_ptr<backend> vk = d->make_backend(1);
                    std::vector<backend *> bs = {cpu.get()};
                    if (first) bs = {vk.get(), cpu.get()};
                    context c(context_params{context_overhead(64), true});
                    tensor *w1 = set_rows(c, cache, src, ids);
                    // then three rows copied into rows 4..6 (a view of the cache), after the set_rows
                    tensor *view = view_2d(c, w1, 20, 3, cache->nb[1], 4 * cache->nb[1]);
                    tensor *w2 = cpy(c, rows, view);
                    graph g;
                    build_forward_expand(g, w2);
                    scheduler s(bs);
                    EXPECT_EQ(s.compute(g), compute_status::ok);
                    if (first) {
                        EXPECT_EQ(s.backend_of(w1), vk.get());
                        EXPECT_EQ(s.backend_of(w2), vk.get());
                    }
                    return read_values(*cache);
                };
                const std::vector<float> want = run(host, nullptr);
                const std::vector<float> got = run(dev.t, d->make_backend(1).get());
                EXPECT_EQ(nmse(got, want), 0.0)
                    << type_name(cache_type) << " cache, " << type_name(id_type) << " ids";
            }
}

// set_rows into a q8_0 / q4_0 cache quantizes as the CPU does: the same bytes. The rows of src have
// blocks of zeros, of equal magnitudes and values that lie halfway between two steps.
TEST(VulkanOps, SetRowsIntoQuantizedCache) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices)
        for (dtype cache_type : {dtype::q8_0, dtype::q4_0}) {
            inputs in;
            const int64_t ne0 = 96, rows = 10;  // three blocks a row: rows start off a word boundary
            tensor *host = in.ctx->new_tensor(cache_type, {ne0, rows});
            std::vector<uint8_t> init(host->nbytes());
            for (size_t i = 0; i < init.size(); ++i) init[i] = uint8_t(i * 37 + 11);
            std::memcpy(host->data, init.data(), init.size());
            device_cache dev(*d, cache_type, {ne0, rows}, *host);
            tensor *src = in.uniform(dtype::f32, {ne0, 6}, 7, -3.0f, 3.0f);
            for (int64_t j = 0; j < 32; ++j) {
                tensor_set_f32(*src, 0.0f, j, 0);                       // all zero
                tensor_set_f32(*src, j % 2 ? 1.5f : -1.5f, 32 + j, 1);  // ties of magnitude
                // q8_0: d = 1, values halfway between two steps
                tensor_set_f32(*src, j == 0 ? 127.0f : float(j) - 15.5f, 64 + j, 2);
            }
            tensor *ids = in.ids({6}, {7, 0, 9, 3, 5, 1});
            auto run = [&](tensor *cache, bool on_device) {
                std::unique_ptr<backend> cpu = std::make_unique<cpu_backend>(1);
                std::unique_ptr<backend> vk = d->make_backend(1);
                std::vector<backend *> bs = {cpu.get()};
                if (on_device) bs = {vk.get(), cpu.get()};
                context c(context_params{context_overhead(64), true});
                tensor *w = set_rows(c, cache, src, ids);
                graph g;
                build_forward_expand(g, w);
                scheduler s(bs);
                EXPECT_EQ(s.compute(g), compute_status::ok);
                if (on_device) {
                    EXPECT_EQ(s.backend_of(w), vk.get());
                }
                std::vector<uint8_t> bytes(cache->nbytes());
                cache->buffer ? cache->buffer->get_tensor(*cache, bytes.data(), 0, bytes.size())
                              : void(std::memcpy(bytes.data(), cache->data, bytes.size()));
                return bytes;
            };
            const std::vector<uint8_t> want = run(host, false), got = run(dev.t, true);
            EXPECT_EQ(got, want) << type_name(cache_type) << " cache";
            EXPECT_NE(want, init);
        }
}

// --- attention ----------------------------------------------------------------------------------

TEST(VulkanOps, Attention) {
    REQUIRE_VULKAN();
    constexpr float hidden = -std::numeric_limits<float>::infinity();
    for (device *d : vk_devices)
        for (dtype kv : {dtype::f16, dtype::f32, dtype::q8_0, dtype::q4_0})
            for (float softcap : {0.0f, 20.0f}) {
                inputs in;
                const bool blocks = type_traits(kv).block_size > 1;  // heads of whole blocks of 32
                const int64_t head_k = blocks ? 64 : 40, head_v = blocks ? 32 : 24, n_tokens = 5, n_head = 4,
                              n_head_kv = 2, n_cache = 80, n_kv = 70;
                tensor *q = in.uniform(dtype::f32, {head_k, n_tokens, n_head}, 1);
                std::vector<float> deq;
                tensor *k = blocks ? make_weights(*in.ctx, kv, head_k, n_cache, n_head_kv, 1, 2, deq)
                                   : in.uniform(kv, {head_k, n_cache, n_head_kv}, 2);
                tensor *v = blocks ? make_weights(*in.ctx, kv, head_v, n_cache, n_head_kv, 1, 3, deq)
                                   : in.uniform(kv, {head_v, n_cache, n_head_kv}, 3);
                tensor *mask = in.ctx->new_tensor(dtype::f32, {n_kv, 8});
                for (int64_t t = 0; t < 8; ++t)
                    for (int64_t j = 0; j < n_kv; ++j)
                        tensor_set_f32(*mask, (j <= 60 + t && j % 7 != 3) ? 0.0f : hidden, j, t);
                for (int64_t j = 0; j < n_kv; ++j) tensor_set_f32(*mask, hidden, j, 2);  // sees nothing
                const float scale = 1.0f / std::sqrt(float(head_k)) / (softcap > 0 ? softcap : 1.0f);
                expect_on_device_matches(
                    *d,
                    [&](context &c, graph_inputs &I) {
                        tensor *kv_k = view_3d(c, I(k), head_k, n_kv, n_head_kv, k->nb[1], k->nb[2], 0);
                        tensor *kv_v = view_3d(c, I(v), head_v, n_kv, n_head_kv, v->nb[1], v->nb[2], 0);
                        return attention(c, I(q), kv_k, kv_v, I(mask), scale, softcap);
                    },
                    1e-9, std::string("attention ") + type_name(kv) + " softcap " + std::to_string(softcap));
            }
}

// --- placement ------------------------------------------------------------------------------------

// (mxfp4, gpt-oss's expert type, has no shader: its products run on the CPU behind the device, as every
// mul_mat_id does.)
TEST(VulkanOps, UnsupportedOpRunsOnTheCpu) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices)
        for (dtype type : {dtype::q5_k, dtype::mxfp4}) {
            SCOPED_TRACE(type_name(type));
            inputs in;
            std::vector<float> deq;
            tensor *a = make_weights(*in.ctx, type, 256, 7, 1, 1, 3, deq);
            tensor *b = in.uniform(dtype::f32, {256, 3}, 4);
            std::unique_ptr<backend> vk = d->make_backend(1);
            context probe(context_params{context_overhead(4), true});
            EXPECT_FALSE(vk->supports_op(*mul_mat(probe, a, b)));
            EXPECT_FALSE(vk->supports_op(*argmax(probe, b)));
            const outcome r =
                run_both(*d, [&](context &c, graph_inputs &I) { return silu(c, mul_mat(c, I(a), I(b))); });
            EXPECT_LE(nmse(r.vk, r.cpu), 1e-12);
            // the mul_mat on the CPU (the scheduler may keep the silu there too)
            cpu_backend cpu(1);
            context c(context_params{context_overhead(16), true});
            tensor *mm = mul_mat(c, a, b);
            tensor *out = silu(c, mm);
            graph g;
            build_forward_expand(g, out);
            EXPECT_TRUE(vk->supports_op(*out));
            scheduler s({vk.get(), &cpu});
            EXPECT_EQ(s.compute(g), compute_status::ok);
            EXPECT_EQ(s.backend_of(mm), &cpu);
        }
}

// The ops of the 2026 families that no shader computes (attention with sinks, swiglu_oai, add_id,
// l2_norm, Mamba-2's scan, the gated delta net): the device refuses them and the scheduler runs them
// on the CPU, with the CPU's values.
TEST(VulkanOps, NewFamilyOpsRunOnTheCpu) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices) {
        inputs in;
        tensor *gate = in.uniform(dtype::f32, {40, 3}, 1, -9.0f, 9.0f),
               *up = in.uniform(dtype::f32, {40, 3}, 2);
        tensor *bias = in.uniform(dtype::f32, {40, 5}, 3);
        tensor *ids = in.ids({3, 1}, {4, 0, 2});
        tensor *q = in.uniform(dtype::f32, {32, 3, 4}, 4), *k = in.uniform(dtype::f32, {32, 6, 2}, 5);
        tensor *v = in.uniform(dtype::f32, {32, 6, 2}, 6),
               *mask = in.uniform(dtype::f32, {6, 3}, 7, -1.0f, 0.0f);
        tensor *sinks = in.uniform(dtype::f32, {4}, 8);
        tensor *x = in.uniform(dtype::f32, {8, 3}, 9), *dt = in.uniform(dtype::f32, {2, 3}, 10);
        tensor *A = in.uniform(dtype::f32, {2}, 11, -2.0f, -0.5f), *BC = in.uniform(dtype::f32, {16, 3}, 12);
        tensor *ssm_states = in.uniform(dtype::f32, {16, 8, 1}, 13);
        tensor *g = in.uniform(dtype::f32, {2, 3}, 14, -1.0f, -0.1f),
               *beta = in.uniform(dtype::f32, {2, 3}, 15, 0.1f, 0.9f);
        tensor *dn_states = in.uniform(dtype::f32, {gated_delta_net_state_floats(4, 4), 2, 1}, 16);
        tensor *seq = in.ids({3}, {0, 0, 0});
        const std::vector<std::pair<const char *, builder>> cases = {
            {"swiglu_oai",
             [&](context &c, graph_inputs &I) { return swiglu_oai(c, I(gate), I(up), 1.702f, 7.0f); }},
            {"add_id", [&](context &c, graph_inputs &I) { return add_id(c, I(gate), I(bias), I(ids)); }},
            {"l2_norm", [&](context &c, graph_inputs &I) { return l2_norm(c, I(gate), 1e-6f); }},
            {"attention with sinks",
             [&](context &c, graph_inputs &I) {
                 return attention(c, I(q), I(k), I(v), I(mask), 0.2f, 0.0f, nullptr, I(sinks));
             }},
            {"ssm_scan_mamba2",
             [&](context &c, graph_inputs &I) {
                 return ssm_scan_mamba2(c, I(x), I(dt), I(A), I(BC), I(BC), I(ssm_states), I(seq), I(A));
             }},
            {"gated_delta_net",
             [&](context &c, graph_inputs &I) {
                 return gated_delta_net(c, I(x), I(x), I(x), I(g), I(beta), I(dn_states), I(seq), 0.5f);
             }},
        };
        for (const auto &[name, build] : cases) {
            SCOPED_TRACE(name);
            std::unique_ptr<backend> vk = d->make_backend(1);
            context probe(context_params{context_overhead(64), true});
            graph_inputs P(probe);
            EXPECT_FALSE(vk->supports_op(*build(probe, P)));
            const outcome r = run_both(*d, build);
            EXPECT_FALSE(r.on_device);
            EXPECT_EQ(r.vk, r.cpu);
        }
    }
}

// An observer sees the nodes it asks for, computed, with the CPU's values.
TEST(VulkanOps, EvalCallback) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices) {
        inputs in;
        tensor *x = in.uniform(dtype::f32, {33, 4}, 1);
        std::map<std::string, std::vector<float>> seen[2];
        for (int run = 0; run < 2; ++run) {
            std::unique_ptr<backend> vk = d->make_backend(1);
            cpu_backend cpu(1);
            context c(context_params{context_overhead(64), true});
            graph_inputs I(c);
            tensor *h = rms_norm(c, I(x), 1e-5f)->set_name("norm");
            tensor *s = scale(c, h, 2.0f)->set_name("scaled");
            tensor *out = silu(c, s)->set_name("out");
            out->flags |= tensor_flag_output;
            graph g;
            build_forward_expand(g, out);
            scheduler sched(run == 0 ? std::vector<backend *>{vk.get(), &cpu} : std::vector<backend *>{&cpu});
            sched.set_eval_callback([&](tensor *node, bool ask) {
                if (ask) return std::string(node->name) != "scaled";
                seen[run][node->name] = read_values(*node);
                return true;
            });
            sched.alloc_graph(g);
            I.upload();
            EXPECT_EQ(sched.compute(g), compute_status::ok);
            if (run == 0) {
                EXPECT_EQ(sched.backend_of(out), vk.get());
            }
        }
        EXPECT_EQ(seen[0].size(), 2u);
        for (const char *name : {"norm", "out"}) {
            ASSERT_EQ(seen[0][name].size(), seen[1][name].size()) << name;
            EXPECT_LE(nmse(seen[0][name], seen[1][name]), 1e-12) << name;
        }
    }
}

// An abort callback that says stop: the graph is not run.
TEST(VulkanOps, AbortCallback) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices) {
        std::unique_ptr<backend> vk = d->make_backend(1);
        vk->set_abort_callback([] { return true; });
        graph g;
        EXPECT_EQ(vk->graph_compute(g, {}), compute_status::aborted);
        vk->set_abort_callback({});
        EXPECT_EQ(vk->graph_compute(g, {}), compute_status::ok);
        EXPECT_EQ(vk->synchronize(), compute_status::ok);
        vk->record_event()->synchronize();
    }
}

// A little block: norm, projections, rope, attention, FFN, as a model runs it (several splits).
TEST(VulkanOps, SmallBlock) {
    REQUIRE_VULKAN();
    for (device *d : vk_devices)
        for (bool quantized : {false, true}) {
            inputs in;
            const dtype t8 = quantized ? dtype::q8_0 : dtype::f32, t4 = quantized ? dtype::q4_0 : dtype::f32;
            const int64_t n_embd = 64, n_tokens = 6, n_head = 4, head = 16;
            std::vector<float> deq;
            tensor *x = in.uniform(dtype::f32, {n_embd, n_tokens}, 1);
            tensor *wq = make_weights(*in.ctx, t8, n_embd, n_embd, 1, 1, 2, deq);
            tensor *wk = make_weights(*in.ctx, t4, n_embd, n_embd, 1, 1, 3, deq);
            tensor *wv =
                make_weights(*in.ctx, quantized ? dtype::f16 : dtype::f32, n_embd, n_embd, 1, 1, 4, deq);
            tensor *w_up = make_weights(*in.ctx, t8, n_embd, 96, 1, 1, 5, deq);
            tensor *w_gate = make_weights(*in.ctx, t8, n_embd, 96, 1, 1, 6, deq);
            tensor *w_down = make_weights(*in.ctx, t4, 96, n_embd, 1, 1, 7, deq);
            tensor *pos = in.ids({n_tokens}, {0, 1, 2, 3, 4, 5});
            tensor *mask = in.ctx->new_tensor(dtype::f32, {n_tokens, n_tokens});
            for (int64_t t = 0; t < n_tokens; ++t)
                for (int64_t j = 0; j < n_tokens; ++j)
                    tensor_set_f32(*mask, j <= t ? 0.0f : -std::numeric_limits<float>::infinity(), j, t);
            rope_params rp;
            rp.n_dims = head;
            rp.mode = rope_mode_neox;
            expect_on_device_matches(
                *d,
                [&](context &c, graph_inputs &I) {
                    tensor *h = rms_norm(c, I(x), 1e-5f);
                    tensor *q =
                        rope(c, reshape_3d(c, mul_mat(c, I(wq), h), head, n_head, n_tokens), I(pos), rp);
                    tensor *k =
                        rope(c, reshape_3d(c, mul_mat(c, I(wk), h), head, n_head, n_tokens), I(pos), rp);
                    tensor *v = reshape_3d(c, mul_mat(c, I(wv), h), head, n_head, n_tokens);
                    tensor *att = attention(c, permute(c, q, 0, 2, 1, 3), cont(c, permute(c, k, 0, 2, 1, 3)),
                                            cont(c, permute(c, v, 0, 2, 1, 3)), I(mask), 0.25f);
                    tensor *y = add(c, I(x), reshape_2d(c, att, n_embd, n_tokens));
                    tensor *f = swiglu(c, mul_mat(c, I(w_gate), y), mul_mat(c, I(w_up), y));
                    return add(c, y, mul_mat(c, I(w_down), f));
                },
                // the CPU converts the activations of each quantized product to q8_0: errors add up
                quantized ? 5e-3 : 1e-10,
                quantized ? "small block, quantized weights" : "small block, f32 weights");
        }
}

}  // namespace
