// tests/runtime/test_gemma4.cpp — what Gemma 4 adds to the memory and the loader, beyond the logits
// test_family_reference.cpp compares with the reference engine: its shared KV layers keep no KV
// rows (the cache holds the other layers' only), and read their source layers' rows in every
// batch split and after a saved state is loaded; the MoE form (26B-A4B) loads its experts; the files
// and inputs weft cannot run are refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "runtime/context_test_util.h"
#include "runtime/family_table.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"

namespace weft {
namespace gemma4_tests {  // named: the unity build joins this file with others
namespace {

using test::synth_file;

// The family table's gemma4: windows on layers 0, 1, 3, 4, global layers 2 and 5; layers 3-5 read
// the rows of layers 1 (3 and 4) and 2 (5). Its "moe" variant: the same attention, no shared KV
// layers, experts on every layer.
synth_spec gemma4_spec(const std::string &variant = "") {
    for (const test::family_case &f : test::families())
        if (std::string(f.arch) == "gemma4" && f.variant == variant) return f.spec();
    ADD_FAILURE() << "gemma4 " << variant << " is not in family_table.h";
    return {};
}

TEST(Gemma4, SharedKvLayersKeepNoRowsOfTheirOwn) {
    synth_file f("gemma4-shared-kv", gemma4_spec());
    const auto m = model::load(f.path());
    const model_hparams &hp = m->hparams();
    ASSERT_EQ(hp.n_layer, 6);
    EXPECT_EQ(hp.kv_source, (std::vector<int64_t>{0, 1, 2, 1, 1, 2}));
    EXPECT_EQ(hp.head_k(0), 16);  // a window layer's heads
    EXPECT_EQ(hp.head_k(2), 32);  // a global layer's
    EXPECT_EQ(hp.n_embd_per_layer, 32);

    inference_context ctx(*m, test::params_with(64, 512));
    const kv_cache &kv = ctx.kv();
    size_t own_bytes = 0;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const kv_layer &l = kv.layers()[size_t(il)];
        EXPECT_EQ(l.k != nullptr, il < 3) << "layer " << il;
        EXPECT_EQ(l.v != nullptr, il < 3) << "layer " << il;
        if (l.k) {
            EXPECT_EQ(l.k->ne[0], hp.head_k(il) * hp.n_head_kv(il)) << "layer " << il;
            own_bytes += l.k->nbytes() + l.v->nbytes();
        }
    }
    EXPECT_GT(own_bytes, 0u);
    EXPECT_LE(kv.total_bytes(), own_bytes + 4096) << "the cache holds rows of the shared layers";
}

// A sequence decoded, saved, and loaded into a fresh context continues with the same bits: the
// saved rows are the source layers', which the shared layers read after the load.
TEST(Gemma4, SharedRowsContinueAfterASavedStateIsLoaded) {
    synth_file f("gemma4-state", gemma4_spec());
    const auto m = model::load(f.path());
    const auto prompt = test::some_tokens(11, 300);
    const token next = 42;

    inference_context first(*m, test::params_with(64, 4));
    ASSERT_EQ(first.decode(batch::from_tokens(prompt)), decode_ok) << first.last_error();
    const std::vector<uint8_t> saved = first.state_save();
    batch b;
    b.add(next, llm_pos(prompt.size()), {0}, true);
    ASSERT_EQ(first.decode(b), decode_ok) << first.last_error();
    const std::vector<float> want = test::last_logits(first);

    inference_context second(*m, test::params_with(64, 512));
    second.state_load(saved);
    ASSERT_EQ(second.decode(b), decode_ok) << second.last_error();
    const std::vector<float> got = test::last_logits(second);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

// The keys of the global layers turn with frequency factors the window layers' do not: moving
// positions is refused by name rather than done wrong.
TEST(Gemma4, MovingPositionsIsRefused) {
    synth_file f("gemma4-shift", gemma4_spec());
    const auto m = model::load(f.path());
    EXPECT_FALSE(m->can_shift_kv());
    inference_context ctx(*m, test::params_with(64, 512));
    ASSERT_EQ(ctx.decode(batch::from_tokens(test::some_tokens(5, 300))), decode_ok) << ctx.last_error();
    EXPECT_THROW(ctx.kv_seq_add(0, 0, -1, -2), error);
}

std::string load_error(const std::string &path) {
    try {
        model::load(path);
    } catch (const error &e) {
        return e.what();
    }
    return "";
}

// The 26B-A4B's form: a router and experts (gate and up in one tensor, a scale per expert) beside
// the dense FFN on every layer, every layer with KV rows of its own, no per-layer inputs.
TEST(Gemma4, MixtureOfExpertsFileLoadsTheExpertsBesideTheDenseFfn) {
    synth_file f("gemma4-moe-load", gemma4_spec("moe"));
    const auto m = model::load(f.path());
    const model_hparams &hp = m->hparams();
    EXPECT_EQ(hp.n_expert, 4);
    EXPECT_EQ(hp.n_expert_used, 2);
    EXPECT_EQ(hp.n_ff_exp, 96);
    EXPECT_EQ(hp.n_ff(0), 192);
    EXPECT_TRUE(hp.expert_weights_norm);
    EXPECT_EQ(hp.n_embd_per_layer, 0);
    EXPECT_EQ(hp.kv_source, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
    for (const layer_weights &l : m->weights().layers) {
        EXPECT_TRUE(l.ffn_gate && l.ffn_up && l.ffn_down);  // the dense FFN stays
        EXPECT_TRUE(l.ffn_gate_inp && l.ffn_gate_inp_s && l.ffn_gate_up_exps && l.ffn_down_exps &&
                    l.ffn_down_exps_s);
        EXPECT_TRUE(l.ffn_pre_norm_2 && l.ffn_post_norm_1 && l.ffn_post_norm_2);
        EXPECT_EQ(l.ffn_gate_exps, nullptr);
        EXPECT_EQ(l.per_layer_inp_gate, nullptr);
    }
    inference_context ctx(*m, test::params_with(64, 512));
    ASSERT_EQ(ctx.decode(batch::from_tokens(test::some_tokens(9, 300))), decode_ok) << ctx.last_error();
}

// Per-layer inputs are looked up by token id: a batch of embeddings (an image's) is refused with a
// reason, not run with made-up inputs.
TEST(Gemma4, EmbeddingsInputIsRefusedWithPerLayerInputs) {
    synth_file f("gemma4-embd", gemma4_spec());
    const auto m = model::load(f.path());
    ASSERT_GT(m->hparams().n_embd_per_layer, 0);
    inference_context ctx(*m, test::params_with(64, 512));
    const std::vector<float> embd(size_t(3 * m->hparams().n_embd), 0.5f);
    EXPECT_NE(ctx.decode(batch::from_embeddings(embd, 3)), decode_ok);
    EXPECT_NE(ctx.last_error().find("per-layer inputs"), std::string::npos) << ctx.last_error();
    // the context stays usable
    EXPECT_EQ(ctx.decode(batch::from_tokens(test::some_tokens(4, 300))), decode_ok) << ctx.last_error();
}

// A file edited one way per case: each must fail to load with an error that names the case's part.
struct edit_case {
    const char *what;
    test::gguf_edits edits;
    const char *message;  // a part of the error
};

test::gguf_edits removing_key(const char *key) {
    test::gguf_edits e;
    e.remove_keys.push_back(key);
    return e;
}

test::gguf_edits dropping_tensor(const char *name) {
    test::gguf_edits e;
    e.drop_tensor = name;
    return e;
}

void expect_refused(const synth_spec &spec, const std::string &stem, const std::vector<edit_case> &cases) {
    synth_file f(stem, spec);
    for (size_t i = 0; i < cases.size(); ++i) {
        const edit_case &c = cases[i];
        SCOPED_TRACE(c.what);
        test::temp_file edited(stem + "-" + std::to_string(i));
        test::copy_gguf(f.path(), edited.path(), c.edits);
        EXPECT_NE(load_error(edited.path()).find(c.message), std::string::npos) << load_error(edited.path());
    }
}

TEST(Gemma4, FilesWeftCannotRunAreRefusedByName) {
    // 4 shared layers: the global layers 2 and 5 would read the rows of layer 1, a window layer
    test::gguf_edits four_shared;
    four_shared.set_ints["gemma4.attention.shared_kv_layers"] = 4;
    expect_refused(
        gemma4_spec(), "gemma4-refusal",
        {{"shared layers of another kind", four_shared, "shared_kv_layers"},
         {"no window head size", removing_key("gemma4.attention.key_length_swa"), "key_length_swa"},
         {"no window layers", removing_key("gemma4.attention.sliding_window_pattern"),
          "sliding_window_pattern"},
         {"no frequency factors", dropping_tensor("rope_freqs.weight"), "rope_freqs"}});
}

TEST(Gemma4, MixtureOfExpertsFilesWithoutTheirPartsAreRefusedByName) {
    expect_refused(
        gemma4_spec("moe"), "gemma4-moe-refusal",
        {{"no expert width", removing_key("gemma4.expert_feed_forward_length"), "expert_feed_forward_length"},
         {"no router scale", dropping_tensor("blk.1.ffn_gate_inp.scale"), "blk.1.ffn_gate_inp.scale"},
         {"no norm after the experts", dropping_tensor("blk.2.post_ffw_norm_2.weight"),
          "blk.2.post_ffw_norm_2.weight"},
         // without the fused tensor the reference reads gate and up apart: they must be there
         {"no gate and up of the experts", dropping_tensor("blk.0.ffn_gate_up_exps.weight"),
          "blk.0.ffn_gate_exps.weight"}});
}

}  // namespace
}  // namespace gemma4_tests
}  // namespace weft
