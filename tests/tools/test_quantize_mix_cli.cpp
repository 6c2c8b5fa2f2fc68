// tests/tools/test_quantize_mix_cli.cpp — `weft quantize` i-quant mixes: which type each tensor gets
// (read from --dry-run's plan), the importance-matrix requirement, and the refusal of types weft
// cannot make yet. Synthetic models (`weft synth`) need no fixtures; the plans of the fixtures'
// mixes are checked against the reference's files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "common/run_weft.h"
#include "weft/gguf/gguf.h"

namespace {

namespace fs = std::filesystem;
using weft::test::run_result;
using weft::test::run_weft;

using plan = std::map<std::string, std::string>;  // tensor name -> type

// The per-tensor lines of weft quantize's stderr: "[ i/ n] NAME [shape] FROM -> TO ...".
plan plan_of(const std::string &err) {
    plan p;
    std::istringstream lines(err);
    for (std::string line; std::getline(lines, line);) {
        if (line.empty() || line[0] != '[') continue;
        const size_t close = line.find("] "), arrow = line.find(" -> ");
        if (close == std::string::npos || arrow == std::string::npos) continue;
        std::istringstream name(line.substr(close + 2)), to(line.substr(arrow + 4));
        std::string n, t;
        name >> n;
        to >> t;
        p[n] = t;
    }
    return p;
}

plan types_of(const std::string &path) {
    plan p;
    const auto file = weft::gguf_file::open(path);
    for (const auto &t : file->tensors()) p[t.name] = weft::type_name(t.type);
    return p;
}

// Each listed tensor has the listed type in plan p.
void expect_types(const plan &p, const plan &expected) {
    for (const auto &[name, type] : expected) {
        const auto it = p.find(name);
        EXPECT_TRUE(it != p.end() && it->second == type)
            << name << " is " << (it == p.end() ? "missing" : it->second) << ", expected " << type;
    }
}

class QuantizeMix : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("weft-mix-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string &name) const { return (dir_ / name).string(); }

    // A random-weight llama from `weft synth` (f32).
    std::string synth(const std::string &name, const std::vector<std::string> &shape) {
        std::vector<std::string> args = {"synth", path(name), "--vocab", "512"};
        args.insert(args.end(), shape.begin(), shape.end());
        const run_result r = run_weft(args);
        EXPECT_EQ(r.status, 0) << r.err;
        return path(name);
    }

    // The plan of a dry run (which must succeed and write nothing).
    plan dry_run(const std::string &model, const std::string &type,
                 const std::vector<std::string> &more = {}) {
        std::vector<std::string> args = {"quantize", model, path("never.gguf"), type, "--dry-run"};
        args.insert(args.end(), more.begin(), more.end());
        const run_result r = run_weft(args);
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_FALSE(fs::exists(path("never.gguf")));
        return plan_of(r.err);
    }

    fs::path dir_;
};

// 8 layers, n_head / n_head_kv = 4: the first 1/8 of the layers is layer 0, attn_v takes q4_K.
TEST_F(QuantizeMix, LowBitMixesOfAGroupedQueryModel) {
    const std::string m = synth(
        "gqa4.gguf", {"--layers", "8", "--embd", "256", "--heads", "8", "--kv-heads", "2", "--ff", "512"});
    const plan p = dry_run(m, "IQ2_XXS");
    ASSERT_EQ(p.size(), 3u + 9u * 8u);
    expect_types(p, {{"output.weight", "q5_K"},
                     {"token_embd.weight", "q2_K"},
                     {"output_norm.weight", "f32"},
                     {"blk.0.attn_v.weight", "q4_K"},
                     {"blk.5.attn_v.weight", "q4_K"},
                     {"blk.0.ffn_down.weight", "q2_K"},
                     {"blk.1.ffn_down.weight", "iq2_xxs"},
                     {"blk.3.attn_q.weight", "iq2_xxs"},
                     {"blk.3.attn_output.weight", "iq2_xxs"},
                     {"blk.7.ffn_gate.weight", "iq2_xxs"}});

    expect_types(dry_run(m, "IQ2_XS"),
                 {{"blk.0.ffn_down.weight", "q2_K"}, {"blk.2.ffn_up.weight", "iq2_xs"}});

    // big tensors iq2_xs, as the reference's IQ2_S
    expect_types(dry_run(m, "IQ2_S"), {{"token_embd.weight", "iq3_s"},
                                       {"blk.0.attn_v.weight", "q4_K"},
                                       {"blk.0.ffn_down.weight", "iq3_s"},
                                       {"blk.1.ffn_down.weight", "iq2_xs"},
                                       {"blk.1.attn_output.weight", "iq3_s"},
                                       {"blk.1.attn_k.weight", "iq2_xs"}});

    expect_types(
        dry_run(m, "IQ2_M"),
        {{"blk.1.ffn_down.weight", "iq2_s"}, {"blk.4.ffn_gate.weight", "iq2_s"}, {"output.weight", "q5_K"}});

    for (const std::string type : {"IQ1_S", "IQ1_M"}) {
        SCOPED_TRACE(type);
        const std::string base = type == "IQ1_S" ? "iq1_s" : "iq1_m";
        expect_types(dry_run(m, type), {{"blk.2.attn_output.weight", "iq2_xxs"},
                                        {"blk.0.ffn_down.weight", "q2_K"},
                                        {"blk.2.ffn_down.weight", base},
                                        {"blk.2.attn_q.weight", base},
                                        {"token_embd.weight", "q2_K"}});
    }
}

TEST_F(QuantizeMix, ThreeBitMixesOfAGroupedQueryModel) {
    const std::string m = synth(
        "gqa4.gguf", {"--layers", "8", "--embd", "256", "--heads", "8", "--kv-heads", "2", "--ff", "512"});
    // iq3_xxs in the middle layers' gate and up, and in q and k
    expect_types(dry_run(m, "IQ3_XS"), {{"blk.0.attn_q.weight", "iq3_xxs"},
                                        {"blk.0.attn_k.weight", "iq3_xxs"},
                                        {"blk.0.attn_v.weight", "q4_K"},
                                        {"blk.0.ffn_gate.weight", "iq3_s"},
                                        {"blk.1.ffn_gate.weight", "iq3_xxs"},
                                        {"blk.6.ffn_up.weight", "iq3_xxs"},
                                        {"blk.7.ffn_up.weight", "iq3_s"},
                                        {"blk.3.ffn_down.weight", "iq3_s"},
                                        {"output.weight", "q6_K"},
                                        {"token_embd.weight", "iq3_s"}});

    expect_types(dry_run(m, "IQ3_S"), {{"blk.0.attn_v.weight", "q4_K"},
                                       {"blk.0.attn_q.weight", "iq3_s"},
                                       {"blk.0.ffn_down.weight", "iq3_s"}});

    expect_types(dry_run(m, "IQ3_M"), {{"blk.3.attn_v.weight", "q4_K"},
                                       {"blk.3.attn_output.weight", "q4_K"},
                                       {"blk.0.ffn_down.weight", "q4_K"},
                                       {"blk.1.ffn_down.weight", "iq3_s"},
                                       {"output.weight", "q6_K"}});

    // IQ3_XXS without an importance matrix: the reference's safer choices (q4_K / q3_K ffn_down)
    expect_types(dry_run(m, "IQ3_XXS"), {{"blk.0.attn_v.weight", "q4_K"},
                                         {"blk.0.ffn_down.weight", "q4_K"},
                                         {"blk.1.ffn_down.weight", "q3_K"},
                                         {"blk.1.ffn_gate.weight", "iq3_xxs"},
                                         {"blk.1.attn_q.weight", "iq2_s"},
                                         {"blk.1.attn_output.weight", "iq3_s"},
                                         {"output.weight", "q5_K"}});
}

// n_head / n_head_kv = 2: attn_v keeps the low-bit rule of each mix.
TEST_F(QuantizeMix, AttnVWithoutGroupedQueries) {
    const std::string m = synth(
        "gqa2.gguf", {"--layers", "2", "--embd", "256", "--heads", "8", "--kv-heads", "4", "--ff", "256"});
    EXPECT_EQ(dry_run(m, "IQ2_XS")["blk.1.attn_v.weight"], "q2_K");
    EXPECT_EQ(dry_run(m, "IQ2_M")["blk.1.attn_v.weight"], "iq3_s");
    EXPECT_EQ(dry_run(m, "IQ3_S")["blk.1.attn_v.weight"], "iq3_s");
    EXPECT_EQ(dry_run(m, "IQ3_XXS")["blk.1.attn_v.weight"], "iq3_s");  // no importance matrix
    EXPECT_EQ(dry_run(m, "IQ3_M")["blk.1.attn_v.weight"], "q4_K");
}

// Rules that depend on whether an importance matrix is given (one of weft's own, made on a text).
TEST_F(QuantizeMix, ImportanceMatrixChangesTheRules) {
    const std::string m = synth(
        "gqa2x8.gguf", {"--layers", "8", "--embd", "256", "--heads", "8", "--kv-heads", "4", "--ff", "256"});
    const std::string imatrix = path("m.imatrix");
    const run_result r = run_weft({"imatrix", "-m", m, "-f", WEFT_SOURCE_DIR "/tests/data/simple-stories.txt",
                                   "-c", "64", "--chunks", "1", "-o", imatrix});
    ASSERT_EQ(r.status, 0) << r.err;
    const std::vector<std::string> with = {"--imatrix", imatrix};
    expect_types(dry_run(m, "IQ3_XXS", with),
                 {{"blk.0.attn_v.weight", "iq3_xxs"}, {"blk.0.ffn_down.weight", "iq3_xxs"}});
    expect_types(dry_run(m, "IQ3_XXS"),
                 {{"blk.0.attn_v.weight", "iq3_s"}, {"blk.0.ffn_down.weight", "q4_K"}});
    // the first 1/8 of the ffn_down layers: q5_K for IQ4_* without, q4_1 / q5_1 for Q4_0 / Q5_0 with
    EXPECT_EQ(dry_run(m, "IQ4_XS")["blk.0.ffn_down.weight"], "q5_K");
    EXPECT_EQ(dry_run(m, "IQ4_XS", with)["blk.0.ffn_down.weight"], "iq4_xs");
    EXPECT_EQ(dry_run(m, "Q4_0")["blk.0.ffn_down.weight"], "q4_0");
    EXPECT_EQ(dry_run(m, "Q4_0", with)["blk.0.ffn_down.weight"], "q4_1");
    EXPECT_EQ(dry_run(m, "Q5_0", with)["blk.0.ffn_down.weight"], "q5_1");
    EXPECT_EQ(dry_run(m, "Q5_0", with)["blk.1.ffn_down.weight"], "q5_0");
}

// 8 experts: attn_v takes q4_K in the 1- and 2-bit mixes (>= 4 experts), q8_0 elsewhere; attn_k and
// attn_output more bits too; the router (ffn_gate_inp) is never quantized.
TEST_F(QuantizeMix, EightExpertModels) {
    const std::string m = synth("moe.gguf", {"--layers", "2", "--embd", "256", "--heads", "8", "--kv-heads",
                                             "4", "--ff", "256", "--experts", "8"});
    expect_types(dry_run(m, "IQ2_XXS"), {{"blk.0.attn_v.weight", "q4_K"},
                                         {"blk.0.attn_k.weight", "q4_K"},
                                         {"blk.0.attn_output.weight", "q5_K"},
                                         {"blk.0.ffn_down_exps.weight", "iq2_xxs"},
                                         {"blk.0.ffn_gate_inp.weight", "f32"}});
    expect_types(dry_run(m, "IQ3_S"), {{"blk.1.attn_v.weight", "q8_0"},
                                       {"blk.1.attn_k.weight", "q8_0"},
                                       {"blk.1.attn_output.weight", "q5_K"},
                                       {"blk.1.ffn_gate_inp.weight", "f32"}});
    expect_types(dry_run(m, "Q4_K_M"), {{"blk.1.attn_v.weight", "q8_0"},
                                        {"blk.1.attn_output.weight", "q5_K"},
                                        {"blk.1.ffn_gate_inp.weight", "f32"}});
}

// Rows that are not a multiple of 256: the grid i-quants fall back to iq4_nl (f16 when not even a
// multiple of 32), the output to q8_0.
TEST_F(QuantizeMix, RowsThatDoNotFitFallBack) {
    const std::string m = synth(
        "odd.gguf", {"--layers", "1", "--embd", "160", "--heads", "5", "--kv-heads", "5", "--ff", "100"});
    for (const std::string type : {"IQ2_XXS", "IQ2_M", "IQ3_XS", "IQ1_S"}) {
        SCOPED_TRACE(type);
        const plan p = dry_run(m, type);
        EXPECT_EQ(p.at("blk.0.attn_q.weight"), "iq4_nl");
        EXPECT_EQ(p.at("blk.0.ffn_gate.weight"), "iq4_nl");
        EXPECT_EQ(p.at("blk.0.ffn_down.weight"), "f16");  // rows of 100
        EXPECT_EQ(p.at("output.weight"), "q8_0");
    }
    EXPECT_EQ(dry_run(m, "IQ2_XXS").at("token_embd.weight"), "q4_0");  // q2_K -> q4_0
    EXPECT_EQ(dry_run(m, "IQ2_M").at("token_embd.weight"), "iq4_nl");  // iq3_s -> iq4_nl
}

// The lowest-bit types need an importance matrix: without one the run fails before writing, naming
// the tensor and the type; a dry run only warns.
TEST_F(QuantizeMix, LowBitTypesNeedAnImportanceMatrix) {
    const std::string m = synth(
        "small.gguf", {"--layers", "1", "--embd", "256", "--heads", "4", "--kv-heads", "4", "--ff", "256"});
    // (IQ2_M --pure: every tensor iq2_s, which weft makes; the mixes IQ2_S and IQ2_M also need iq3_s)
    for (const std::vector<std::string> &type :
         {std::vector<std::string>{"IQ2_XXS"}, {"IQ2_XS"}, {"IQ2_M", "--pure"}}) {
        SCOPED_TRACE(type[0]);
        const std::string out = path("out.gguf");
        std::vector<std::string> args = {"quantize", m, out};
        args.insert(args.end(), type.begin(), type.end());
        run_result r = run_weft(args);
        EXPECT_EQ(r.status, 1);
        EXPECT_NE(r.err.find("needs an importance matrix"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("--imatrix"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("blk.0."), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(out));
        args.push_back("--dry-run");
        r = run_weft(args);
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_NE(r.err.find("warning"), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(out));
    }
    // --pure puts iq2_xxs on token_embd and output too, which no rule exempts from the quantizer's
    // own need
    const run_result r = run_weft({"quantize", m, path("out.gguf"), "IQ2_XXS", "--pure"});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("importance"), std::string::npos) << r.err;
}

// The fixtures' i-quant files: each tensor's type in weft's plan is the type in the reference's file.
TEST_F(QuantizeMix, PlansMatchTheReferenceFiles) {
    WEFT_REQUIRE_FIXTURES();
    const std::string f32 = weft::test::fixture("models/tiny-llama-F32.gguf");
    const std::string imatrix = weft::test::fixture("models/tiny-llama.imatrix");
    for (const std::string type :
         {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS"}) {
        SCOPED_TRACE(type);
        EXPECT_EQ(dry_run(f32, type, {"--imatrix", imatrix}),
                  types_of(weft::test::fixture("models/tiny-llama-" + type + ".gguf")));
    }
}

// A mix that needs a type weft has no quantizer for is refused by name before anything is written.
// (IQ1_S: iq1_s; once its quantizer exists, the file is made instead.)
TEST_F(QuantizeMix, TypesWithoutAQuantizerAreRefusedByName) {
    WEFT_REQUIRE_FIXTURES();
    const std::string out = path("iq1.gguf");
    const run_result r = run_weft({"quantize", weft::test::fixture("models/tiny-llama-F32.gguf"), out,
                                   "IQ1_S", "--imatrix", weft::test::fixture("models/tiny-llama.imatrix")});
    if (r.status == 0) {
        EXPECT_EQ(types_of(out), types_of(weft::test::fixture("models/tiny-llama-IQ1_S.gguf")));
        return;
    }
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("IQ1_S: tensor '"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("would become iq1_s"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("not implemented"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
}

// The reference's Q8_0 files of the MoE and BERT models keep routers and position / token-type
// embeddings f32: weft's Q8_0 gives the same files, byte for byte.
TEST_F(QuantizeMix, RoutersAndPositionEmbeddingsStayF32) {
    WEFT_REQUIRE_FIXTURES();
    for (const std::string name : {"tiny-llama-moe", "tiny-qwen2moe", "tiny-deepseek2", "tiny-bert"}) {
        SCOPED_TRACE(name);
        const std::string out = path(name + ".gguf");
        const run_result r = run_weft(
            {"quantize", weft::test::fixture("models/" + name + "-F32.gguf"), out, "Q8_0", "-t", "2"});
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_EQ(weft::test::read_text_file(out),
                  weft::test::read_text_file(weft::test::fixture("models/" + name + "-Q8_0.gguf")));
    }
}

}  // namespace

// MXFP4_MOE (gpt-oss's mix): the expert stacks mxfp4, every other converted weight q8_0 (token_embd
// and output too), routers and norms f32, as the established tool; the file says so and `weft
// inspect` names the type.
TEST_F(QuantizeMix, Mxfp4MoeGivesTheExpertsMxfp4AndTheRestQ8_0) {
    const std::string m = synth("moe4.gguf", {"--layers", "2", "--embd", "128", "--heads", "4", "--kv-heads",
                                              "2", "--ff", "64", "--experts", "4", "--experts-used", "2"});
    const std::string out = path("moe4-mxfp4.gguf");
    const run_result q = run_weft({"quantize", m, out, "mxfp4_moe"});
    ASSERT_EQ(q.status, 0) << q.err;
    const plan p = types_of(out);
    for (const auto &[name, type] : p) {
        SCOPED_TRACE(name);
        if (name.find("_exps.weight") != std::string::npos)
            EXPECT_EQ(type, "mxfp4");
        else if (name.find("_norm") != std::string::npos || name.find("ffn_gate_inp") != std::string::npos)
            EXPECT_EQ(type, "f32");
        else
            EXPECT_EQ(type, "q8_0");
    }
    expect_types(p, {{"blk.1.ffn_up_exps.weight", "mxfp4"},
                     {"blk.0.ffn_down_exps.weight", "mxfp4"},
                     {"token_embd.weight", "q8_0"},
                     {"blk.0.attn_v.weight", "q8_0"}});
    EXPECT_EQ(weft::gguf_file::open(out)->get_int("general.file_type"), 38);
    const run_result inspect = run_weft({"inspect", out});
    ASSERT_EQ(inspect.status, 0) << inspect.err;
    EXPECT_NE(inspect.out.find("mxfp4"), std::string::npos) << inspect.out;
    EXPECT_NE(inspect.out.find("MXFP4_MOE"), std::string::npos) << inspect.out;
}
