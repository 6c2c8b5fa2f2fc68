// tests/runtime/test_offload.cpp — offloading blocks to another device (model_params::n_gpu_layers,
// the reference engine's -ngl), without a GPU: a "detached" device whose memory the CPU backend may
// not read (its buffer type is not a host type, so the scheduler copies between it and the host)
// and whose backend computes with the CPU kernels but refuses one op (glu, which then runs on the
// host). Offloaded blocks keep their weights and KV cache rows there; every split of blocks gives
// the CPU's logits; `describe_graph` shows where each node runs. A cache type the device cannot
// write stays in host memory.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/context_test_util.h"
#include "weft/backends/cpu.h"
#include "weft/core/device.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/gguf/gguf_split.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"

namespace weft {
namespace {

using test::synth_file;

class detached_buffer_type;

// Host memory that only the detached backend reads; copies in and out through set/get_tensor.
class detached_buffer final : public backend_buffer {
  public:
    detached_buffer(buffer_type &type, size_t size)
        : type_(type),
          memory_(static_cast<uint8_t *>(std::aligned_alloc(64, (size + 63) / 64 * 64))),
          size_(size) {
        if (!memory_) throw error("detached buffer: out of memory");
    }
    ~detached_buffer() override { std::free(memory_); }
    buffer_type &type() const override { return type_; }
    void *base() const override { return memory_; }
    size_t size() const override { return size_; }
    void set_tensor(tensor &t, const void *src, size_t offset, size_t n) override {
        std::memcpy(static_cast<uint8_t *>(t.data) + offset, src, n);
        ++sets;
    }
    void get_tensor(const tensor &t, void *dst, size_t offset, size_t n) const override {
        std::memcpy(dst, static_cast<const uint8_t *>(t.data) + offset, n);
        ++gets;
    }
    void clear(uint8_t value) override { std::memset(memory_, value, size_); }

    static inline int sets = 0;
    static inline int gets = 0;

  private:
    buffer_type &type_;
    uint8_t *memory_;
    size_t size_;
};

class detached_buffer_type final : public buffer_type {
  public:
    const char *name() const override { return "detached"; }
    std::unique_ptr<backend_buffer> alloc(size_t size) override {
        return std::make_unique<detached_buffer>(*this, size);
    }
    bool is_host() const override { return false; }
};

detached_buffer_type &detached_memory() {
    static detached_buffer_type t;
    return t;
}

class detached_backend final : public backend {
  public:
    explicit detached_backend(int n_threads) : cpu_(n_threads) {}
    const char *name() const override { return "Detached0"; }
    buffer_type &default_buffer_type() override { return detached_memory(); }
    bool supports_op(const tensor &node) const override {
        if (node.op == op_kind::set_rows && node.type == dtype::bf16) return false;  // no bf16 cache rows
        return node.op != op_kind::glu && cpu_.supports_op(node);
    }
    compute_status graph_compute(graph &g, const eval_callback &cb) override {
        ++graphs;
        return cpu_.graph_compute(g, cb);
    }
    void set_n_threads(int n) override { cpu_.set_n_threads(n); }

    static inline int graphs = 0;

  private:
    cpu_backend cpu_;
};

class detached_device final : public device {
  public:
    const char *name() const override { return "Detached0"; }
    std::string description() const override { return "host memory the CPU backend may not read"; }
    device_kind kind() const override { return device_kind::gpu; }
    device_memory memory() const override { return {size_t(1) << 30, size_t(1) << 30}; }
    buffer_type &default_buffer_type() override { return detached_memory(); }
    std::unique_ptr<backend> make_backend(int n_threads) override {
        return std::make_unique<detached_backend>(n_threads);
    }
};

device &detached() {
    static device &d = register_device(std::make_unique<detached_device>());
    return d;
}

synth_spec four_blocks(dtype type) {
    synth_spec s = test::small_spec();
    s.n_layer = 4;
    s.type = type;
    return s;
}

std::unique_ptr<model> load_offloaded(const std::string &path, int n_gpu_layers) {
    model_params mp;
    if (n_gpu_layers > 0) {
        mp.offload_device = &detached();
        mp.n_gpu_layers = n_gpu_layers;
    }
    return model::load(path, mp);
}

// The logits of a prompt, then of four tokens decoded one at a time.
std::vector<std::vector<float>> prompt_and_steps(const model &m) {
    inference_context ctx(m, test::params_with(64, 512));
    const std::vector<token> prompt = test::some_tokens(9, int32_t(m.hparams().n_vocab));
    std::vector<std::vector<float>> rows = test::all_logits(ctx, prompt);
    for (int i = 0; i < 4; ++i) {
        batch b;
        b.add(token(7 + 13 * i), llm_pos(prompt.size() + size_t(i)), {0}, true);
        EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        rows.push_back(test::last_logits(ctx));
    }
    return rows;
}

TEST(Offload, BlocksAndTheirCacheLiveOnTheDevice) {
    synth_file f("offload-place", four_blocks(dtype::f32));
    auto m = load_offloaded(f.path(), 2);
    EXPECT_EQ(m->offload_device(), &detached());
    EXPECT_EQ(m->n_offloaded_layers(), 2);
    EXPECT_FALSE(m->output_offloaded());
    for (int64_t il = 0; il < 4; ++il) {
        EXPECT_EQ(m->layer_offloaded(il), il >= 2) << il;
        const tensor *wq = m->weights().layers[size_t(il)].wq;
        EXPECT_EQ(&wq->buffer->type() == &detached_memory(), il >= 2) << il;
    }
    EXPECT_TRUE(m->weights().output->buffer->is_host());
    EXPECT_TRUE(m->weights().tok_embd->buffer->is_host());

    inference_context ctx(*m, test::params_with(32, 512));
    for (int64_t il = 0; il < 4; ++il) {
        const kv_layer &l = ctx.kv().layers()[size_t(il)];
        EXPECT_EQ(&l.k->buffer->type() == &detached_memory(), il >= 2) << il;
        EXPECT_EQ(&l.v->buffer->type() == &detached_memory(), il >= 2) << il;
    }

    // more layers than blocks: the output head too (its norm and matrix), never the token embedding
    auto all = load_offloaded(f.path(), 99);
    EXPECT_EQ(all->n_offloaded_layers(), 4);
    EXPECT_TRUE(all->output_offloaded());
    EXPECT_EQ(&all->weights().output->buffer->type(), &detached_memory());
    EXPECT_EQ(&all->weights().output_norm->buffer->type(), &detached_memory());
    EXPECT_TRUE(all->weights().tok_embd->buffer->is_host());
}

TEST(Offload, EverySplitOfTheBlocksGivesTheCpusLogits) {
    for (dtype type : {dtype::f32, dtype::q8_0}) {
        synth_file f(std::string("offload-") + type_name(type), four_blocks(type));
        const std::vector<std::vector<float>> on_cpu = prompt_and_steps(*load_offloaded(f.path(), 0));
        for (int ngl : {1, 3, 4, 5}) {
            const int graphs = detached_backend::graphs;
            const std::vector<std::vector<float>> split = prompt_and_steps(*load_offloaded(f.path(), ngl));
            EXPECT_GT(detached_backend::graphs, graphs) << "the device computed nothing";
            ASSERT_EQ(split.size(), on_cpu.size());
            for (size_t r = 0; r < on_cpu.size(); ++r)
                EXPECT_LE(test::max_rel_diff(split[r], on_cpu[r].data()), test::same_logits)
                    << type_name(type) << " -ngl " << ngl << " row " << r;
        }
    }
}

TEST(Offload, ACacheTypeTheDeviceCannotWriteStaysOnTheHost) {
    synth_file f("offload-bf16", four_blocks(dtype::f32));
    auto cpu = load_offloaded(f.path(), 0);
    auto split = load_offloaded(f.path(), 2);
    inference_params p = test::params_with(32, 512);
    p.type_k = p.type_v = dtype::bf16;
    inference_context on_cpu(*cpu, p), offloaded(*split, p);
    for (const kv_layer &l : offloaded.kv().layers()) EXPECT_TRUE(l.k->buffer->is_host());
    const std::vector<token> toks = test::some_tokens(5, int32_t(cpu->hparams().n_vocab));
    const std::vector<std::vector<float>> a = test::all_logits(on_cpu, toks),
                                          b = test::all_logits(offloaded, toks);
    for (size_t r = 0; r < a.size(); ++r)
        EXPECT_LE(test::max_rel_diff(b[r], a[r].data()), test::same_logits) << r;
}

TEST(Offload, TheGraphShowsWhereEachNodeRuns) {
    synth_file f("offload-graph", four_blocks(dtype::f32));
    auto m = load_offloaded(f.path(), 2);
    inference_context ctx(*m, test::params_with(32, 512));
    const inference_context::graph_report r = ctx.describe_graph(4);
    ASSERT_EQ(r.node_backends.size(), r.n_nodes);
    EXPECT_GT(r.n_splits, 2);  // host blocks, device blocks, and the glu nodes the device refuses
    EXPECT_GT(r.n_copies, 0);
    std::vector<std::string> names;
    ctx.visit_step_graph(4, [&](const graph &g) {
        for (const tensor *n : g.nodes) names.emplace_back(n->name);
    });
    ASSERT_EQ(names.size(), r.n_nodes);
    for (size_t i = 0; i < names.size(); ++i) {
        const std::string &node = names[i], &backend = r.node_backends[i];
        const size_t dash = node.find('-');
        const bool device_block = dash != std::string::npos && std::atoi(node.c_str() + dash + 1) >= 2;
        if (node.starts_with("Qcur-") || node.starts_with("ffn_out-") || node.starts_with("kqv-")) {
            EXPECT_EQ(backend, device_block ? "Detached0" : "CPU") << node;
        }
        if (node.starts_with("ffn_swiglu-")) {
            EXPECT_EQ(backend, "CPU") << node;  // refused: the host runs it
        }
    }
}

TEST(Offload, CacheRowsMoveAndSaveThroughTheDevice) {
    synth_file f("offload-state", four_blocks(dtype::f32));
    auto m = load_offloaded(f.path(), 4);
    inference_context ctx(*m, test::params_with(64, 512, 2));
    const std::vector<token> toks = test::some_tokens(6, int32_t(m->hparams().n_vocab));
    test::all_logits(ctx, toks);
    const int gets = detached_buffer::gets, sets = detached_buffer::sets;
    const std::vector<uint8_t> saved = ctx.state_save();
    EXPECT_GT(detached_buffer::gets, gets);  // the rows were read from the device
    ctx.kv_clear();
    ctx.state_load(saved);
    EXPECT_GT(detached_buffer::sets, sets);  // and written back there
    batch b;
    b.add(5, llm_pos(toks.size()), {0}, true);
    ASSERT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    const std::vector<float> resumed = test::last_logits(ctx);

    inference_context fresh(*m, test::params_with(64, 512, 2));
    test::all_logits(fresh, toks);
    ASSERT_EQ(fresh.decode(b), decode_ok) << fresh.last_error();
    EXPECT_EQ(test::last_logits(fresh), resumed);
}

TEST(Offload, ASplitSetOffloadsAsTheSingleFileDoes) {
    synth_file f("offload-split-set", four_blocks(dtype::f32));
    const auto in = gguf_set::open(f.path());
    gguf_split_limits every_six;
    every_six.max_tensors = 6;  // blocks straddle parts
    const std::vector<gguf_split_part> parts = gguf_plan_split(*in, f.path() + ".split", every_six);
    gguf_write_split(*in, parts);
    const std::vector<std::vector<float>> whole = prompt_and_steps(*load_offloaded(f.path(), 3)),
                                          split = prompt_and_steps(*load_offloaded(parts[0].path, 3));
    for (const auto &p : parts) std::remove(p.path.c_str());
    EXPECT_EQ(split, whole);
}

}  // namespace
}  // namespace weft
