// tests/template/test_reasoning.cpp — the reasoning splitter: <think> replies (opened by the reply
// or by the prompt), harmony channels and tool calls, each --reasoning-format, and the same split
// whether a reply comes whole, byte by byte or in any two pieces.
#include <gtest/gtest.h>

#include <string>

#include "weft/template/reasoning.h"

namespace weft {
namespace {

const reasoning_style think{reasoning_syntax::think_tags, false};
const reasoning_style think_opened{reasoning_syntax::think_tags, true};
const reasoning_style harmony{reasoning_syntax::harmony, false};

std::string calls_text(const reasoning_split &s) {
    std::string out;
    for (const auto &c : s.tool_calls) out += c.name + "(" + c.arguments + ");";
    return out;
}

// Fed byte by byte, and cut in two at every position: the same split as whole, and (where the
// content has no '<' of its own) no piece of content that is the start of a tag.
void expect_streams_alike(std::string_view text, reasoning_style style, reasoning_format format) {
    const reasoning_split whole = split_reasoning(text, style, format);
    {
        reasoning_splitter s(style, format);
        reasoning_split joined;
        for (char c : text) {
            reasoning_split piece = s.feed(std::string_view(&c, 1));
            if (whole.content.find('<') == std::string::npos) {
                EXPECT_EQ(piece.content.find('<'), std::string::npos)
                    << "a tag's first byte went out as content: " << text;
            }
            joined.reasoning += piece.reasoning;
            joined.content += piece.content;
            for (auto &c2 : piece.tool_calls) joined.tool_calls.push_back(c2);
        }
        reasoning_split end = s.finish();
        joined.reasoning += end.reasoning;
        joined.content += end.content;
        for (auto &c2 : end.tool_calls) joined.tool_calls.push_back(c2);
        EXPECT_EQ(joined.reasoning, whole.reasoning) << text;
        EXPECT_EQ(joined.content, whole.content) << text;
        EXPECT_EQ(calls_text(joined), calls_text(whole)) << text;
    }
    for (size_t cut = 0; cut <= text.size(); ++cut) {
        reasoning_splitter s(style, format);
        reasoning_split a = s.feed(text.substr(0, cut));
        reasoning_split b = s.feed(text.substr(cut));
        reasoning_split c = s.finish();
        EXPECT_EQ(a.reasoning + b.reasoning + c.reasoning, whole.reasoning) << text << " cut at " << cut;
        EXPECT_EQ(a.content + b.content + c.content, whole.content) << text << " cut at " << cut;
    }
}

TEST(Reasoning, FormatNames) {
    for (const char *name : {"none", "deepseek", "deepseek-legacy", "auto"}) {
        const auto f = reasoning_format_from_name(name);
        ASSERT_TRUE(f.has_value()) << name;
        EXPECT_STREQ(reasoning_format_name(*f), name);
    }
    EXPECT_FALSE(reasoning_format_from_name("Deepseek").has_value());
    EXPECT_FALSE(reasoning_format_from_name("").has_value());
}

TEST(Reasoning, ThinkTagsSplit) {
    const auto s = split_reasoning("<think>\n17 * 3 = 51.\n</think>\n\nThe answer is 51.", think,
                                   reasoning_format::deepseek);
    EXPECT_EQ(s.reasoning, "17 * 3 = 51.\n");  // as the reference: leading whitespace dropped
    EXPECT_EQ(s.content, "The answer is 51.");
    // auto is deepseek here
    const auto a = split_reasoning("<think>a b</think> c ", think, reasoning_format::automatic);
    EXPECT_EQ(a.reasoning, "a b");
    EXPECT_EQ(a.content, "c ");
    // a reply that does not open with the tag is all content, a later tag included
    const auto plain = split_reasoning("Hi <think>x</think>", think, reasoning_format::deepseek);
    EXPECT_EQ(plain.reasoning, "");
    EXPECT_EQ(plain.content, "Hi <think>x</think>");
    // an unclosed thought is all reasoning
    const auto open = split_reasoning("<think>still thinking\n", think, reasoning_format::deepseek);
    EXPECT_EQ(open.reasoning, "still thinking\n");
    EXPECT_EQ(open.content, "");
    // a bare "<thi" at the end is content after all
    EXPECT_EQ(split_reasoning("<thi", think, reasoning_format::deepseek).content, "<thi");
    // an empty thought gives no reasoning
    const auto empty = split_reasoning("<think>\n\n</think>\n\nOK", think, reasoning_format::deepseek);
    EXPECT_EQ(empty.reasoning, "");
    EXPECT_EQ(empty.content, "OK");
}

TEST(Reasoning, PromptOpenedThought) {
    // as the reference: the prompt's "\n" after <think> begins the thought, nothing is trimmed
    reasoning_style r1 = reasoning_style_of("<think>", "<｜Assistant｜><think>\n");
    EXPECT_EQ(r1.thought_prefix, "\n");
    const auto s = split_reasoning("Let me see.\n</think>\n\n51", r1, reasoning_format::deepseek);
    EXPECT_EQ(s.reasoning, "\nLet me see.\n");
    EXPECT_EQ(s.content, "\n\n51");
    expect_streams_alike("Let me see.\n</think>\n\n51", r1, reasoning_format::deepseek);
    const auto legacy =
        split_reasoning("Let me see.\n</think>\n\n51", think_opened, reasoning_format::deepseek_legacy);
    EXPECT_EQ(legacy.reasoning, "Let me see.\n");
    EXPECT_EQ(legacy.content, "<think>Let me see.\n</think>\n\n51");  // the reply as written, opened
}

TEST(Reasoning, FormatNoneLeavesTheReply) {
    const std::string text = "<think>x</think>y";
    const auto s = split_reasoning(text, think, reasoning_format::none);
    EXPECT_EQ(s.reasoning, "");
    EXPECT_EQ(s.content, text);
    const std::string h =
        "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>y";
    EXPECT_EQ(split_reasoning(h, harmony, reasoning_format::none).content, h);
    // a template without a thought syntax: content whatever the format
    EXPECT_EQ(split_reasoning(text, {}, reasoning_format::deepseek).content, text);
}

TEST(Reasoning, LegacyKeepsTheTagsInContent) {
    const std::string text = "<think>x</think>y";
    const auto s = split_reasoning(text, think, reasoning_format::deepseek_legacy);
    EXPECT_EQ(s.reasoning, "x");
    EXPECT_EQ(s.content, text);
}

TEST(Reasoning, HarmonyChannels) {
    const auto s = split_reasoning(
        "<|channel|>analysis<|message|>User asks 17*3. It's "
        "51.<|end|><|start|>assistant<|channel|>final<|message|>"
        "The answer is 51.",
        harmony, reasoning_format::automatic);
    EXPECT_EQ(s.reasoning, "User asks 17*3. It's 51.");
    EXPECT_EQ(s.content, "The answer is 51.");
    EXPECT_TRUE(s.tool_calls.empty());
    // a tool call (recipient in the channel part, or in the role part), its preamble as content
    const auto t = split_reasoning(
        "<|channel|>analysis<|message|>Need weather.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        "{\"location\":\"Paris\"}<|call|>",
        harmony, reasoning_format::deepseek);
    EXPECT_EQ(t.reasoning, "Need weather.");
    EXPECT_EQ(t.content, "Checking.");
    EXPECT_EQ(calls_text(t), "get_weather({\"location\":\"Paris\"});");
    const auto r = split_reasoning("<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}",
                                   harmony, reasoning_format::deepseek);
    EXPECT_EQ(calls_text(r), "f({});");
    EXPECT_EQ(r.content, "");
    // no channel at all: content; a message without <|end|> ends at the next header
    EXPECT_EQ(split_reasoning("Just text.", harmony, reasoning_format::deepseek).content, "Just text.");
    const auto n = split_reasoning("<|channel|>analysis<|message|>a<|channel|>final<|message|>b", harmony,
                                   reasoning_format::deepseek);
    EXPECT_EQ(n.reasoning, "a");
    EXPECT_EQ(n.content, "b");
    // a header cut short says nothing
    const auto cut = split_reasoning("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|chan",
                                     harmony, reasoning_format::deepseek);
    EXPECT_EQ(cut.reasoning, "a");
    EXPECT_EQ(cut.content, "");
}

TEST(Reasoning, StreamedAsWhole) {
    const char *think_replies[] = {
        "<think>\n17 * 3 = 51.\n</think>\n\nThe answer is 51.",
        "<think> a  b \n</think>  c <d> </think>",
        "<think>x</thinkx</think>y",
        "<think></think>",
        "<th",
        "plain <think>",
        "",
        " <think>x</think>",
    };
    for (const char *r : think_replies)
        for (auto f : {reasoning_format::deepseek, reasoning_format::deepseek_legacy, reasoning_format::none})
            expect_streams_alike(r, think, f);
    const char *opened_replies[] = {"a\n</think>\n\nb", "  \n  </think>b", "a </ b </think", "</think>"};
    for (const char *r : opened_replies) expect_streams_alike(r, think_opened, reasoning_format::deepseek);
    const char *harmony_replies[] = {
        "<|channel|>analysis<|message|>x y<|end|><|start|>assistant<|channel|>final<|message|>z",
        "<|channel|>analysis<|message|>a<|e|>b<|end|><|start|>assistant to=functions.f<|channel|>commentary "
        "json<|message|>{\"a\":1}<|call|>",
        "text <|start|>assistant<|channel|>final<|message|>more<|return|>",
        "<|channel|>final<|message|>a < b <| c",
    };
    for (const char *r : harmony_replies) expect_streams_alike(r, harmony, reasoning_format::deepseek);
}

// Gemma 4 thinks in a channel: "<|channel>thought\n...<channel|>answer"; with thinking off its
// template closes an empty one in the prompt, and the reply is all answer.
TEST(Reasoning, Gemma4ThoughtChannel) {
    const std::string tmpl = "{{- '<|turn>model\\n' -}}{{- '<|channel>thought\\n<channel|>' -}}";
    const reasoning_style on = reasoning_style_of(tmpl, "<|turn>model\n");
    EXPECT_EQ(on.syntax, reasoning_syntax::think_tags);
    EXPECT_FALSE(on.starts_in_thought);
    const std::string reply = "<|channel>thought\nThe user greets.<channel|>Hello!";
    const reasoning_split split = split_reasoning(reply, on, reasoning_format::automatic);
    EXPECT_EQ(split.reasoning, "The user greets.");
    EXPECT_EQ(split.content, "Hello!");
    expect_streams_alike(reply, on, reasoning_format::automatic);
    const reasoning_style off = reasoning_style_of(tmpl, "<|turn>model\n<|channel>thought\n<channel|>");
    EXPECT_FALSE(off.starts_in_thought);
    EXPECT_EQ(split_reasoning("Hello!", off, reasoning_format::automatic).content, "Hello!");
    EXPECT_EQ(split_reasoning(reply, on, reasoning_format::none).content, reply);
}

TEST(Reasoning, StyleFromTemplate) {
    EXPECT_EQ(reasoning_style_of("{{ '<|start|>assistant<|channel|>final<|message|>' }}", "").syntax,
              reasoning_syntax::harmony);
    const auto r1 =
        reasoning_style_of("{{ '<｜Assistant｜><think>\\n' }}", "<｜User｜>hi<｜Assistant｜><think>\n");
    EXPECT_EQ(r1.syntax, reasoning_syntax::think_tags);
    EXPECT_TRUE(r1.starts_in_thought);
    const auto q3 = reasoning_style_of("{{ '<think>\\n\\n</think>\\n\\n' }}", "<|im_start|>assistant\n");
    EXPECT_EQ(q3.syntax, reasoning_syntax::think_tags);
    EXPECT_FALSE(q3.starts_in_thought);
    EXPECT_FALSE(reasoning_style_of("x</think>", "<think>\n\n</think>\n\n").starts_in_thought);
    EXPECT_EQ(reasoning_style_of("deepseek3", "").syntax, reasoning_syntax::think_tags);
    EXPECT_EQ(reasoning_style_of("{{ messages }}", "").syntax, reasoning_syntax::plain);
    EXPECT_EQ(reasoning_style_of("", "").syntax, reasoning_syntax::plain);
}

}  // namespace
}  // namespace weft
