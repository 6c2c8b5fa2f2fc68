// tests/gguf/test_tools_gguf.cpp — `weft inspect` and `weft quantize` end to end on the fixtures.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "common/fixtures.h"
#include "common/run_weft.h"
#include "gguf_test_util.h"
#include "weft/gguf/gguf.h"

namespace weft {
namespace {

using test::run_result;
using test::run_weft;

#define WEFT_REQUIRE_BINARY()                                                     \
    do {                                                                          \
        if (!std::filesystem::exists(WEFT_BINARY))                                \
            GTEST_SKIP() << "the weft executable is not built at " << WEFT_BINARY \
                         << " (cmake --build <dir> --target weft)";               \
    } while (0)

std::string model(const std::string &name) {
    return test::fixture("models/" + name);
}

nlohmann::json inspect_json(const std::string &path) {
    const auto r = run_weft({"inspect", path, "--json"});
    EXPECT_EQ(r.status, 0) << r.err;
    return nlohmann::json::parse(r.out);
}

TEST(weft_inspect, text_view_shows_header_metadata_tensors_and_totals) {
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    const auto r = run_weft({"inspect", model("tiny-llama-Q4_K.gguf")});
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char *expected : {"version:    3", "alignment:  32", "file type:  MOSTLY_Q4_K_M (15)",
                                 "general.architecture", "\"llama\"", "tokenizer.ggml.tokens", "string[512]",
                                 "(512 elements)", "tensors (39)", "blk.3.ffn_down.weight", "[768, 256]",
                                 "q6_K", "parameters:      3410176", "bits per weight: 4.8753"})
        EXPECT_NE(r.out.find(expected), std::string::npos) << "missing \"" << expected << "\" in\n" << r.out;
}

TEST(weft_inspect, json_view_is_one_object_with_consistent_totals) {
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    const std::string path = model("stories260K.gguf");
    const auto j = inspect_json(path);
    const auto f = gguf_file::open(path);
    EXPECT_EQ(j["version"], 3);
    EXPECT_EQ(j["alignment"], 32);
    EXPECT_EQ(j["tensors"].size(), f->tensors().size());
    uint64_t params = 0, bytes = 0;
    for (const auto &t : f->tensors()) {
        params += uint64_t(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]);
        bytes += t.nbytes;
    }
    EXPECT_EQ(j["totals"]["parameters"], params);
    EXPECT_EQ(j["totals"]["bytes"], bytes);
    EXPECT_DOUBLE_EQ(j["totals"]["bits_per_weight"].get<double>(), 32.0);  // all f32
    EXPECT_EQ(j["metadata"]["general.architecture"], "llama");
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["count"], 512);
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["array_of"], "string");
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["head"].size(), 8u);
    EXPECT_EQ(j["tensors"][0]["name"], f->tensors()[0].name);
}

TEST(weft_inspect, every_fixture_is_inspected) {
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    test::temp_dir dir;
    size_t n = 0;
    for (const char *sub : {"models", "vocab"}) {
        for (const auto &e : std::filesystem::directory_iterator(test::fixtures_dir() / sub)) {
            if (e.path().extension() != ".gguf") continue;
            if (test::fixture_has_unimplemented_types(e.path())) {
                const auto r = run_weft({"inspect", e.path().string()});
                EXPECT_NE(r.status, 0) << e.path();
                EXPECT_NE(r.err.find("unknown type id"), std::string::npos) << r.err;
                continue;
            }
            const auto j = inspect_json(e.path().string());
            EXPECT_TRUE(j.contains("metadata")) << e.path();
            ++n;
        }
    }
    EXPECT_GE(n, 20u);
}

TEST(weft_inspect, a_broken_file_fails_with_its_message) {
    WEFT_REQUIRE_BINARY();
    test::temp_dir dir;
    const std::string path = dir.file("broken.gguf");
    test::write_file_bytes(path, test::raw_gguf().header(0, 0, 3, "GGML").data);
    const auto r = run_weft({"inspect", path});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find(path + ": bad magic"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    const auto missing = run_weft({"inspect", dir.file("missing.gguf"), "--json"});
    EXPECT_NE(missing.status, 0);
    // refused by the file-argument check before anything opens it
    EXPECT_NE(missing.err.find("missing.gguf: cannot read: No such file"), std::string::npos) << missing.err;
}

// The reference implementation's quantizer made the tiny-llama-<TYPE> fixtures from tiny-llama-F32:
// the same recipe must give the same file, byte for byte (tensor types of the mix, order, bits).
class weft_quantize_reference : public ::testing::TestWithParam<const char *> {};

TEST_P(weft_quantize_reference, reproduces_the_reference_file) {
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    test::temp_dir dir;
    const std::string type = GetParam();
    const std::string out = dir.file("out.gguf");
    const auto r = run_weft({"quantize", model("tiny-llama-F32.gguf"), out, type, "--threads", "2"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("[  39/  39]"), std::string::npos) << "one progress line per tensor:\n" << r.err;
    const auto reference = gguf_file::open(model("tiny-llama-" + type + ".gguf"));
    const auto ours = gguf_file::open(out);
    EXPECT_EQ(ours->get_int("general.file_type"), reference->get_int("general.file_type"));
    ASSERT_EQ(ours->tensors().size(), reference->tensors().size());
    for (size_t i = 0; i < ours->tensors().size(); ++i) {
        const auto &a = ours->tensors()[i];
        const auto &b = reference->tensors()[i];
        EXPECT_EQ(a.name, b.name);
        EXPECT_EQ(type_name(a.type), std::string(type_name(b.type))) << a.name;
        if (a.nbytes == b.nbytes) {
            EXPECT_EQ(std::memcmp(ours->tensor_data(a), reference->tensor_data(b), a.nbytes), 0) << a.name;
        }
    }
    EXPECT_EQ(test::read_file_bytes(out), test::read_file_bytes(model("tiny-llama-" + type + ".gguf")));
}

INSTANTIATE_TEST_SUITE_P(types, weft_quantize_reference,
                         ::testing::Values("F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K",
                                           "Q4_K", "Q5_K", "Q6_K"));

TEST(weft_quantize, qwen2_q8_0_reproduces_the_reference_file) {
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    test::temp_dir dir;
    const auto r = run_weft({"quantize", model("tiny-qwen2-F32.gguf"), dir.file("q.gguf"), "q8_0"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(test::read_file_bytes(dir.file("q.gguf")),
              test::read_file_bytes(model("tiny-qwen2-Q8_0.gguf")));
}

std::map<std::string, std::string> types_of(const std::string &path) {
    std::map<std::string, std::string> m;
    const auto f = gguf_file::open(path);
    for (const auto &t : f->tensors()) m[t.name] = type_name(t.type);
    return m;
}

// weft quantize of tiny-llama-F32 to `type` next to the fixture the reference made: the same file
// type and the same mix (each tensor's type). Returns {ours, the reference's}.
std::pair<std::unique_ptr<gguf_file>, std::unique_ptr<gguf_file>> quantize_as_the_fixture(
    const test::temp_dir &dir, const std::string &type) {
    const std::string out = dir.file(type + ".gguf");
    const auto r = run_weft({"quantize", model("tiny-llama-F32.gguf"), out, type, "--threads", "2"});
    EXPECT_EQ(r.status, 0) << r.err;
    if (r.status != 0) return {};
    auto reference = gguf_file::open(model("tiny-llama-" + type + ".gguf"));
    auto ours = gguf_file::open(out);
    EXPECT_EQ(ours->get_int("general.file_type"), reference->get_int("general.file_type"));
    EXPECT_EQ(types_of(out), types_of(model("tiny-llama-" + type + ".gguf")));
    return {std::move(ours), std::move(reference)};
}

// Whether tensor `name` has the same bytes in both files.
void expect_same_tensor(const gguf_file &ours, const gguf_file &reference, const std::string &name) {
    const auto *a = ours.find_tensor(name);
    const auto *b = reference.find_tensor(name);
    ASSERT_TRUE(a && b) << name;
    ASSERT_EQ(a->nbytes, b->nbytes) << name;
    EXPECT_EQ(std::memcmp(ours.tensor_data(*a), reference.tensor_data(*b), a->nbytes), 0) << name;
}

// The i-quant fixtures were made with an importance matrix, which weft quantize does not take: the
// mix (each tensor's type) and the tensors made without it (token_embd, output) must match; the
// others are the plain quantizer's (tests/quant/test_fixtures.cpp reproduces them with the matrix).
TEST(weft_quantize, iq4_targets_follow_the_reference_mix) {
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    test::temp_dir dir;
    for (const std::string type : {"IQ4_NL", "IQ4_XS"}) {
        SCOPED_TRACE(type);
        const auto [ours, reference] = quantize_as_the_fixture(dir, type);
        ASSERT_TRUE(ours && reference);
        for (const char *name : {"token_embd.weight", "output.weight"})
            expect_same_tensor(*ours, *reference, name);
    }
}

// The ternary quantizers take no importance matrix, so weft quantize reproduces the ternary
// fixtures (made with one) tensor for tensor: the mix and every tensor's bytes.
TEST(weft_quantize, ternary_targets_reproduce_the_reference_files) {
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    test::temp_dir dir;
    for (const std::string type : {"TQ1_0", "TQ2_0"}) {
        SCOPED_TRACE(type);
        const auto [ours, reference] = quantize_as_the_fixture(dir, type);
        ASSERT_TRUE(ours && reference);
        for (const auto &t : reference->tensors()) expect_same_tensor(*ours, *reference, t.name);
    }
}

TEST(weft_quantize, rows_that_do_not_fit_the_block_fall_back) {
    // stories260K: rows of 64 (no K-quant block fits) and ffn_down rows of 172 (no 32-block fits).
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    test::temp_dir dir;
    const std::string out = dir.file("s.gguf");
    ASSERT_EQ(run_weft({"quantize", model("stories260K.gguf"), out, "Q4_K_M"}).status, 0);
    auto t = types_of(out);
    EXPECT_EQ(t["output.weight"], "q8_0");      // the output rule when rows are not a multiple of 256
    EXPECT_EQ(t["token_embd.weight"], "q5_0");  // q4_K -> q5_0
    EXPECT_EQ(t["blk.0.attn_q.weight"], "q5_0");
    EXPECT_EQ(t["blk.0.ffn_down.weight"], "f16");  // 172 % 32 != 0
    EXPECT_EQ(t["blk.0.attn_norm.weight"], "f32");
    EXPECT_EQ(gguf_file::open(out)->get_int("general.file_type"), 15);

    ASSERT_EQ(run_weft({"quantize", model("stories260K.gguf"), out, "Q2_K"}).status, 0);
    t = types_of(out);
    EXPECT_EQ(t["blk.0.attn_q.weight"], "q4_0");  // q2_K -> q4_0
    EXPECT_EQ(t["blk.0.ffn_down.weight"], "f16");

    ASSERT_EQ(run_weft({"quantize", model("stories260K.gguf"), out, "Q6_K"}).status, 0);
    EXPECT_EQ(types_of(out)["blk.0.attn_q.weight"], "q8_0");  // q6_K -> q8_0

    ASSERT_EQ(run_weft({"quantize", model("stories260K.gguf"), out, "IQ4_XS"}).status, 0);
    t = types_of(out);
    EXPECT_EQ(t["blk.0.attn_q.weight"], "iq4_nl");  // iq4_xs -> iq4_nl, as the established tool
    EXPECT_EQ(t["blk.0.ffn_down.weight"], "f16");

    ASSERT_EQ(run_weft({"quantize", model("stories260K.gguf"), out, "TQ2_0"}).status, 0);
    t = types_of(out);
    EXPECT_EQ(t["blk.0.attn_q.weight"], "q4_0");  // tq2_0 -> q4_0, as the established tool
    EXPECT_EQ(t["token_embd.weight"], "q5_0");    // q4_K -> q5_0
}

TEST(weft_quantize, mixes_follow_their_rules) {
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    test::temp_dir dir;
    const std::string out = dir.file("m.gguf");
    // tiny-llama: 4 layers; the more-bits layers of 4 are 2 and 3.
    ASSERT_EQ(run_weft({"quantize", model("tiny-llama-F32.gguf"), out, "Q4_K_S"}).status, 0);
    auto t = types_of(out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(t["blk." + std::to_string(i) + ".attn_v.weight"], "q5_K") << i;
    EXPECT_EQ(t["blk.0.ffn_down.weight"], "q4_K");  // 4 / 8 == 0 layers get q5_K
    EXPECT_EQ(t["output.weight"], "q6_K");
    EXPECT_EQ(gguf_file::open(out)->get_int("general.file_type"), 14);

    ASSERT_EQ(run_weft({"quantize", model("tiny-llama-F32.gguf"), out, "Q3_K_L"}).status, 0);
    t = types_of(out);
    EXPECT_EQ(t["blk.1.attn_v.weight"], "q5_K");
    EXPECT_EQ(t["blk.1.ffn_down.weight"], "q5_K");
    EXPECT_EQ(t["blk.1.attn_output.weight"], "q5_K");
    EXPECT_EQ(t["blk.1.attn_q.weight"], "q3_K");

    ASSERT_EQ(run_weft({"quantize", model("tiny-llama-F32.gguf"), out, "Q5_K_S"}).status, 0);
    t = types_of(out);
    std::set<std::string> kinds;
    for (const auto &[name, ty] : t) kinds.insert(ty);
    EXPECT_EQ(kinds, (std::set<std::string>{"f32", "q5_K", "q6_K"}));
    EXPECT_EQ(t["output.weight"], "q6_K");

    ASSERT_EQ(run_weft({"quantize", model("tiny-llama-F32.gguf"), out, "Q4_K_M", "--pure"}).status, 0);
    t = types_of(out);
    EXPECT_EQ(t["output.weight"], "q4_K");
    EXPECT_EQ(t["blk.3.ffn_down.weight"], "q4_K");

    ASSERT_EQ(run_weft({"quantize", model("tiny-llama-F32.gguf"), out, "bf16"}).status, 0);
    t = types_of(out);
    EXPECT_EQ(t["output.weight"], "bf16");
    EXPECT_EQ(t["output_norm.weight"], "f32");
    EXPECT_EQ(gguf_file::open(out)->get_int("general.file_type"), 32);
}

TEST(weft_quantize, quantized_input_is_dequantized_first) {
    // F32 -> Q8_0 -> F32 must come back within Q8_0's error; thread counts must not change a bit.
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    test::temp_dir dir;
    const std::string back = dir.file("back.gguf"), back4 = dir.file("back4.gguf");
    ASSERT_EQ(run_weft({"quantize", model("tiny-llama-Q8_0.gguf"), back, "F32", "-t", "1"}).status, 0);
    ASSERT_EQ(run_weft({"quantize", model("tiny-llama-Q8_0.gguf"), back4, "F32", "-t", "4"}).status, 0);
    EXPECT_EQ(test::read_file_bytes(back), test::read_file_bytes(back4));
    const auto orig = gguf_file::open(model("tiny-llama-F32.gguf"));
    const auto f = gguf_file::open(back);
    EXPECT_EQ(f->get_int("general.file_type"), 0);
    for (const auto &t : f->tensors()) {
        ASSERT_EQ(t.type, dtype::f32) << t.name;
        const auto *o = orig->find_tensor(t.name);
        ASSERT_NE(o, nullptr);
        const auto *a = reinterpret_cast<const float *>(f->tensor_data(t));
        const auto *b = reinterpret_cast<const float *>(orig->tensor_data(*o));
        double err = 0, ref = 0;
        for (size_t i = 0; i < t.nbytes / 4; ++i) err += (a[i] - b[i]) * (a[i] - b[i]), ref += b[i] * b[i];
        EXPECT_LT(err, 1e-4 * ref) << t.name;
        EXPECT_GT(ref, 0.0) << t.name;
    }

    // and a quantized input requantized to another type gives a valid file
    ASSERT_EQ(run_weft({"quantize", model("tiny-llama-Q4_K.gguf"), dir.file("q40.gguf"), "Q4_0"}).status, 0);
    EXPECT_EQ(types_of(dir.file("q40.gguf"))["blk.0.attn_q.weight"], "q4_0");
}

TEST(weft_quantize, errors_exit_non_zero_and_leave_no_output) {
    WEFT_REQUIRE_BINARY();
    WEFT_REQUIRE_FIXTURES();
    test::temp_dir dir;
    const std::string out = dir.file("never.gguf");
    auto r = run_weft({"quantize", model("tiny-llama-F32.gguf"), out, "Q7_X"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("unknown type 'Q7_X'"), std::string::npos) << r.err;
    r = run_weft({"quantize", model("tiny-llama-F32.gguf"), out, "iq2_xxs"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(
        r.err.find("IQ2_XXS: tensor 'blk.0.attn_k.weight' would become iq2_xxs, which needs an importance"),
        std::string::npos)
        << r.err;
    r = run_weft({"quantize", dir.file("missing.gguf"), out, "Q4_0"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("missing.gguf"), std::string::npos) << r.err;
    r = run_weft({"quantize", model("tiny-llama-F32.gguf"), dir.file("no-such-dir/x.gguf"), "Q4_0"});
    EXPECT_NE(r.status, 0);
    EXPECT_FALSE(std::filesystem::exists(out));
    size_t leftovers = 0;
    for (const auto &e : std::filesystem::directory_iterator(dir.path()))
        if (e.path().filename().string().find(".tmp.") != std::string::npos) ++leftovers;
    EXPECT_EQ(leftovers, 0u);

    r = run_weft({"quantize", "--help"});
    EXPECT_EQ(r.status, 0);
    for (const char *mix : {"Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S", "Q3_K_M", "Q2_K", "IQ2_XXS", "IQ2_M",
                            "IQ3_XS", "IQ1_M", "more-bits", "falls back", "--dry-run", "importance matrix"})
        EXPECT_NE(r.out.find(mix), std::string::npos) << mix;
}

}  // namespace
}  // namespace weft
