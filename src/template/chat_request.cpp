// src/template/chat_request.cpp — messages made ready for a chat template (chat_request.h), and the
// small JSON reader that turns tool call arguments into values.
#include "weft/template/chat_request.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "template/jinja_ast.h"

namespace weft {

namespace {

// A recursive-descent JSON reader (RFC 8259) into Jinja values, nested at most 256 deep.
class json_reader {
  public:
    explicit json_reader(std::string_view text) : text_(text) {}

    std::optional<jinja_value> read_all() {
        std::optional<jinja_value> v = value(0);
        space();
        if (!v || pos_ != text_.size()) return std::nullopt;
        return v;
    }

  private:
    static constexpr int max_depth = 256;

    void space() {
        while (pos_ < text_.size() &&
               (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
            ++pos_;
    }

    bool literal(std::string_view word) {
        if (text_.substr(pos_, word.size()) != word) return false;
        pos_ += word.size();
        return true;
    }

    std::optional<jinja_value> value(int depth) {
        if (depth > max_depth) return std::nullopt;
        space();
        if (pos_ >= text_.size()) return std::nullopt;
        const char c = text_[pos_];
        if (c == '{') return object(depth);
        if (c == '[') return array(depth);
        if (c == '"') {
            auto s = string();
            if (!s) return std::nullopt;
            return jinja_value(std::move(*s));
        }
        if (literal("true")) return jinja_value(true);
        if (literal("false")) return jinja_value(false);
        if (literal("null")) return jinja_value::none();
        return number();
    }

    std::optional<jinja_value> object(int depth) {
        ++pos_;
        jinja_value d = jinja_value::dict();
        space();
        if (pos_ < text_.size() && text_[pos_] == '}') {
            ++pos_;
            return d;
        }
        for (;;) {
            space();
            if (pos_ >= text_.size() || text_[pos_] != '"') return std::nullopt;
            auto key = string();
            if (!key) return std::nullopt;
            space();
            if (pos_ >= text_.size() || text_[pos_] != ':') return std::nullopt;
            ++pos_;
            auto v = value(depth + 1);
            if (!v) return std::nullopt;
            d.set(std::move(*key), std::move(*v));
            space();
            if (pos_ < text_.size() && text_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (pos_ < text_.size() && text_[pos_] == '}') {
                ++pos_;
                return d;
            }
            return std::nullopt;
        }
    }

    std::optional<jinja_value> array(int depth) {
        ++pos_;
        jinja_value l = jinja_value::list();
        space();
        if (pos_ < text_.size() && text_[pos_] == ']') {
            ++pos_;
            return l;
        }
        for (;;) {
            auto v = value(depth + 1);
            if (!v) return std::nullopt;
            l.push_back(std::move(*v));
            space();
            if (pos_ < text_.size() && text_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (pos_ < text_.size() && text_[pos_] == ']') {
                ++pos_;
                return l;
            }
            return std::nullopt;
        }
    }

    std::optional<uint32_t> hex4() {
        if (pos_ + 4 > text_.size()) return std::nullopt;
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) {
            const char h = text_[pos_++];
            v <<= 4;
            if (h >= '0' && h <= '9')
                v |= uint32_t(h - '0');
            else if (h >= 'a' && h <= 'f')
                v |= uint32_t(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F')
                v |= uint32_t(h - 'A' + 10);
            else
                return std::nullopt;
        }
        return v;
    }

    std::optional<std::string> string() {
        ++pos_;  // the opening quote
        std::string out;
        while (pos_ < text_.size()) {
            const char c = text_[pos_++];
            if (c == '"') return out;
            if (static_cast<unsigned char>(c) < 0x20) return std::nullopt;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ >= text_.size()) return std::nullopt;
            const char e = text_[pos_++];
            if (e == 'u') {
                auto cp = hex4();
                if (!cp) return std::nullopt;
                if (*cp >= 0xD800 && *cp < 0xDC00 && text_.substr(pos_, 2) == "\\u") {
                    pos_ += 2;
                    auto low = hex4();
                    if (!low || *low < 0xDC00 || *low >= 0xE000) return std::nullopt;
                    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (*low - 0xDC00);
                }
                jinja_detail::append_utf8(out, *cp);
                continue;
            }
            // the one-letter escapes and what they stand for
            constexpr std::string_view escapes = "\"\\/bfnrt", meanings = "\"\\/\b\f\n\r\t";
            const size_t which = escapes.find(e);
            if (which == std::string_view::npos) return std::nullopt;
            out += meanings[which];
        }
        return std::nullopt;  // unterminated
    }

    std::optional<jinja_value> number() {
        const size_t start = pos_;
        bool integral = true;
        if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
        const size_t digits = pos_;
        while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
        if (pos_ == digits || (text_[digits] == '0' && pos_ - digits > 1)) return std::nullopt;
        if (pos_ < text_.size() && text_[pos_] == '.') {
            integral = false;
            const size_t fraction = ++pos_;
            while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
            if (pos_ == fraction) return std::nullopt;
        }
        if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
            integral = false;
            ++pos_;
            if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
            const size_t exponent = pos_;
            while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
            if (pos_ == exponent) return std::nullopt;
        }
        const std::string s(text_.substr(start, pos_ - start));
        if (integral) {
            errno = 0;
            const long long v = std::strtoll(s.c_str(), nullptr, 10);
            if (errno == 0) return jinja_value(int64_t(v));
        }
        return jinja_value(std::strtod(s.c_str(), nullptr));  // beyond int64: a float, as Python reads it
    }

    std::string_view text_;
    size_t pos_ = 0;
};

// A shallow copy of a dict: the same values under the same keys, in a new dict.
jinja_value copy_dict(const jinja_value &d) {
    jinja_value out = jinja_value::dict();
    for (const auto &[k, v] : d.as_dict().items) out.set(k, v);
    return out;
}

// A message's content counts when it is a non-empty string or a non-empty list of parts.
bool has_content(const jinja_value &msg) {
    const jinja_value c = msg.get("content");
    return (c.is_string() && !c.as_string().empty()) || (c.is_list() && !c.as_list().empty());
}

bool has_tool_calls(const jinja_value &msg) {
    const jinja_value calls = msg.get("tool_calls");
    return calls.is_list() && !calls.as_list().empty();
}

bool is_role(const jinja_value &msg, std::string_view role) {
    return msg.is_dict() && msg.get("role").is_string() && msg.get("role").as_string() == role;
}

// Gemma 4's first templates read a tool's results from the assistant turn that called it
// (`tool_responses`), not from role "tool" messages. As the reference does for them, each
// assistant(tool_calls) -> tool... -> assistant(content) run becomes one assistant message with the
// calls, the results ({name: the call's function name (else the tool_call_id), response: the
// content as JSON when it parses, else as text}), the reasoning of the calling turn and the content
// of the answering one.
jinja_value merge_gemma4_tool_turns(const jinja_value &messages) {
    if (!messages.is_list()) return messages;
    const auto &list = messages.as_list();
    jinja_value out = jinja_value::list();
    size_t i = 0;
    while (i < list.size()) {
        const jinja_value &calling = list[i];
        if (!is_role(calling, "assistant") || !has_tool_calls(calling)) {
            out.push_back(calling);
            ++i;
            continue;
        }
        const jinja_value calls = calling.get("tool_calls");
        jinja_value responses = jinja_value::list();
        for (++i; i < list.size() && is_role(list[i], "tool"); ++i) {
            const jinja_value content = list[i].get("content");
            jinja_value response = content;
            if (content.is_string()) {
                if (auto parsed = jinja_parse_json(content.as_string())) response = std::move(*parsed);
            }
            std::string name;
            const size_t index = responses.as_list().size();
            if (index < calls.as_list().size()) {
                const jinja_value fn =
                    calls.as_list()[index].is_dict() ? calls.as_list()[index].get("function") : jinja_value();
                if (fn.is_dict() && fn.get("name").is_string()) name = fn.get("name").as_string();
            }
            if (name.empty() && list[i].get("tool_call_id").is_string())
                name = list[i].get("tool_call_id").as_string();
            jinja_value entry = jinja_value::dict();
            entry.set("name", jinja_value(name));
            entry.set("response", response.is_undefined() ? jinja_value::none() : response);
            responses.push_back(entry);
        }
        jinja_value merged = jinja_value::dict();
        merged.set("role", jinja_value(std::string("assistant")));
        merged.set("tool_calls", calls);
        if (!responses.as_list().empty()) merged.set("tool_responses", responses);
        if (i < list.size() && is_role(list[i], "assistant") && !has_tool_calls(list[i]) &&
            has_content(list[i])) {
            merged.set("content", list[i].get("content"));
            ++i;
        }
        if (calling.get("reasoning_content").is_string())
            merged.set("reasoning_content", calling.get("reasoning_content"));
        out.push_back(merged);
    }
    return out;
}

// The first Gemma 4 templates: they call tools as '<|tool_call>call:' and lack the later ones'
// OpenAI Chat Completions section (which reads role "tool" messages itself).
bool reads_gemma4_tool_responses(const std::string &source) {
    return source.find("'<|tool_call>call:'") != std::string::npos &&
           source.find("{#- OpenAI Chat Completions:") == std::string::npos;
}

}  // namespace

std::optional<jinja_value> jinja_parse_json(std::string_view text) {
    return json_reader(text).read_all();
}

jinja_value prepare_chat_messages(const jinja_value &messages, bool object_arguments) {
    if (!messages.is_list()) return messages;
    jinja_value out = jinja_value::list();
    for (const jinja_value &m : messages.as_list()) {
        if (!m.is_dict()) {
            out.push_back(m);
            continue;
        }
        jinja_value msg = copy_dict(m);
        if (msg.get("content").is_none()) msg.set("content", "");  // a tool call's null content
        const jinja_value reasoning = msg.get("reasoning_content");
        if (reasoning.is_string() && msg.get("thinking").is_undefined()) msg.set("thinking", reasoning);
        const jinja_value calls = msg.get("tool_calls");
        if (calls.is_list() && object_arguments) {
            jinja_value new_calls = jinja_value::list();
            for (const jinja_value &call : calls.as_list()) {
                const jinja_value fn = call.is_dict() ? call.get("function") : jinja_value();
                const jinja_value args = fn.is_dict() ? fn.get("arguments") : jinja_value();
                std::optional<jinja_value> parsed;
                if (args.is_string()) parsed = jinja_parse_json(args.as_string());
                if (!parsed || !parsed->is_dict()) {
                    new_calls.push_back(call);
                    continue;
                }
                jinja_value new_fn = copy_dict(fn);
                new_fn.set("arguments", *parsed);
                jinja_value new_call = copy_dict(call);
                new_call.set("function", new_fn);
                new_calls.push_back(new_call);
            }
            msg.set("tool_calls", new_calls);
        }
        out.push_back(msg);
    }
    return out;
}

std::string render_chat_request(const jinja_template &tmpl, const chat_request &request,
                                const chat_template_tokens &tokens) {
    const bool gemma4_tool_turns = reads_gemma4_tool_responses(tmpl.source());
    const auto ready = [&](bool object_arguments) {
        jinja_value messages = prepare_chat_messages(request.messages, object_arguments);
        return gemma4_tool_turns ? merge_gemma4_tool_turns(messages) : messages;
    };
    jinja_chat_params params;
    params.messages = ready(true);
    params.tools = request.tools;
    params.add_generation_prompt = request.add_generation_prompt;
    params.bos_token = tokens.bos;
    params.eos_token = tokens.eos;
    params.extra = jinja_value::dict();
    // thinking is on for a template that thinks when asked, unless the request turns it off, as in
    // the reference (Qwen3.5's and Gemma 4's templates open a thought only when it is given and true)
    params.extra.set("enable_thinking", jinja_value(chat_template_thinks_when_asked(tmpl, tokens)));
    if (request.kwargs.is_dict())
        for (const auto &[k, v] : request.kwargs.as_dict().items) params.extra.set(k, v);
    if (!request.strftime_now.is_undefined()) params.extra.set("strftime_now", request.strftime_now);
    std::string text;
    try {
        text = jinja_render_chat(tmpl, params);
    } catch (const jinja_error &) {
        // a template that joins the arguments as text (DeepSeek V3.1's '+'): the arguments as sent
        const jinja_value as_sent = ready(false);
        if (jinja_equal(as_sent, params.messages)) throw;
        params.messages = as_sent;
        text = jinja_render_chat(tmpl, params);
    }
    if (!tokens.bos.empty() && text.starts_with(tokens.bos)) text.erase(0, tokens.bos.size());
    return text;
}

}  // namespace weft
