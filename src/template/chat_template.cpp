// src/template/chat_template.cpp — Jinja chat templates through the interpreter; the families:
// names, detection by distinctive substrings, formatting.
#include "weft/template/chat_template.h"

#include <array>
#include <utility>

#include "weft/core/error.h"
#include "weft/template/jinja.h"

namespace weft {

namespace {

constexpr std::array<std::pair<chat_template_kind, const char *>, 16> kind_names = {{
    {chat_template_kind::chatml, "chatml"},
    {chat_template_kind::llama2, "llama2"},
    {chat_template_kind::llama2_sys, "llama2-sys"},
    {chat_template_kind::llama2_sys_bos, "llama2-sys-bos"},
    {chat_template_kind::llama2_sys_strip, "llama2-sys-strip"},
    {chat_template_kind::mistral_v1, "mistral-v1"},
    {chat_template_kind::mistral_v3, "mistral-v3"},
    {chat_template_kind::mistral_v3_tekken, "mistral-v3-tekken"},
    {chat_template_kind::mistral_v7, "mistral-v7"},
    {chat_template_kind::llama3, "llama3"},
    {chat_template_kind::phi3, "phi3"},
    {chat_template_kind::phi4, "phi4"},
    {chat_template_kind::zephyr, "zephyr"},
    {chat_template_kind::gemma, "gemma"},
    {chat_template_kind::command_r, "command-r"},
    {chat_template_kind::deepseek3, "deepseek3"},
}};
static_assert(kind_names.size() == size_t(chat_template_kind::deepseek3) + 1, "every family needs a name");

std::string trim(std::string_view s) {
    const char *space = " \t\n\r\f\v";
    const size_t first = s.find_first_not_of(space);
    if (first == std::string_view::npos) return {};
    const size_t last = s.find_last_not_of(space);
    return std::string(s.substr(first, last - first + 1));
}

// <|im_start|>role\ncontent<|im_end|>\n; phi4 puts <|im_sep|> after the role and no newlines.
std::string format_chatml(const std::vector<chat_message> &msgs, bool add_assistant_prompt, bool phi4) {
    const std::string role_end = phi4 ? "<|im_sep|>" : "\n";
    const std::string turn_end = phi4 ? "<|im_end|>" : "<|im_end|>\n";
    std::string out;
    for (const auto &m : msgs) out += "<|im_start|>" + m.role + role_end + m.content + turn_end;
    if (add_assistant_prompt) out += "<|im_start|>assistant" + role_end;
    return out;
}

// Llama-2 chat: every user turn is wrapped in [INST] ... [/INST] and followed by the answer and
// </s>; the template of the model decides whether a system message gets <<SYS>> markers.
std::string format_llama2(chat_template_kind kind, const std::vector<chat_message> &msgs) {
    const bool system_markers = kind != chat_template_kind::llama2;
    const bool bos_inside_history = kind == chat_template_kind::llama2_sys_bos;
    const bool strip = kind == chat_template_kind::llama2_sys_strip;
    std::string out = "[INST] ";
    bool inside_turn = true;  // the first [INST] is already written; BOS comes from the tokenizer
    for (const auto &m : msgs) {
        const std::string content = strip ? trim(m.content) : m.content;
        if (!inside_turn) {
            out += bos_inside_history ? "<s>[INST] " : "[INST] ";
            inside_turn = true;
        }
        if (m.role == "system") {
            out += system_markers ? "<<SYS>>\n" + content + "\n<</SYS>>\n\n" : content + "\n";
        } else if (m.role == "user") {
            out += content + " [/INST]";
        } else {
            out += content + "</s>";
            inside_turn = false;
        }
    }
    return out;
}

// Mistral v1 / v3 / v3-tekken differ only in the spaces around [INST] and [/INST].
std::string format_mistral(chat_template_kind kind, const std::vector<chat_message> &msgs) {
    const std::string leading = kind == chat_template_kind::mistral_v1 ? " " : "";
    const std::string trailing = kind == chat_template_kind::mistral_v3_tekken ? "" : " ";
    const bool trim_assistant = kind == chat_template_kind::mistral_v3;
    std::string out;
    bool inside_turn = false;
    for (const auto &m : msgs) {
        if (!inside_turn) {
            out += leading + "[INST]" + trailing;
            inside_turn = true;
        }
        if (m.role == "system") {
            out += m.content + "\n\n";
        } else if (m.role == "user") {
            out += m.content + leading + "[/INST]";
        } else {
            out += trailing + (trim_assistant ? trim(m.content) : m.content) + "</s>";
            inside_turn = false;
        }
    }
    return out;
}

std::string format_mistral_v7(const std::vector<chat_message> &msgs) {
    std::string out;
    for (const auto &m : msgs) {
        if (m.role == "system")
            out += "[SYSTEM_PROMPT] " + m.content + "[/SYSTEM_PROMPT]";
        else if (m.role == "user")
            out += "[INST] " + m.content + "[/INST]";
        else
            out += " " + m.content + "</s>";
    }
    return out;
}

std::string format_llama3(const std::vector<chat_message> &msgs, bool add_assistant_prompt) {
    std::string out;
    for (const auto &m : msgs)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
    if (add_assistant_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
}

// <|role|>\ncontent<end>\n: phi3 ends turns with <|end|>, zephyr with <|endoftext|>.
std::string format_role_tags(const std::vector<chat_message> &msgs, bool add_assistant_prompt,
                             const char *turn_end) {
    std::string out;
    for (const auto &m : msgs) out += "<|" + m.role + "|>\n" + m.content + turn_end + "\n";
    if (add_assistant_prompt) out += "<|assistant|>\n";
    return out;
}

// Gemma has no system role: system text is kept and put in front of the next user turn.
std::string format_gemma(const std::vector<chat_message> &msgs, bool add_assistant_prompt) {
    std::string out;
    std::string pending_system;
    for (const auto &m : msgs) {
        if (m.role == "system") {
            pending_system += trim(m.content);
            continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        out += "<start_of_turn>" + role + "\n";
        if (!pending_system.empty() && role != "model") {
            out += pending_system + "\n\n";
            pending_system.clear();
        }
        out += trim(m.content) + "<end_of_turn>\n";
    }
    if (add_assistant_prompt) out += "<start_of_turn>model\n";
    return out;
}

// Cohere's Command-R: every turn is wrapped in START/END_OF_TURN tokens, the role is a token too.
std::string format_command_r(const std::vector<chat_message> &msgs, bool add_assistant_prompt) {
    std::string out;
    for (const auto &m : msgs) {
        const std::string role_token = m.role == "system"      ? "<|SYSTEM_TOKEN|>"
                                       : m.role == "assistant" ? "<|CHATBOT_TOKEN|>"
                                                               : "<|USER_TOKEN|>";
        out += "<|START_OF_TURN_TOKEN|>" + role_token + trim(m.content) + "<|END_OF_TURN_TOKEN|>";
    }
    if (add_assistant_prompt) out += "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";
    return out;
}

// DeepSeek V3 / R1: the system text stands alone at the top; the markers use full-width bars.
std::string format_deepseek3(const std::vector<chat_message> &msgs, bool add_assistant_prompt) {
    std::string out;
    for (const auto &m : msgs) {
        if (m.role == "system")
            out += m.content + "\n\n";
        else if (m.role == "user")
            out += "<｜User｜>" + m.content;
        else
            out += "<｜Assistant｜>" + m.content + "<｜end▁of▁sentence｜>";
    }
    if (add_assistant_prompt) out += "<｜Assistant｜>";
    return out;
}

}  // namespace

const char *chat_template_name(chat_template_kind kind) {
    for (const auto &[k, name] : kind_names)
        if (k == kind) return name;
    WEFT_ASSERT(false && "chat_template_kind without a name");
    return "";
}

std::optional<chat_template_kind> chat_template_from_name(std::string_view name) {
    for (const auto &[k, n] : kind_names)
        if (name == n) return k;
    return std::nullopt;
}

std::optional<chat_template_kind> chat_template_detect(std::string_view tmpl) {
    if (auto by_name = chat_template_from_name(tmpl)) return by_name;
    const auto has = [tmpl](std::string_view needle) { return tmpl.find(needle) != std::string_view::npos; };
    // Order matters: a template may mention several markers, the more specific test comes first.
    if (has("<|im_start|>")) return has("<|im_sep|>") ? chat_template_kind::phi4 : chat_template_kind::chatml;
    if (has("[INST]")) {
        if (has("[SYSTEM_PROMPT]")) return chat_template_kind::mistral_v7;
        if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
            if (has(" [INST]")) return chat_template_kind::mistral_v1;
            if (has("\"[INST]\"")) return chat_template_kind::mistral_v3_tekken;
            return chat_template_kind::mistral_v3;
        }
        if (has("content.strip()")) return chat_template_kind::llama2_sys_strip;
        if (has("bos_token + '[INST]")) return chat_template_kind::llama2_sys_bos;
        if (has("<<SYS>>")) return chat_template_kind::llama2_sys;
        return chat_template_kind::llama2;
    }
    if (has("<|assistant|>") && has("<|end|>")) return chat_template_kind::phi3;
    if (has("<|user|>")) return chat_template_kind::zephyr;
    if (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>")) return chat_template_kind::command_r;
    if (has("<|start_header_id|>") && has("<|end_header_id|>")) return chat_template_kind::llama3;
    if (has("<start_of_turn>")) return chat_template_kind::gemma;
    if (has("<｜User｜>") && has("<｜Assistant｜>")) return chat_template_kind::deepseek3;
    return std::nullopt;
}

chat_template_kind chat_template_resolve(std::string_view tmpl) {
    return chat_template_detect(tmpl).value_or(chat_template_kind::chatml);
}

std::string apply_chat_template(chat_template_kind kind, const std::vector<chat_message> &msgs,
                                bool add_assistant_prompt) {
    switch (kind) {
        case chat_template_kind::chatml:
            return format_chatml(msgs, add_assistant_prompt, false);
        case chat_template_kind::phi4:
            return format_chatml(msgs, add_assistant_prompt, true);
        case chat_template_kind::llama2:
        case chat_template_kind::llama2_sys:
        case chat_template_kind::llama2_sys_bos:
        case chat_template_kind::llama2_sys_strip:
            return format_llama2(kind, msgs);
        case chat_template_kind::mistral_v1:
        case chat_template_kind::mistral_v3:
        case chat_template_kind::mistral_v3_tekken:
            return format_mistral(kind, msgs);
        case chat_template_kind::mistral_v7:
            return format_mistral_v7(msgs);
        case chat_template_kind::llama3:
            return format_llama3(msgs, add_assistant_prompt);
        case chat_template_kind::phi3:
            return format_role_tags(msgs, add_assistant_prompt, "<|end|>");
        case chat_template_kind::zephyr:
            return format_role_tags(msgs, add_assistant_prompt, "<|endoftext|>");
        case chat_template_kind::gemma:
            return format_gemma(msgs, add_assistant_prompt);
        case chat_template_kind::command_r:
            return format_command_r(msgs, add_assistant_prompt);
        case chat_template_kind::deepseek3:
            return format_deepseek3(msgs, add_assistant_prompt);
    }
    WEFT_ASSERT(false && "unhandled chat_template_kind");
    return {};
}

bool chat_template_is_jinja(std::string_view tmpl) {
    return tmpl.find("{%") != std::string_view::npos || tmpl.find("{{") != std::string_view::npos;
}

bool chat_template_thinks_when_asked(const jinja_template &tmpl, const chat_template_tokens &tokens) {
    jinja_value user = jinja_value::dict();
    user.set("role", jinja_value(std::string("user")));
    user.set("content", jinja_value(std::string("test")));
    jinja_chat_params params;
    params.messages.push_back(user);
    params.add_generation_prompt = true;
    params.bos_token = tokens.bos;
    params.eos_token = tokens.eos;
    std::string off, on;
    try {
        params.extra = jinja_value::dict();
        params.extra.set("enable_thinking", jinja_value(false));
        off = jinja_render_chat(tmpl, params);
        params.extra.set("enable_thinking", jinja_value(true));
        on = jinja_render_chat(tmpl, params);
    } catch (const jinja_error &) {
        return false;
    }
    size_t start = 0;
    while (start < off.size() && start < on.size() && off[start] == on[start]) ++start;
    size_t end = 0;
    while (end < off.size() - start && end < on.size() - start &&
           off[off.size() - 1 - end] == on[on.size() - 1 - end])
        ++end;
    return (off.size() - start - end) + (on.size() - start - end) > 1;
}

std::string render_chat_template(std::string_view tmpl, const std::vector<chat_message> &msgs,
                                 bool add_assistant_prompt, const chat_template_tokens &tokens) {
    const jinja_template parsed(tmpl);
    jinja_chat_params params;
    for (const auto &m : msgs) {
        jinja_value message = jinja_value::dict();
        message.set("role", jinja_value(m.role));
        message.set("content", jinja_value(m.content));
        params.messages.push_back(std::move(message));
    }
    params.add_generation_prompt = add_assistant_prompt;
    params.bos_token = tokens.bos;
    params.eos_token = tokens.eos;
    params.extra = jinja_value::dict();
    params.extra.set("enable_thinking", jinja_value(chat_template_thinks_when_asked(parsed, tokens)));
    std::string text = jinja_render_chat(parsed, params);
    // the tokenizer adds BOS: a template that writes it too would give two
    if (!tokens.bos.empty() && text.compare(0, tokens.bos.size(), tokens.bos) == 0)
        text.erase(0, tokens.bos.size());
    return text;
}

std::string apply_chat_template(const std::string &tmpl, const std::vector<chat_message> &msgs,
                                bool add_assistant_prompt, const chat_template_tokens &tokens) {
    if (chat_template_is_jinja(tmpl)) {
        try {
            return render_chat_template(tmpl, msgs, add_assistant_prompt, tokens);
        } catch (const jinja_error &) {
            // a template beyond the interpreter's subset, or one that rejects this conversation
            // (raise_exception): the hand-written family is the fallback
        }
    }
    return apply_chat_template(chat_template_resolve(tmpl), msgs, add_assistant_prompt);
}

}  // namespace weft
