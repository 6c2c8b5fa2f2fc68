// tests/tools/test_chat_cli.cpp — `weft chat` with piped turns: replies, cache reuse, rollback, errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/fixtures.h"
#include "common/run_weft.h"
#include "model/model_test_util.h"

namespace {

using weft::test::run_result;

// Runs `weft chat ARGS` with `input` on stdin.
run_result run_chat(const std::string &args, const std::string &input) {
    return weft::test::run_weft_shell("chat " + args, &input);
}

std::string stories() {
    return weft::test::fixture("models/stories260K.gguf");
}

// The numbers of the verbose "turn N: reused R cached tokens, rolled back B, decoded D new prompt
// tokens ..., context C of ..." line.
struct turn_log {
    int reused = -1, rolled_back = -1, decoded = -1, context = -1;
};

turn_log find_turn(const std::string &err, int turn) {
    const std::regex line(
        "turn " + std::to_string(turn) +
        ": reused (\\d+) cached tokens, rolled back (\\d+), decoded (\\d+) new prompt tokens.*"
        "context (\\d+) of");
    std::smatch m;
    turn_log t;
    if (std::regex_search(err, m, line)) {
        t.reused = std::stoi(m[1]);
        t.rolled_back = std::stoi(m[2]);
        t.decoded = std::stoi(m[3]);
        t.context = std::stoi(m[4]);
    }
    return t;
}

const char *two_turns = "Once upon a time\nThe dog ran\n";

TEST(ChatCli, TwoTurnsStreamRepliesAndReuseTheCache) {
    WEFT_REQUIRE_FIXTURES();
    const auto r =
        run_chat("-m '" + stories() + "' --chat-template chatml -n 12 --temp 0 -c 256 -t 2 -v", two_turns);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(r.out.empty());
    EXPECT_GE(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;  // each reply ends its line
    const turn_log t1 = find_turn(r.err, 1), t2 = find_turn(r.err, 2);
    ASSERT_GE(t1.reused, 0) << r.err;
    ASSERT_GE(t2.reused, 0) << r.err;
    EXPECT_EQ(t1.reused, 0);
    EXPECT_GT(t1.decoded, 0);
    // turn 2 starts from everything turn 1 left in the cache and decodes only the new text
    EXPECT_EQ(t2.reused, t1.context);
    EXPECT_EQ(t2.rolled_back, 0);
    EXPECT_GT(t2.decoded, 0);
    EXPECT_EQ(t2.context, t2.reused + t2.decoded + 11);  // 12 sampled, the last left for the next turn
    EXPECT_NE(r.err.find("template chatml (--chat-template)"), std::string::npos) << r.err;
}

// Every reply follows the grammar (the repository's own copy of stories260K: no fixtures needed).
TEST(ChatCli, EachReplyFollowsTheGrammar) {
    const std::string model = std::string(WEFT_SOURCE_DIR) + "/models/stories260K.gguf";
    const auto r =
        run_chat("-m '" + model + "' --chat-template chatml -n 40 -c 256 -t 1 -s 9 --json-schema " +
                     "'{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", "
                     "\"minimum\": 1, \"maximum\": 9}}, \"required\": [\"n\"]}'",
                 two_turns);
    ASSERT_EQ(r.status, 0) << r.err;
    std::istringstream lines(r.out);
    int replies = 0;
    for (std::string line; std::getline(lines, line); ++replies) {
        const nlohmann::json v = nlohmann::json::parse(line);  // throws, failing the test, unless JSON
        EXPECT_TRUE(v.at("n").is_number_integer() && v["n"] >= 1 && v["n"] <= 9) << line;
    }
    EXPECT_EQ(replies, 2) << r.out;
}

// Needs no fixtures: a small random-weight model from `weft synth`.
TEST(ChatCli, SynthModelReusesTheCache) {
    const auto model =
        std::filesystem::temp_directory_path() / ("weft-chat-synth-" + std::to_string(::getpid()) + ".gguf");
    const std::string synth = std::string("'") + WEFT_BINARY + "' synth '" + model.string() +
                              "' --embd 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 300 --ctx 512 "
                              "> /dev/null 2>&1";
    ASSERT_EQ(std::system(synth.c_str()), 0) << synth;
    const auto r = run_chat("-m '" + model.string() + "' --chat-template chatml -n 8 --temp 0 -t 2 -v",
                            "Hello there\nAnd again\nOne more\n");
    std::filesystem::remove(model);
    ASSERT_EQ(r.status, 0) << r.err;
    const turn_log t1 = find_turn(r.err, 1), t2 = find_turn(r.err, 2), t3 = find_turn(r.err, 3);
    ASSERT_GE(t3.reused, 0) << r.err;
    EXPECT_EQ(t1.reused, 0);
    EXPECT_EQ(t2.reused, t1.context);
    EXPECT_EQ(t3.reused, t2.context);
    EXPECT_EQ(t2.rolled_back + t3.rolled_back, 0);
    EXPECT_NE(r.err.find("context 512 tokens"), std::string::npos) << r.err;  // -c 0: the file's context
}

TEST(ChatCli, TemplateThatRewritesTheReplyRollsBack) {
    WEFT_REQUIRE_FIXTURES();
    // mistral-v7 writes " " + reply after [/INST], which is not what the model generated: the
    // second turn must drop the reply's cells and decode them again as the template writes them.
    const auto r = run_chat("-m '" + stories() + "' --chat-template mistral-v7 -n 12 --temp 0 -c 256 -t 2 -v",
                            two_turns);
    ASSERT_EQ(r.status, 0) << r.err;
    const turn_log t1 = find_turn(r.err, 1), t2 = find_turn(r.err, 2);
    ASSERT_GE(t2.reused, 0) << r.err;
    EXPECT_GT(t2.rolled_back, 0);
    EXPECT_EQ(t2.reused, t1.decoded);  // the first turn's prompt stays cached
    EXPECT_EQ(t2.reused + t2.rolled_back, t1.context);
}

TEST(ChatCli, SameSeedSameConversation) {
    WEFT_REQUIRE_FIXTURES();
    const std::string args = "-m '" + stories() + "' -n 16 --temp 0.9 --seed 1234 -c 256 -t 2";
    const auto a = run_chat(args, two_turns);
    const auto b = run_chat(args, two_turns);
    ASSERT_EQ(a.status, 0) << a.err;
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_EQ(a.out, b.out);
    // no tokenizer.chat_template in this file: ChatML with a warning
    EXPECT_NE(a.err.find("formatting as ChatML"), std::string::npos) << a.err;
}

// The sampling options run has, chat has too: DRY's breakers go through the engine's vocabulary.
TEST(ChatCli, SamplerOptionsShapeTheChain) {
    WEFT_REQUIRE_FIXTURES();
    const std::string args =
        "-m '" + stories() +
        "' -n 16 -s 9 -c 256 -t 2 -v --samplers 'penalties;dry;top_k;temp' --dry-multiplier 1 "
        "--dry-sequence-breaker ' the'";
    const auto a = run_chat(args, two_turns);
    const auto b = run_chat(args, two_turns);
    ASSERT_EQ(a.status, 0) << a.err;
    EXPECT_NE(a.err.find("sampling penalties -> dry -> top-k -> temp -> dist"), std::string::npos) << a.err;
    EXPECT_EQ(a.out, b.out);

    const auto bad = run_chat("-m '" + stories() + "' --samplers 'top_k;heat'", "hi\n");
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.err.find("'heat' is unknown"), std::string::npos) << bad.err;
}

// A model whose tokenizer.chat_template is Jinja of no known family: the interpreter renders it
// (no ChatML fallback), and --chat-template takes Jinja text the same way.
TEST(ChatCli, TheModelsOwnJinjaTemplateIsRendered) {
    WEFT_REQUIRE_FIXTURES();
    const std::string jinja =
        "{% for m in messages %}{{ '<' ~ m.role ~ '>' ~ m.content | trim }}{% endfor %}"
        "{% if add_generation_prompt %}<bot>{% endif %}";
    const auto dir =
        std::filesystem::temp_directory_path() / ("weft-chat-jinja-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string with_template = (dir / "stories-jinja.gguf").string();
    weft::test::gguf_edits e;
    e.set_strings["tokenizer.chat_template"] = jinja;
    weft::test::copy_gguf(stories(), with_template, e);
    const auto r = run_chat("-m '" + with_template + "' -n 4 --temp 0 -c 256 -t 2 -v", two_turns);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("template jinja (tokenizer.chat_template)"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("formatting as ChatML"), std::string::npos) << r.err;
    // "<user>Once upon a time<bot>": fewer prompt tokens than ChatML's markers would take
    const auto chatml = run_chat("-m '" + stories() + "' --chat-template chatml -n 4 --temp 0 -c 256 -t 2 -v",
                                 "Once upon a time\n");
    const auto own =
        run_chat("-m '" + with_template + "' -n 4 --temp 0 -c 256 -t 2 -v", "Once upon a time\n");
    ASSERT_EQ(own.status, 0) << own.err;
    EXPECT_LT(find_turn(own.err, 1).decoded, find_turn(chatml.err, 1).decoded) << own.err;
    const auto given =
        run_chat("-m '" + stories() + "' --chat-template \"" + jinja + "\" -n 4 --temp 0 -c 256 -t 2 -v",
                 "Once upon a time\n");
    ASSERT_EQ(given.status, 0) << given.err;
    EXPECT_EQ(find_turn(given.err, 1).decoded, find_turn(own.err, 1).decoded) << given.err;
    std::filesystem::remove_all(dir);
}

TEST(ChatCli, SystemMessageChangesThePrompt) {
    WEFT_REQUIRE_FIXTURES();
    const std::string base = "-m '" + stories() + "' --chat-template chatml -n 4 --temp 0 -c 256 -t 2 -v";
    const auto plain = run_chat(base, "Hello\n");
    const auto with_system = run_chat(base + " --system 'Tell a story.'", "Hello\n");
    ASSERT_EQ(plain.status, 0) << plain.err;
    ASSERT_EQ(with_system.status, 0) << with_system.err;
    EXPECT_GT(find_turn(with_system.err, 1).decoded, find_turn(plain.err, 1).decoded);
}

TEST(ChatCli, ContextOverflowIsReportedWithoutContextShift) {
    WEFT_REQUIRE_FIXTURES();
    const auto r =
        run_chat("-m '" + stories() + "' --chat-template chatml -n 64 --temp 0 -c 48 -t 2 --no-context-shift",
                 two_turns);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("context full"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("-c/--ctx-size"), std::string::npos) << r.err;
}

// The tokens dropped by context shifts so far, from the verbose turn line.
int dropped_by_turn(const std::string &err, int turn) {
    const std::regex line("turn " + std::to_string(turn) + ": .*, (\\d+) tokens dropped by context shifts");
    std::smatch m;
    return std::regex_search(err, m, line) ? std::stoi(m[1]) : -1;
}

const char *seven_turns =
    "Once upon a time\nThe dog ran\nShe was happy\nThey played in the park\nThe end\nOne more day\nThe cat "
    "sat\n";

// Seven turns of 64 tokens in a context of 256: the oldest tokens go (during replies and before
// turns that would not fit) and the chat goes on, reusing the cache after every shift.
TEST(ChatCli, ConversationGoesOnPastTheContext) {
    WEFT_REQUIRE_FIXTURES();
    const auto r =
        run_chat("-m '" + stories() + "' --chat-template chatml -n 64 --temp 0 -c 256 -t 2 -v", seven_turns);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(dropped_by_turn(r.err, 1), 0) << r.err;
    EXPECT_GT(dropped_by_turn(r.err, 7), 256) << r.err;
    for (int turn = 2; turn <= 7; ++turn) {
        const turn_log t = find_turn(r.err, turn);
        EXPECT_GT(t.reused, 40) << "turn " << turn << "\n" << r.err;
        EXPECT_LE(t.context, 256) << r.err;
    }
}

// --save at the end, --load in another process: the next turn reuses the whole cache and replies
// as the same conversation held in one process does. Another model's or a damaged file is refused.
TEST(ChatCli, SavedConversationContinues) {
    WEFT_REQUIRE_FIXTURES();
    weft::test::temp_file saved("chat-session");
    const std::string base = "-m '" + stories() + "' --chat-template chatml -n 24 --temp 0 -c 128 -t 2 -v";
    const auto whole = run_chat(base, "Once upon a time\nThe dog ran\nThe cat sat\n");
    ASSERT_EQ(whole.status, 0) << whole.err;
    const auto first = run_chat(base + " --save '" + saved.path() + "'", "Once upon a time\nThe dog ran\n");
    ASSERT_EQ(first.status, 0) << first.err;
    const auto second = run_chat(base + " --load '" + saved.path() + "'", "The cat sat\n");
    ASSERT_EQ(second.status, 0) << second.err;
    EXPECT_EQ(first.out + second.out, whole.out);
    EXPECT_EQ(find_turn(second.err, 3).reused, find_turn(whole.err, 3).reused) << second.err;
    EXPECT_GT(find_turn(second.err, 3).reused, 0) << second.err;

    const auto other = run_chat("-m '" + weft::test::fixture("models/tiny-llama-F32.gguf") +
                                    "' --chat-template chatml --load '" + saved.path() + "'",
                                "hi\n");
    EXPECT_EQ(other.status, 1);
    EXPECT_NE(other.err.find("saved with another model"), std::string::npos) << other.err;
    std::filesystem::resize_file(saved.path(), 200);
    const auto damaged = run_chat(base + " --load '" + saved.path() + "'", "hi\n");
    EXPECT_EQ(damaged.status, 1);
    EXPECT_NE(damaged.err.find("truncated"), std::string::npos) << damaged.err;
}

TEST(ChatCli, EmptyInputEndsCleanly) {
    WEFT_REQUIRE_FIXTURES();
    const auto r = run_chat("-m '" + stories() + "' --chat-template chatml -t 2 -c 128", "\n  \n");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(ChatCli, BadInputFailsWithAMessage) {
    const auto missing = run_chat("-m /nonexistent/model.gguf", "hi\n");
    EXPECT_NE(missing.status, 0);  // the file-argument check refuses it before chat starts
    EXPECT_NE(missing.err.find("/nonexistent/model.gguf"), std::string::npos) << missing.err;

    const auto no_model = run_chat("", "hi\n");
    EXPECT_NE(no_model.status, 0);
    EXPECT_NE(no_model.err.find("--model"), std::string::npos) << no_model.err;

    if (!weft::test::have_fixtures()) return;
    const auto bad_template = run_chat("-m '" + stories() + "' --chat-template nosuchfamily", "hi\n");
    EXPECT_EQ(bad_template.status, 1);
    EXPECT_NE(bad_template.err.find("nosuchfamily"), std::string::npos) << bad_template.err;
}

TEST(ChatCli, HelpListsTheFlags) {
    const auto r = run_chat("--help", "");
    EXPECT_EQ(r.status, 0);
    for (const char *flag : {"--model",
                             "--system",
                             "--chat-template",
                             "--n-predict",
                             "--temp",
                             "--top-k",
                             "--top-p",
                             "--min-p",
                             "--repeat-penalty",
                             "--seed",
                             "--threads",
                             "--ctx-size",
                             "--typical",
                             "--top-n-sigma",
                             "--xtc-probability",
                             "--xtc-threshold",
                             "--dynatemp-range",
                             "--dynatemp-exp",
                             "--dry-multiplier",
                             "--dry-base",
                             "--dry-allowed-length",
                             "--dry-penalty-last-n",
                             "--dry-sequence-breaker",
                             "--mirostat",
                             "--mirostat-lr",
                             "--mirostat-ent",
                             "--samplers",
                             "--sampling-seq",
                             "--keep",
                             "--no-context-shift",
                             "--save",
                             "--load"})
        EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

}  // namespace
