// tests/runtime/test_lora.cpp — LoRA adapters applied at run time: scale 0 is the base bit for bit;
// the logits with adapters equal those of the model with the adapters merged into its weights
// (lora_merge_write, what `weft export-lora` writes: F32 NMSE <= 1e-10; 1e-8 where GELU's f16 table
// steps) on every synthetic architecture, with two adapters and scales, and on a Q8_0 base (within the
// merged file's requantization); bad adapters are clear errors naming the problem.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/context_test_util.h"
#include "weft/core/error.h"
#include "weft/model/lora.h"
#include "weft/model/model.h"
#include "weft/model/synth.h"

namespace weft {
namespace {

using test::all_logits;
using test::params_with;
using test::small_spec;
using test::some_tokens;

double nmse(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
    double err = 0.0, ref = 0.0;
    for (size_t r = 0; r < a.size(); ++r)
        for (size_t i = 0; i < a[r].size(); ++i) {
            const double d = double(a[r][i]) - double(b[r][i]);
            err += d * d;
            ref += double(b[r][i]) * double(b[r][i]);
        }
    return err / ref;
}

std::vector<std::vector<float>> logits_of(const model &m, std::vector<lora_use> loras) {
    inference_params ip = params_with(64, 64);
    // an f32 cache: an f16 one rounds K and V, so a last-bit difference of a weight can move a cached
    // value by an f16 step, and the comparison would measure that instead of the adapter
    ip.type_k = ip.type_v = dtype::f32;
    ip.loras = std::move(loras);
    inference_context ctx(m, ip);
    return all_logits(ctx, some_tokens(12, int32_t(m.hparams().n_vocab)));
}

// The logits of the base with the adapters merged into its weights (what export-lora writes).
std::vector<std::vector<float>> merged_logits(const std::string &base_path, std::span<const lora_use> uses,
                                              int64_t *n_merged = nullptr) {
    test::temp_file merged_file("lora-merged");
    const int64_t n = lora_merge_write(base_path, uses, merged_file.path());
    if (n_merged) *n_merged = n;
    return logits_of(*model::load(merged_file.path()), {});
}

struct model_and_adapter {
    test::temp_file base_file{"lora-base"}, adapter_file{"lora-adapter"};
    std::unique_ptr<model> base;
    std::unique_ptr<lora_adapter> adapter;
    model_and_adapter(const synth_spec &s, int64_t rank = 4, float alpha = 8.0f, uint32_t adapter_seed = 0) {
        synth_write(s, base_file.path());
        synth_spec a = s;
        if (adapter_seed) a.seed = adapter_seed;
        synth_lora_write(a, rank, alpha, adapter_file.path());
        base = model::load(base_file.path());
        adapter = lora_adapter::load(adapter_file.path(), *base);
    }
};

TEST(Lora, ScaleZeroIsTheBaseBitForBit) {
    model_and_adapter ma(small_spec());
    const auto base = logits_of(*ma.base, {});
    EXPECT_EQ(logits_of(*ma.base, {{ma.adapter.get(), 0.0f}}), base);
    EXPECT_NE(logits_of(*ma.base, {{ma.adapter.get(), 1.0f}}), base);  // and scale 1 changes them
}

// The adapter at run time against the same adapter merged into the weights.
TEST(Lora, RunTimeEqualsMergedOnEveryArchitecture) {
    for (const std::string arch :
         {"llama", "qwen2", "qwen3", "gemma", "gemma2", "phi2", "phi3", "granite", "starcoder2", "olmo2",
          "command-r", "qwen2moe", "deepseek2", "qwen3moe", "gemma3"}) {
        SCOPED_TRACE(arch);
        synth_spec s = small_spec(arch);
        model_and_adapter ma(s);
        EXPECT_GT(ma.adapter->pairs().size(), 0u);
        const lora_use use{ma.adapter.get(), 0.75f};
        int64_t n_merged = 0;
        const auto expected =
            merged_logits(ma.base_file.path(), std::span<const lora_use>(&use, 1), &n_merged);
        EXPECT_EQ(n_merged, int64_t(ma.adapter->pairs().size()));
        const auto runtime = logits_of(*ma.base, {use});
        const double e = nmse(runtime, expected);
        // GELU is the reference engine's f16 table (as in weft's CPU kernels): an input a last bit
        // away can land on the next f16 step, so a position now and then differs by that step
        const bool f16_gelu =
            arch == "gemma" || arch == "gemma2" || arch == "gemma3" || arch == "phi2" || arch == "starcoder2";
        EXPECT_LE(e, f16_gelu ? 1e-8 : 1e-10);
        EXPECT_GT(nmse(logits_of(*ma.base, {}), expected), 1e-6);  // the adapter does change the logits
    }
}

// The scales are a graph input: changing them between non-zero values reuses the graph and gives the
// bits of a context made with the new scales; a scale going to 0 (or from 0) builds a graph anew.
TEST(Lora, ChangingScalesReusesTheGraph) {
    model_and_adapter ma(small_spec());
    const std::vector<token> toks = some_tokens(12, int32_t(ma.base->hparams().n_vocab));
    inference_params ip = params_with(64, 64);
    ip.type_k = ip.type_v = dtype::f32;
    ip.loras = {{ma.adapter.get(), 1.0f}};
    inference_context ctx(*ma.base, ip);
    all_logits(ctx, toks);
    const int64_t builds = ctx.perf().n_graph_builds;
    for (const float scale : {0.5f, -2.0f}) {
        ctx.kv_clear();
        const float s[] = {scale};
        ctx.set_lora_scales(s);
        EXPECT_EQ(all_logits(ctx, toks), logits_of(*ma.base, {{ma.adapter.get(), scale}})) << scale;
        EXPECT_EQ(ctx.perf().n_graph_builds, builds) << "scale " << scale << " built a graph";
    }
    ctx.kv_clear();
    const float off[] = {0.0f};
    ctx.set_lora_scales(off);
    EXPECT_EQ(all_logits(ctx, toks), logits_of(*ma.base, {}));  // the base, bit for bit
    EXPECT_EQ(ctx.perf().n_graph_builds, builds + 1);
}

TEST(Lora, TwoAdaptersWithScales) {
    model_and_adapter ma(small_spec());
    test::temp_file second_file("lora-second");
    synth_spec other = small_spec();
    other.seed = 99;
    synth_lora_write(other, 8, 4.0f, second_file.path());
    const auto second = lora_adapter::load(second_file.path(), *ma.base);
    const std::vector<lora_use> uses = {{ma.adapter.get(), 1.0f}, {second.get(), -0.5f}};
    EXPECT_LE(nmse(logits_of(*ma.base, uses), merged_logits(ma.base_file.path(), uses)), 1e-10);
}

// A quantized base: the run-time product uses the Q8_0 weights as they are, the merged file holds
// W + ΔW quantized again; they agree to the Q8_0 rounding of the sum.
TEST(Lora, QuantizedBase) {
    synth_spec s = small_spec();
    s.type = dtype::q8_0;
    model_and_adapter ma(s);
    const lora_use use{ma.adapter.get(), 1.0f};
    const auto runtime = logits_of(*ma.base, {use});
    const double e = nmse(runtime, merged_logits(ma.base_file.path(), std::span<const lora_use>(&use, 1)));
    EXPECT_LE(e, 1e-3);
    EXPECT_LT(e, nmse(logits_of(*ma.base, {}), runtime) / 10);  // far closer than the base is
}

void expect_load_error(const std::string &adapter_path, const model &base, const std::string &part) {
    try {
        lora_adapter::load(adapter_path, base);
        ADD_FAILURE() << adapter_path << " was accepted";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(adapter_path), std::string::npos) << e.what();
    }
}

TEST(Lora, BadAdaptersAreClearErrors) {
    model_and_adapter ma(small_spec());
    // an adapter for another shape
    test::temp_file wide("lora-wide");
    synth_spec w = small_spec();
    w.n_embd = 128;
    synth_lora_write(w, 4, 8.0f, wide.path());
    expect_load_error(wide.path(), *ma.base, "has shape");
    // a lora_a without its lora_b
    test::temp_file half("lora-half");
    test::gguf_edits drop;
    drop.drop_tensor = "blk.1.ffn_up.lora_b";
    test::copy_gguf(ma.adapter_file.path(), half.path(), drop);
    expect_load_error(half.path(), *ma.base, "blk.1.ffn_up.lora_b");
    // another architecture
    test::temp_file other_arch("lora-arch");
    test::gguf_edits arch;
    arch.set_strings["general.architecture"] = "qwen2";
    test::copy_gguf(ma.adapter_file.path(), other_arch.path(), arch);
    expect_load_error(other_arch.path(), *ma.base, "an adapter for 'qwen2'");
    // a model, not an adapter
    expect_load_error(ma.base_file.path(), *ma.base, "not a LoRA adapter");
    // an adapter of a weight the model does not have
    test::temp_file renamed("lora-renamed");
    test::gguf_edits unknown;
    unknown.set_strings["adapter.type"] = "ia3";
    test::copy_gguf(ma.adapter_file.path(), renamed.path(), unknown);
    expect_load_error(renamed.path(), *ma.base, "adapter.type");
}

}  // namespace
}  // namespace weft
