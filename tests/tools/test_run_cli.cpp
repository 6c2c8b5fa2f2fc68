// tests/tools/test_run_cli.cpp — `weft synth/run/logits/graph -m` run as a user would.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/fixtures.h"
#include "common/run_weft.h"
#include "model/model_test_util.h"
#include "weft/model/model.h"

namespace {

using weft::test::copy_gguf;
using weft::test::gguf_edits;
using weft::test::temp_file;

using weft::test::run_result;

// Runs `weft ARGS` (shell text), stdin from /dev/null.
run_result weft(const std::string &args) {
    return weft::test::run_weft_shell(args);
}

std::string q(const std::string &s) {
    return "'" + s + "'";
}

// A small synthetic llama written by `weft synth`.
struct synth_model {
    temp_file file{"cli-model"};
    synth_model(const std::string &extra = "") {
        const run_result r =
            weft("synth " + q(file.path()) +
                 " --arch llama --embd 64 --layers 2 --heads 4 --kv-heads 2 --ff 96 --vocab 300 " + extra);
        EXPECT_EQ(r.status, 0) << r.err;
    }
    const std::string &path() const { return file.path(); }
};

TEST(RunCli, GreedyRunStreamsTextAndReportsTimings) {
    synth_model m;
    const run_result r = weft("run -m " + q(m.path()) + " -p 'Hello there' -n 12 --temp 0 -t 1");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(r.out.empty());
    EXPECT_EQ(r.out.find("weft run:"), std::string::npos) << "logs must go to stderr";
    EXPECT_NE(r.err.find("loaded"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("reused"), std::string::npos) << r.err;

    // greedy is deterministic, and ubatch size does not change it
    const run_result again =
        weft("run -m " + q(m.path()) + " -p 'Hello there' -n 12 --temp 0 -t 2 -ub 3 -b 5");
    ASSERT_EQ(again.status, 0) << again.err;
    EXPECT_EQ(again.out, r.out);
}

TEST(RunCli, SeededSamplingIsReproducible) {
    synth_model m;
    const std::string args = "run -m " + q(m.path()) + " -p 'abc' -n 16 --temp 1.0 --top-k 50 --seed 7";
    const run_result a = weft(args), b = weft(args);
    ASSERT_EQ(a.status, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
}

TEST(RunCli, EmptyPromptStartsFromBos) {
    synth_model m;
    const run_result r = weft("run -m " + q(m.path()) + " -p '' -n 4 --temp 0");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("prompt 1 tokens"), std::string::npos) << r.err;
}

TEST(RunCli, PromptLongerThanTheContextIsAnError) {
    synth_model m;
    const run_result r = weft("run -m " + q(m.path()) +
                              " -c 16 -p 'this prompt is certainly longer than sixteen tokens' -n 4");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("the context holds 16"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
}

TEST(RunCli, UnknownArchitectureIsAnError) {
    synth_model m;
    temp_file broken("cli-arch");
    gguf_edits e;
    e.set_strings["general.architecture"] = "rwkv6";
    copy_gguf(m.path(), broken.path(), e);
    const run_result r = weft("run -m " + q(broken.path()) + " -p hi -n 2");
    EXPECT_EQ(r.status, 1);
    std::string list;
    for (const std::string &name : weft::supported_architectures()) list += (list.empty() ? "" : ", ") + name;
    EXPECT_NE(r.err.find("unknown architecture 'rwkv6' (supported: " + list + ")"), std::string::npos)
        << r.err;
}

TEST(RunCli, MissingTensorAndShapeMismatchAreErrors) {
    synth_model m;
    temp_file missing("cli-missing"), shape("cli-shape");
    gguf_edits drop;
    drop.drop_tensor = "blk.0.attn_k.weight";
    copy_gguf(m.path(), missing.path(), drop);
    gguf_edits reshape;
    reshape.reshape_tensor = "blk.1.ffn_down.weight";
    reshape.new_shape = {96, 32};
    copy_gguf(m.path(), shape.path(), reshape);

    const run_result a = weft("run -m " + q(missing.path()) + " -p hi -n 2");
    EXPECT_EQ(a.status, 1);
    EXPECT_NE(a.err.find("missing tensor 'blk.0.attn_k.weight'"), std::string::npos) << a.err;
    const run_result b = weft("run -m " + q(shape.path()) + " -p hi -n 2");
    EXPECT_EQ(b.status, 1);
    EXPECT_NE(b.err.find("'blk.1.ffn_down.weight' has shape [96, 32], expected [96, 64]"), std::string::npos)
        << b.err;
}

TEST(RunCli, VocabularyOnlyFileCannotRun) {
    synth_model m;
    temp_file vocab_only("cli-vocab-only");
    gguf_edits e;
    e.drop_all_tensors = true;
    copy_gguf(m.path(), vocab_only.path(), e);
    const run_result r = weft("run -m " + q(vocab_only.path()) + " -p hi -n 2");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("holds no tensors (a vocabulary-only file?)"), std::string::npos) << r.err;
}

TEST(RunCli, RealVocabularyOnlyFixtureCannotRun) {
    WEFT_REQUIRE_FIXTURES();
    const run_result r =
        weft("run -m " + q(weft::test::fixture("vocab/ggml-vocab-llama-spm.gguf")) + " -p hi -n 2");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("vocabulary-only"), std::string::npos) << r.err;
}

// Without -m, run uses the model built into the executable (stories260K): a fresh build generates
// real text at once.
TEST(RunCli, BuiltInModelWithoutDashM) {
    const run_result r = weft("run -p 'Once upon a time' -n 12 --temp 0");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.rfind(", there was a little girl named Lily", 0), 0u) << r.out;
    EXPECT_NE(r.err.find("stories260K.gguf (built in)"), std::string::npos) << r.err;
}

// Each sampler on the built-in model: the chain the log names, and the same text twice with a seed.
TEST(RunCli, EverySamplerRunsAndRepeatsWithASeed) {
    const struct {
        const char *flags, *chain;
    } cases[] = {
        {"--dry-multiplier 0.8 --dry-base 2 --dry-allowed-length 3 --dry-penalty-last-n 64",
         "sampler: penalties -> dry -> top-k -> typical -> top-p -> min-p -> temp -> dist\n"},
        {"--dry-multiplier 0.8 --dry-sequence-breaker none", "penalties -> dry -> top-k"},
        {"--dry-multiplier 0.8 --dry-sequence-breaker . --dry-sequence-breaker ' the'",
         "penalties -> dry -> top-k"},
        {"--xtc-probability 0.5 --xtc-threshold 0.1", "min-p -> xtc -> temp -> dist\n"},
        {"--top-n-sigma 1", "sampler: penalties -> top-n-sigma -> top-k"},
        {"--dynatemp-range 0.5 --dynatemp-exp 2", "min-p -> temp-ext -> dist\n"},
        {"--mirostat 1", "sampler: temp -> mirostat\n"},
        {"--mirostat 2 --mirostat-ent 3 --mirostat-lr 0.2", "sampler: temp -> mirostat-v2\n"},
        {"--samplers 'dry;top-k;temp' --dry-multiplier 1", "sampler: dry -> top-k -> temp -> dist\n"},
        {"--samplers 'typical-p;nucleus;top_n_sigma' --top-n-sigma 2",
         "sampler: typical -> top-p -> top-n-sigma -> dist\n"},
        {"--sampling-seq kxt --xtc-probability 1", "sampler: top-k -> xtc -> temp -> dist\n"},
        {"--temp 0 --dry-multiplier 2", "sampler: penalties -> dry -> greedy\n"},
    };
    for (const auto &c : cases) {
        SCOPED_TRACE(c.flags);
        const std::string args = std::string("run -p 'Once upon a time' -n 12 -s 5 -t 1 ") + c.flags;
        const run_result a = weft(args), b = weft(args);
        ASSERT_EQ(a.status, 0) << a.err;
        EXPECT_NE(a.err.find(c.chain), std::string::npos) << a.err;
        EXPECT_FALSE(a.out.empty());
        EXPECT_EQ(a.out, b.out);
    }
}

// DRY keeps greedy decoding from repeating itself: plain greedy on the built-in model says "didn't
// know what to do" twice in 160 tokens; with DRY the second one is steered away.
TEST(RunCli, DryAvoidsTheRepeatedSentence) {
    const auto count = [](const std::string &text, const std::string &what) {
        size_t n = 0;
        for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
        return n;
    };
    const std::string args = "run -p 'Once upon a time' -n 160 --temp 0 -t 1";
    const run_result plain = weft(args);
    ASSERT_EQ(plain.status, 0) << plain.err;
    EXPECT_EQ(count(plain.out, "didn't know what to do"), 2u) << plain.out;
    const run_result dry = weft(args + " --dry-multiplier 3");
    ASSERT_EQ(dry.status, 0) << dry.err;
    EXPECT_LE(count(dry.out, "didn't know what to do"), 1u) << dry.out;
    EXPECT_NE(dry.out, plain.out);
}

TEST(RunCli, BadSamplerOptionsAreRejected) {
    const struct {
        const char *flags, *message;
    } cases[] = {
        {"--samplers 'top_k;warmth'",
         "sampler 'warmth' is unknown; the samplers are penalties, dry, top_n_sigma"},
        {"--samplers infill", "'infill' is not supported"},
        {"--sampling-seq kq", "letter 'q' in 'kq' is unknown"},
        {"--samplers top_k --sampling-seq k", "give one"},
        {"--mirostat 3", "mirostat is 3"},
        {"--dry-base 0.5", "dry_base"},
        {"--dry-penalty-last-n -2", "dry_penalty_last_n"},
        {"--xtc-probability 2", "xtc_probability"},
        {"--dynatemp-range -1", "dynatemp_range"},
    };
    for (const auto &c : cases) {
        SCOPED_TRACE(c.flags);
        const run_result r = weft(std::string("run -p hi -n 2 ") + c.flags);
        EXPECT_EQ(r.status, 1);
        EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
        EXPECT_TRUE(r.out.empty());
    }
    EXPECT_NE(weft("run -p hi -n 2 --top-n-sigma many").status, 0);
}

// A full context drops the oldest half of the tokens after --keep and generation goes on;
// --no-context-shift stops there as before.
TEST(RunCli, ContextShiftGoesOnPastTheContext) {
    synth_model m;
    const std::string base =
        "run -m " + q(m.path()) + " -p 'Hello there' -n 150 -c 48 --temp 0 -t 1 --keep 2";
    const run_result r = weft(base);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("generated 150 tokens"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("context shifted"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("kept the first 3"), std::string::npos) << r.err;  // the BOS and --keep 2

    const run_result off = weft(base + " --no-context-shift");
    ASSERT_EQ(off.status, 0) << off.err;
    EXPECT_NE(off.err.find("context full (48 tokens)"), std::string::npos) << off.err;
    EXPECT_EQ(off.err.find("context shifted"), std::string::npos) << off.err;
    EXPECT_EQ(r.out.substr(0, off.out.size() - 1), off.out.substr(0, off.out.size() - 1))
        << "the same text up to the full context";
}

// --prompt-cache: the first run decodes the prompt and saves its cache; the second loads it and
// decodes only the last prompt token again; the text is the same. Another model's file is refused.
TEST(RunCli, PromptCacheSkipsThePrefillTheSecondTime) {
    synth_model m;
    temp_file cache("cli-prompt-cache");
    std::filesystem::remove(cache.path());
    const std::string prompt = "A long prompt about many things that happened on a sunny day in the park";
    const std::string args =
        "run -m " + q(m.path()) + " -p '" + prompt + "' -n 8 --temp 0 -t 1 --prompt-cache " + q(cache.path());
    const run_result first = weft(args);
    ASSERT_EQ(first.status, 0) << first.err;
    EXPECT_NE(first.err.find("(0 reused from the cache)"), std::string::npos) << first.err;
    EXPECT_NE(first.err.find("prompt cache " + cache.path() + ": saved"), std::string::npos) << first.err;
    ASSERT_TRUE(std::filesystem::exists(cache.path()));

    const run_result second = weft(args);
    ASSERT_EQ(second.status, 0) << second.err;
    EXPECT_EQ(second.out, first.out);
    EXPECT_NE(second.err.find("prompt cache " + cache.path() + ": loaded"), std::string::npos) << second.err;
    // "prompt N tokens (N - 1 reused ...)"
    const size_t reused_at = second.err.find("reused from the cache");
    ASSERT_NE(reused_at, std::string::npos) << second.err;
    const size_t at = second.err.rfind("weft run: prompt ", reused_at);
    int n_prompt = 0, n_reused = -1;
    ASSERT_EQ(
        std::sscanf(second.err.c_str() + at, "weft run: prompt %d tokens (%d reused", &n_prompt, &n_reused),
        2);
    EXPECT_GT(n_prompt, 10);
    EXPECT_EQ(n_reused, n_prompt - 1);
    EXPECT_EQ(second.err.find(": saved"), std::string::npos) << second.err;

    synth_model other("--seed 5");
    const run_result wrong =
        weft("run -m " + q(other.path()) + " -p hi -n 2 --prompt-cache " + q(cache.path()));
    EXPECT_EQ(wrong.status, 1);
    EXPECT_NE(wrong.err.find("saved with another model"), std::string::npos) << wrong.err;
}

TEST(RunCli, BadFlagsAreRejected) {
    synth_model m;
    EXPECT_NE(weft("run -p hi --top-p nope").status, 0);
    EXPECT_NE(weft("run -m " + q(m.path()) + " --kv-type q4_0").status, 0);
    EXPECT_NE(weft("run -m /nonexistent/model.gguf").status, 0);
    EXPECT_NE(weft("synth /tmp/never-written.gguf --heads 5 --kv-heads 2").status, 0);
    EXPECT_FALSE(std::filesystem::exists("/tmp/never-written.gguf"));
    EXPECT_NE(weft("synth /tmp/never-written.gguf --type q4_K --embd 64").status,
              0);  // 64 is not a multiple of 256
}

TEST(SynthCli, QuantizedModelsRun) {
    for (const char *type : {"f16", "q8_0", "q4_0"}) {
        SCOPED_TRACE(type);
        synth_model m(std::string("--type ") + type);
        const run_result r = weft("run -m " + q(m.path()) + " -p 'abc' -n 4 --temp 0");
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_NE(r.err.find(type == std::string("f16") ? "f16" : type), std::string::npos) << r.err;
    }
}

// gemma4 --experts writes the 26B-A4B's form: it runs, and its graph routes through GELU experts
// (the reference's names: tests/runtime/test_family_reference.cpp checks the numbers).
TEST(SynthCli, Gemma4WithExpertsRunsThroughItsExperts) {
    temp_file file("cli-gemma4-moe");
    const run_result w =
        weft("synth " + q(file.path()) +
             " --arch gemma4 --embd 64 --layers 6 --heads 4 --kv-heads 2 --ff 96 --vocab 300 "
             "--experts 4 --experts-used 2 --type q8_0");
    ASSERT_EQ(w.status, 0) << w.err;
    const run_result r = weft("run -m " + q(file.path()) + " -p 'abc' -n 4 --temp 0");
    EXPECT_EQ(r.status, 0) << r.err;
    const run_result g = weft("graph -m " + q(file.path()) + " --tokens 3");
    ASSERT_EQ(g.status, 0) << g.err;
    for (const char *node : {"ffn_moe_logits-5", "ffn_moe_gate_up-5", "ffn_moe_geglu-5",
                             "ffn_moe_down_scaled-5", "ffn_moe_combined-5"})
        EXPECT_NE(g.out.find(node), std::string::npos) << node;
}

TEST(GraphCli, ModelModeDescribesOneDecodeStep) {
    synth_model m;
    temp_file dot("cli-graph-dot");
    const run_result r = weft("graph -m " + q(m.path()) + " --tokens 5 --dot " + q(dot.path()));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("one decode step of 5 tokens"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("nodes: "), std::string::npos);
    EXPECT_NE(r.out.find("mul_mat: "), std::string::npos);
    EXPECT_NE(r.out.find("planned peak compute memory"), std::string::npos);
    EXPECT_NE(r.out.find("kqv-1"), std::string::npos);
    EXPECT_NE(weft::test::read_text_file(dot.path()).find("digraph"), std::string::npos);
}

// --split-layers: the placement of a pipeline, and one rank's stage graph (hidden states in, out).
TEST(GraphCli, PlacementOfAPipelineAndAStageGraph) {
    synth_model m;  // 2 blocks
    const run_result whole = weft("graph -m " + q(m.path()));
    ASSERT_EQ(whole.status, 0) << whole.err;
    EXPECT_NE(
        whole.out.find("blocks [0, 2) + token embedding + output: weights, KV cache and computation on CPU"),
        std::string::npos)
        << whole.out;
    const run_result second = weft("graph -m " + q(m.path()) + " --split-layers 1,1 --rank 1");
    ASSERT_EQ(second.status, 0) << second.err;
    EXPECT_NE(second.out.find("rank 0: blocks [0, 1) + token embedding"), std::string::npos) << second.out;
    EXPECT_NE(
        second.out.find("rank 1: blocks [1, 2) + output: weights, KV cache and computation on CPU  <- the "
                        "graph below"),
        std::string::npos)
        << second.out;
    EXPECT_NE(second.out.find("<- inp_hidden"), std::string::npos) << second.out;
    EXPECT_EQ(second.out.find("inp_tokens"), std::string::npos) << second.out;
    const run_result first = weft("graph -m " + q(m.path()) + " --split-layers 1,1");
    EXPECT_NE(first.out.find("inp_tokens"), std::string::npos) << first.out;
    EXPECT_EQ(first.out.find("result_output"), std::string::npos) << first.out;      // hands hidden states on
    EXPECT_NE(weft("graph -m " + q(m.path()) + " --split-layers 1,1,1").status, 0);  // 3 ranks, 2 blocks
}

TEST(LogitsCli, JsonHasTheFixtureShape) {
    synth_model m;
    const run_result r = weft("logits -m " + q(m.path()) + " -p 'Once upon' -n 5 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("prompt"), "Once upon");
    const auto toks = j.at("prompt_tokens").get<std::vector<int>>();
    ASSERT_FALSE(toks.empty());
    EXPECT_EQ(toks.front(), 1);  // BOS
    EXPECT_EQ(j.at("n_vocab"), 300);
    EXPECT_EQ(j.at("prompt_logits").size(), toks.size());
    EXPECT_EQ(j.at("prompt_logits")[0].size(), 300u);
    EXPECT_EQ(j.at("greedy").size(), 5u);
    EXPECT_TRUE(j.at("greedy_text_hex").is_string());
}

TEST(LogitsCli, Stories260KMatchesTheReferenceFile) {
    WEFT_REQUIRE_FIXTURES();
    const nlohmann::json ref = nlohmann::json::parse(
        weft::test::read_text_file(weft::test::fixture("reference/stories260K.once.json")));
    const run_result r = weft("logits -m " + q(weft::test::fixture("models/stories260K.gguf")) +
                              " -p 'Once upon a time' -n 64 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    const nlohmann::json got = nlohmann::json::parse(r.out);
    EXPECT_EQ(got.at("prompt_tokens"), ref.at("prompt_tokens"));
    EXPECT_EQ(got.at("greedy"), ref.at("greedy"));
    EXPECT_EQ(got.at("greedy_text_hex"), ref.at("greedy_text_hex"));
    const auto &a = got.at("prompt_logits"), &b = ref.at("prompt_logits");
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        double num = 0, den = 0;
        for (size_t k = 0; k < b[i].size(); ++k) {
            const double x = a[i][k].get<double>(), y = b[i][k].get<double>();
            num += (x - y) * (x - y);
            den += y * y;
        }
        EXPECT_LE(num / den, 1e-6) << "position " << i;
    }
}

// The issue's bar: `weft run --json-schema` with the built-in stories260K prints JSON valid under the
// schema for 100 seeds (each run ends by the grammar, well before -n): all 100 with WEFT_LONG_TESTS=1
// (`ctest -L fuzz`), 25 in the suite (JsonSchema.Stories260KWritesValidJsonFor100Seeds runs the 100
// in one process).
TEST(RunCli, JsonSchemaRunPrintsValidJsonForEverySeed) {
    temp_file schema_file{"cli-schema"};
    std::ofstream(schema_file.path()) << R"({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 10},
        "age": {"type": "integer", "minimum": 1, "maximum": 99},
        "friends": {"type": "array", "items": {"enum": ["Tim", "Lily", "Sue"]}, "maxItems": 3},
        "happy": {"type": "boolean"}},
      "required": ["name", "age"]})";
    const int n_seeds = weft::test::long_tests() ? 100 : 25;
    for (int seed = 0; seed < n_seeds; ++seed) {
        const run_result r = weft("run --json-schema " + q(schema_file.path()) +
                                  " -p 'Once upon a time' -n 400 -t 1 --seed " + std::to_string(seed));
        ASSERT_EQ(r.status, 0) << r.err;
        const std::string out = r.out.substr(0, r.out.size() - 1);  // the newline weft run ends with
        nlohmann::json v;
        ASSERT_NO_THROW(v = nlohmann::json::parse(out)) << "seed " << seed << ": " << out;
        ASSERT_TRUE(v.is_object()) << out;
        const std::string name = v.at("name").get<std::string>();
        const auto chars =
            std::count_if(name.begin(), name.end(), [](char c) { return (uint8_t(c) & 0xC0) != 0x80; });
        EXPECT_TRUE(chars >= 1 && chars <= 10) << out;
        EXPECT_TRUE(v.at("age").is_number_integer() && v["age"] >= 1 && v["age"] <= 99) << out;
        for (const auto &[key, value] : v.items()) {
            EXPECT_TRUE(key == "name" || key == "age" || key == "friends" || key == "happy") << out;
            if (key == "friends") {
                EXPECT_LE(value.size(), 3u) << out;
                for (const auto &f : value) EXPECT_TRUE(f == "Tim" || f == "Lily" || f == "Sue") << out;
            }
            if (key == "happy") {
                EXPECT_TRUE(value.is_boolean()) << out;
            }
        }
    }
}

TEST(RunCli, GrammarOptions) {
    const run_result yes_no = weft("run --grammar 'root ::= (\"yes\" | \"no\") \"!\"' -n 20 -t 1 --seed 5");
    ASSERT_EQ(yes_no.status, 0) << yes_no.err;
    EXPECT_TRUE(yes_no.out == "yes!\n" || yes_no.out == "no!\n") << yes_no.out;
    EXPECT_NE(yes_no.err.find("sampler: grammar -> "), std::string::npos) << yes_no.err;

    temp_file gbnf{"cli-grammar"};
    std::ofstream(gbnf.path()) << "# digits, then a full stop\nroot ::= [0-9]{2,4} \".\"\n";
    const run_result digits = weft("run --grammar-file " + q(gbnf.path()) + " -n 20 -t 1 --seed 2");
    ASSERT_EQ(digits.status, 0) << digits.err;
    EXPECT_TRUE(digits.out.size() >= 4 && digits.out.size() <= 6 && digits.out[digits.out.size() - 2] == '.')
        << digits.out;

    const run_result inline_schema = weft("run --json-schema '{\"enum\": [\"up\", \"down\"]}' -n 20 -t 1");
    ASSERT_EQ(inline_schema.status, 0) << inline_schema.err;
    EXPECT_TRUE(inline_schema.out == "\"up\"\n" || inline_schema.out == "\"down\"\n") << inline_schema.out;

    const run_result any = weft("run --json -n 300 -t 1 --seed 4");
    ASSERT_EQ(any.status, 0) << any.err;
    EXPECT_FALSE(any.out.empty());

    std::ofstream(gbnf.path()) << "root ::= \"a\"\nitem ::= [a-z";
    const run_result bad = weft("run --grammar-file " + q(gbnf.path()) + " -n 4");
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.err.find(gbnf.path() + ":2:10: character class is not closed"), std::string::npos)
        << bad.err;
    const run_result bad_schema = weft("run --json-schema '{\"type\": \"object\", \"not\": {}}' -n 4");
    EXPECT_EQ(bad_schema.status, 1);
    EXPECT_NE(bad_schema.err.find("JSON schema #/not: 'not' is not supported"), std::string::npos)
        << bad_schema.err;
    const run_result missing = weft("run --json-schema /nonexistent/schema.json -n 4");
    EXPECT_EQ(missing.status, 1);
    EXPECT_NE(missing.err.find("/nonexistent/schema.json"), std::string::npos) << missing.err;
    const run_result both = weft("run --json --grammar 'root ::= \"a\"' -n 4");
    EXPECT_NE(both.status, 0);
    EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
}

}  // namespace
