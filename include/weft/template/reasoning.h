// weft/template/reasoning.h — a reply split into its reasoning (the model's thoughts) and its
// content (the answer), as the reference server's --reasoning-format does: <think>...</think> for
// the templates that teach it (DeepSeek R1 / V3.1, Qwen3, GLM-4.5, SmolLM3 ...; Gemma 4's
// <|channel>thought...<channel|> alike), including those
// whose generation prompt opens the thought so the reply starts inside it, and gpt-oss's harmony
// channels (analysis: reasoning, final: content, commentary to=functions.NAME: a tool call).
// One splitter serves whole replies and streams alike: fed piece by piece it gives the same split as
// fed at once, and never lets a partial tag out as text.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

// What to do with the thoughts (the reference's --reasoning-format).
enum class reasoning_format {
    none,             // not parsed: the whole reply is content, tags and all
    deepseek,         // thoughts in reasoning_content, the rest in content
    deepseek_legacy,  // thoughts in reasoning_content, and content keeps them with their tags
    automatic,        // "auto", the default: as deepseek for the syntaxes below
};
// "none", "deepseek", "deepseek-legacy", "auto"
const char *reasoning_format_name(reasoning_format f);
std::optional<reasoning_format> reasoning_format_from_name(std::string_view name);

// How a model writes its thoughts, from its chat template.
enum class reasoning_syntax {
    plain,       // it does not: the reply is content
    think_tags,  // <think>thoughts</think>answer
    harmony,     // <|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...
};

struct reasoning_style {
    reasoning_syntax syntax = reasoning_syntax::plain;
    bool starts_in_thought = false;  // think_tags: the prompt ends with the opening tag
    // starts_in_thought: the prompt's whitespace after that tag, which the thought begins with
    std::string thought_prefix;
    // think_tags: the tags around a thought (Gemma 4 writes "<|channel>thought" ... "<channel|>")
    std::string open_tag = "<think>";
    std::string close_tag = "</think>";
};

// The style of a chat template's replies (its Jinja text or family name), and, from the rendered
// prompt, whether the reply begins inside a thought (the prompt ends with "<think>" and
// whitespace).
reasoning_style reasoning_style_of(std::string_view chat_template, std::string_view prompt);

struct reasoning_tool_call {
    std::string name;
    std::string arguments;  // as the model wrote them (JSON text)
};

// A piece of a split reply (or all of it).
struct reasoning_split {
    std::string reasoning;
    std::string content;
    std::vector<reasoning_tool_call> tool_calls;  // harmony: commentary to=functions.NAME, whole
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// Incremental: feed() the reply as it comes, finish() at its end; what each call returns is the
// part of the split that is now certain (text that could still turn out to be part of a tag, or
// whitespace that the split may drop, waits for more).
//
// think_tags: a reply that begins with "<think>" (or any reply, when starts_in_thought) has its
// thought up to "</think>", less its leading whitespace, as reasoning, and what follows, less its
// leading whitespace, as content (as the 2026 reference splits it; when the prompt opened the
// thought, nothing is trimmed and the thought begins with thought_prefix, as there too); an unclosed thought
// is all reasoning. A reply that does not begin so is all content. harmony: each message's channel decides
// where its text goes; text before any channel header is content; a header that never reaches <|message|> is
// dropped.
class reasoning_splitter {
  public:
    reasoning_splitter(reasoning_style style, reasoning_format format);
    ~reasoning_splitter();
    reasoning_splitter(reasoning_splitter &&) noexcept;
    reasoning_splitter &operator=(reasoning_splitter &&) noexcept;

    reasoning_split feed(std::string_view text);
    reasoning_split finish();

  private:
    struct state;
    std::unique_ptr<state> state_;
};

// The whole reply at once: feed(text) then finish(), joined.
reasoning_split split_reasoning(std::string_view text, reasoning_style style, reasoning_format format);

}  // namespace weft
