// tests/runtime/test_gemma4.cpp — what Gemma 4 adds to the memory and the loader, beyond the logits
// test_family_reference.cpp compares with the reference engine: its shared KV layers keep no KV
// rows (the cache holds the other layers' only), and read their source layers' rows in every
// batch split and after a saved state is loaded; the files weft cannot run are refused by name.
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
// the rows of layers 1 (3 and 4) and 2 (5).
synth_spec gemma4_spec(dtype type = dtype::f32) {
    for (const test::family_case &f : test::families())
        if (std::string(f.arch) == "gemma4") return f.spec(type);
    ADD_FAILURE() << "gemma4 is not in family_table.h";
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

TEST(Gemma4, FilesWeftCannotRunAreRefusedByName) {
    synth_file f("gemma4-refusals", gemma4_spec());
    struct edit_case {
        const char *what;
        test::gguf_edits edits;
        const char *message;  // a part of the error
    };
    std::vector<edit_case> cases;
    {
        // 4 shared layers: the global layers 2 and 5 would read the rows of layer 1, a window layer
        test::gguf_edits e;
        e.set_ints["gemma4.attention.shared_kv_layers"] = 4;
        cases.push_back({"shared layers of another kind", e, "shared_kv_layers"});
    }
    {
        test::gguf_edits e;
        e.remove_keys.push_back("gemma4.attention.key_length_swa");
        cases.push_back({"no window head size", e, "key_length_swa"});
    }
    {
        test::gguf_edits e;
        e.remove_keys.push_back("gemma4.attention.sliding_window_pattern");
        cases.push_back({"no window layers", e, "sliding_window_pattern"});
    }
    {
        test::gguf_edits e;
        e.drop_tensor = "rope_freqs.weight";
        cases.push_back({"no frequency factors", e, "rope_freqs"});
    }
    for (const edit_case &c : cases) {
        SCOPED_TRACE(c.what);
        test::temp_file edited(std::string("gemma4-refusal-") + c.message);
        test::copy_gguf(f.path(), edited.path(), c.edits);
        EXPECT_NE(load_error(edited.path()).find(c.message), std::string::npos) << load_error(edited.path());
    }
}

}  // namespace
}  // namespace gemma4_tests
}  // namespace weft
