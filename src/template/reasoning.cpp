// src/template/reasoning.cpp — the reasoning splitter (weft/template/reasoning.h): a small state
// machine per syntax that holds back only what could still be part of a tag, so a reply fed byte by
// byte splits as it does whole.
#include "weft/template/reasoning.h"

#include <algorithm>
#include <array>

#include "weft/template/chat_template.h"

namespace weft {

namespace {

constexpr std::string_view think_open = "<think>";
constexpr std::string_view think_close = "</think>";
// Gemma 4's thought channel: the template writes an empty one when thinking is off
constexpr std::string_view gemma4_thought_open = "<|channel>thought";
constexpr std::string_view gemma4_thought_close = "<channel|>";
constexpr std::string_view harmony_message = "<|message|>";
constexpr std::string_view harmony_channel = "<|channel|>";
constexpr std::string_view harmony_start = "<|start|>";
constexpr std::string_view functions_prefix = "functions.";
// what ends a harmony message's text: its end, a tool call's end, the reply's end, or (when the
// model leaves out <|end|>) the next message's header
constexpr std::array<std::string_view, 5> harmony_stops = {"<|end|>", "<|call|>", "<|return|>", harmony_start,
                                                           harmony_channel};

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// The length of the longest suffix of `text` that is a proper prefix of `tag` (text that may be
// the start of the tag, completed by what comes next).
size_t partial_suffix(std::string_view text, std::string_view tag) {
    for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
        if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

// Whether `text` may still become `tag` (it is a proper prefix of it).
bool could_become(std::string_view text, std::string_view tag) {
    return text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

void append(reasoning_split &to, reasoning_split &&from) {
    to.reasoning += from.reasoning;
    to.content += from.content;
    for (auto &c : from.tool_calls) to.tool_calls.push_back(std::move(c));
}

// The value of `key` in a harmony header ("<|start|>assistant to=functions.f<|channel|>commentary
// json"): the text after it up to a space or the next "<|".
std::string header_value(std::string_view header, std::string_view key) {
    const size_t at = header.find(key);
    if (at == std::string_view::npos) return "";
    size_t end = at + key.size();
    while (end < header.size() && !is_space(header[end]) && header.compare(end, 2, "<|") != 0) ++end;
    return std::string(header.substr(at + key.size(), end - at - key.size()));
}

}  // namespace

const char *reasoning_format_name(reasoning_format f) {
    switch (f) {
        case reasoning_format::none:
            return "none";
        case reasoning_format::deepseek:
            return "deepseek";
        case reasoning_format::deepseek_legacy:
            return "deepseek-legacy";
        case reasoning_format::automatic:
            return "auto";
    }
    return "auto";
}

std::optional<reasoning_format> reasoning_format_from_name(std::string_view name) {
    for (reasoning_format f : {reasoning_format::none, reasoning_format::deepseek,
                               reasoning_format::deepseek_legacy, reasoning_format::automatic})
        if (name == reasoning_format_name(f)) return f;
    return std::nullopt;
}

reasoning_style reasoning_style_of(std::string_view chat_template, std::string_view prompt) {
    reasoning_style style;
    if (chat_template.find(harmony_channel) != std::string_view::npos &&
        chat_template.find(harmony_message) != std::string_view::npos) {
        style.syntax = reasoning_syntax::harmony;
    } else if (chat_template.find(gemma4_thought_open) != std::string_view::npos &&
               chat_template.find(gemma4_thought_close) != std::string_view::npos) {
        style.syntax = reasoning_syntax::think_tags;
        style.open_tag = gemma4_thought_open;
        style.close_tag = gemma4_thought_close;
    } else if (chat_template.find(think_close) != std::string_view::npos ||
               chat_template.find(think_open) != std::string_view::npos ||
               chat_template_from_name(chat_template) == chat_template_kind::deepseek3) {
        style.syntax = reasoning_syntax::think_tags;
    }
    if (style.syntax == reasoning_syntax::think_tags) {
        size_t end = prompt.size();
        while (end > 0 && is_space(prompt[end - 1])) --end;
        style.starts_in_thought = prompt.substr(0, end).ends_with(style.open_tag);
        if (style.starts_in_thought) style.thought_prefix = std::string(prompt.substr(end));
    }
    return style;
}

struct reasoning_splitter::state {
    reasoning_style style;
    reasoning_format format;
    std::string held;  // text not yet split

    // think_tags
    enum class phase { opening, thought, after_thought, answer } think_phase = phase::opening;
    bool thought_started = false;  // leading whitespace of the thought is dropped until then
    bool untrimmed = false;        // the prompt opened the thought: the answer keeps its whitespace

    // harmony
    enum class part { header, body, between } harmony_part = part::between;
    enum class channel { reasoning, content, tool_call } harmony_channel_kind = channel::content;
    reasoning_tool_call call;  // the tool call whose arguments are being read

    bool legacy_opened = false;  // deepseek_legacy: the opening tag the prompt wrote is in content

    bool raw() const { return format == reasoning_format::none || style.syntax == reasoning_syntax::plain; }

    void thought(std::string_view piece, reasoning_split &out) {
        if (!thought_started) {
            while (!piece.empty() && is_space(piece.front())) piece.remove_prefix(1);
            if (piece.empty()) return;
            thought_started = true;
        }
        out.reasoning += piece;
    }

    void think_step(reasoning_split &out, bool at_end) {
        for (;;) {
            switch (think_phase) {
                case phase::opening:
                    if (!at_end && could_become(held, style.open_tag)) return;
                    if (held.starts_with(style.open_tag)) {
                        held.erase(0, style.open_tag.size());
                        think_phase = phase::thought;
                    } else {
                        think_phase = phase::answer;
                    }
                    continue;
                case phase::thought: {
                    const size_t at = held.find(style.close_tag);
                    if (at != std::string::npos) {
                        thought(std::string_view(held).substr(0, at), out);
                        held.erase(0, at + style.close_tag.size());
                        think_phase = phase::after_thought;
                        continue;
                    }
                    const size_t keep = at_end ? 0 : partial_suffix(held, style.close_tag);
                    thought(std::string_view(held).substr(0, held.size() - keep), out);
                    held.erase(0, held.size() - keep);
                    return;
                }
                case phase::after_thought: {
                    if (untrimmed) {
                        think_phase = phase::answer;
                        continue;
                    }
                    size_t n = 0;
                    while (n < held.size() && is_space(held[n])) ++n;
                    held.erase(0, n);
                    if (held.empty()) return;
                    think_phase = phase::answer;
                    continue;
                }
                case phase::answer:
                    out.content += held;
                    held.clear();
                    return;
            }
        }
    }

    void harmony_text(std::string_view piece, reasoning_split &out) {
        switch (harmony_channel_kind) {
            case channel::reasoning:
                out.reasoning += piece;
                break;
            case channel::content:
                out.content += piece;
                break;
            case channel::tool_call:
                call.arguments += piece;
                break;
        }
    }

    void end_message(reasoning_split &out) {
        if (harmony_channel_kind == channel::tool_call) out.tool_calls.push_back(std::move(call));
        call = {};
        harmony_channel_kind = channel::content;
    }

    void open_message(std::string_view header) {
        const std::string recipient = header_value(header, "to=");
        const std::string name = header_value(header, harmony_channel);
        if (recipient.starts_with(functions_prefix)) {
            harmony_channel_kind = channel::tool_call;
            call = {recipient.substr(functions_prefix.size()), ""};
        } else if (name == "analysis") {
            harmony_channel_kind = channel::reasoning;
        } else {
            harmony_channel_kind = channel::content;  // final, commentary to the user, or unknown
        }
    }

    void harmony_step(reasoning_split &out, bool at_end) {
        for (;;) {
            switch (harmony_part) {
                case part::between:
                    if (held.starts_with(harmony_start) || held.starts_with(harmony_channel)) {
                        harmony_part = part::header;
                        continue;
                    }
                    if (held.empty() || (!at_end && (could_become(held, harmony_start) ||
                                                     could_become(held, harmony_channel))))
                        return;
                    harmony_channel_kind = channel::content;  // text outside any message
                    harmony_part = part::body;
                    continue;
                case part::header: {
                    const size_t at = held.find(harmony_message);
                    if (at == std::string::npos) {
                        if (at_end) held.clear();  // a header cut short: nothing to say
                        return;
                    }
                    open_message(std::string_view(held).substr(0, at));
                    held.erase(0, at + harmony_message.size());
                    harmony_part = part::body;
                    continue;
                }
                case part::body: {
                    size_t at = std::string::npos;
                    std::string_view stop;
                    for (std::string_view s : harmony_stops)
                        if (const size_t i = held.find(s); i < at) {
                            at = i;
                            stop = s;
                        }
                    if (at != std::string::npos) {
                        harmony_text(std::string_view(held).substr(0, at), out);
                        end_message(out);
                        // a header that follows directly stays for the next message
                        const bool header_next = stop == harmony_start || stop == harmony_channel;
                        held.erase(0, header_next ? at : at + stop.size());
                        harmony_part = header_next ? part::header : part::between;
                        continue;
                    }
                    size_t keep = 0;
                    if (!at_end)
                        for (std::string_view s : harmony_stops)
                            keep = std::max(keep, partial_suffix(held, s));
                    harmony_text(std::string_view(held).substr(0, held.size() - keep), out);
                    held.erase(0, held.size() - keep);
                    if (at_end) end_message(out);
                    return;
                }
            }
        }
    }

    reasoning_split step(std::string_view text, bool at_end) {
        reasoning_split out;
        const bool legacy = format == reasoning_format::deepseek_legacy;
        if (legacy && !legacy_opened && style.starts_in_thought) out.content += style.open_tag;  // as written
        legacy_opened = true;
        if (raw() || legacy) out.content += text;
        if (raw()) return out;
        held += text;
        reasoning_split split;
        if (style.syntax == reasoning_syntax::think_tags)
            think_step(split, at_end);
        else
            harmony_step(split, at_end);
        if (legacy) split.content.clear();  // the text as written is the content
        append(out, std::move(split));
        return out;
    }
};

reasoning_splitter::reasoning_splitter(reasoning_style style, reasoning_format format)
    : state_(std::make_unique<state>()) {
    state_->style = style;
    state_->format = format;
    if (style.syntax == reasoning_syntax::think_tags && style.starts_in_thought) {
        // the reference keeps the prompt-opened thought and what follows it untrimmed
        state_->think_phase = state::phase::thought;
        state_->thought_started = true;
        state_->untrimmed = true;
        state_->held = style.thought_prefix;
    }
}

reasoning_splitter::~reasoning_splitter() = default;
reasoning_splitter::reasoning_splitter(reasoning_splitter &&) noexcept = default;
reasoning_splitter &reasoning_splitter::operator=(reasoning_splitter &&) noexcept = default;

reasoning_split reasoning_splitter::feed(std::string_view text) {
    return state_->step(text, false);
}

reasoning_split reasoning_splitter::finish() {
    return state_->step("", true);
}

reasoning_split split_reasoning(std::string_view text, reasoning_style style, reasoning_format format) {
    reasoning_splitter splitter(style, format);
    reasoning_split out = splitter.feed(text);
    append(out, splitter.finish());
    return out;
}

}  // namespace weft
