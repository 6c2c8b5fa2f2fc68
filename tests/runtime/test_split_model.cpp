// tests/runtime/test_split_model.cpp — a model split into a set of GGUF parts loads as one model: the
// same logits, bit for bit, as the single file, mapped or read, repacked or in place, as a stage of a
// pipeline or vocabulary only.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/context_test_util.h"
#include "weft/gguf/gguf.h"
#include "weft/gguf/gguf_split.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft {
namespace {

using test::synth_file;

// The parts of `path` split every `max_tensors` tensors, named beside it; removed at scope exit.
struct split_parts_on_disk {
    std::vector<gguf_split_part> parts;
    split_parts_on_disk(const std::string &path, int64_t max_tensors) {
        const auto in = gguf_set::open(path);
        gguf_split_limits limits;
        limits.max_tensors = max_tensors;
        parts = gguf_plan_split(*in, path + ".split", limits);
        gguf_write_split(*in, parts);
    }
    ~split_parts_on_disk() {
        for (const auto &p : parts) std::filesystem::remove(p.path);
    }
    const std::string &first() const { return parts.front().path; }
};

std::vector<std::vector<float>> split_model_logits(const model &m) {
    inference_context ctx(m, test::params_with(64, 512));
    return test::all_logits(ctx, test::some_tokens(7, int32_t(m.hparams().n_vocab)));
}

void expect_split_logits_identical(const std::vector<std::vector<float>> &a,
                                   const std::vector<std::vector<float>> &b, const std::string &what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t r = 0; r < a.size(); ++r) {
        ASSERT_EQ(a[r].size(), b[r].size()) << what;
        EXPECT_EQ(0, std::memcmp(a[r].data(), b[r].data(), a[r].size() * sizeof(float)))
            << what << " row " << r;
    }
}

TEST(SplitModel, LoadsAsOneModelWithTheSameLogitsHoweverLoaded) {
    for (dtype type : {dtype::f32, dtype::q4_0}) {
        synth_spec spec = test::small_spec();
        spec.n_layer = 4;
        spec.type = type;
        synth_file f(std::string("split-model-") + type_name(type), spec);
        split_parts_on_disk set(f.path(), 5);
        ASSERT_GE(set.parts.size(), 5u);

        const auto whole = model::load(f.path());
        const std::vector<std::vector<float>> expected = split_model_logits(*whole);
        const auto split = model::load(set.first());
        EXPECT_EQ(split->files().n_parts(), set.parts.size());
        EXPECT_EQ(split->n_weight_bytes(), whole->n_weight_bytes());
        EXPECT_EQ(split->describe(), whole->describe());
        expect_split_logits_identical(split_model_logits(*split), expected,
                                      std::string("repacked ") + type_name(type));

        model_params in_place;
        in_place.repack = false;
        expect_split_logits_identical(split_model_logits(*model::load(set.first(), in_place)), expected,
                                      std::string("in the mappings ") + type_name(type));
        model_params read;
        read.use_mmap = false;
        expect_split_logits_identical(split_model_logits(*model::load(set.first(), read)), expected,
                                      std::string("read, not mapped ") + type_name(type));
    }
}

TEST(SplitModel, WeightsPointIntoTheirOwnPartsMapping) {
    synth_file f("split-model-zero-copy", test::small_spec());
    split_parts_on_disk set(f.path(), 4);
    model_params in_place;
    in_place.repack = false;
    const auto m = model::load(set.first(), in_place);
    const gguf_set &files = m->files();
    for (const tensor *t : m->stage_tensors()) {
        const gguf_tensor_info *info = files.find_tensor(t->name);
        ASSERT_NE(info, nullptr) << t->name;
        const gguf_file &part = files.part(info->part);
        const auto *p = static_cast<const uint8_t *>(t->data);
        EXPECT_GE(p, part.data_base()) << t->name;
        EXPECT_LE(p + t->nbytes(), part.data_base() + part.data_size()) << t->name;
        EXPECT_EQ(p, files.tensor_data(*info)) << t->name;
    }
}

TEST(SplitModel, StagesAndVocabularyOnlyLoadsSeeTheWholeSet) {
    synth_spec spec = test::small_spec();
    spec.n_layer = 4;
    synth_file f("split-model-stage", spec);
    split_parts_on_disk set(f.path(), 6);

    model_params vocab_only;
    vocab_only.vocab_only = true;
    const auto v = model::load(set.first(), vocab_only);
    EXPECT_EQ(v->vocab().n_tokens(), spec.n_vocab);
    EXPECT_EQ(v->files().tensors().size(), gguf_file::open(f.path())->tensors().size());

    model_params stage;
    stage.layers = {2, -1};
    const auto whole = model::load(f.path(), stage), split = model::load(set.first(), stage);
    const std::vector<const tensor *> a = whole->stage_tensors(), b = split->stage_tensors();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_STREQ(a[i]->name, b[i]->name);
        ASSERT_EQ(a[i]->nbytes(), b[i]->nbytes());
    }
}

TEST(SplitModel, ABrokenSetFailsToLoadNamingThePart) {
    synth_file f("split-model-broken", test::small_spec());
    split_parts_on_disk set(f.path(), 4);
    ASSERT_GE(set.parts.size(), 3u);
    std::filesystem::remove(set.parts[1].path);
    try {
        model::load(set.first());
        FAIL() << "a set with a part missing loaded";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find(set.parts[1].path + ": missing"), std::string::npos) << e.what();
    }
    // the bytes of a first part in memory cannot reach the other parts
    std::ifstream in(set.first(), std::ios::binary);
    const std::string first((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    model_params from_memory;
    from_memory.memory = std::span(reinterpret_cast<const uint8_t *>(first.data()), first.size());
    EXPECT_THROW(model::load(set.first(), from_memory), error);
}

}  // namespace
}  // namespace weft
