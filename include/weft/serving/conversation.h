// weft/serving/conversation.h — what the conversational commands (chat, serve) share: which chat
// template to format with, and the inference context they set up.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/template/chat_template.h"
#include "weft/template/jinja.h"

namespace weft::serving {

struct template_choice {
    chat_template_kind kind = chat_template_kind::chatml;  // the family (the fallback when jinja is set)
    std::string source;                                    // where the template came from, for the log
    std::string fallback;         // non-empty when ChatML was chosen because nothing better was known: why
    std::string jinja;            // Jinja text rendered by the interpreter, or empty: the family formats
    chat_template_tokens tokens;  // bos_token / eos_token for the Jinja template

    // The conversation as prompt text: the Jinja template when there is one and it renders this
    // conversation, else the family.
    std::string format(const std::vector<chat_message> &msgs, bool add_assistant_prompt) const {
        if (!jinja.empty()) {
            try {
                return render_chat_template(jinja, msgs, add_assistant_prompt, tokens);
            } catch (const jinja_error &) {
                // a conversation the template refuses (raise_exception), or beyond the subset
            }
        }
        return apply_chat_template(kind, msgs, add_assistant_prompt);
    }
    // format(), and the byte ranges of the text that are message contents: the tokenizer keeps
    // control tokens written there as text, so a user typing "<|im_end|>" cannot end a turn. Found
    // by formatting the conversation again with a marker for each content; a template that
    // rewrites contents in a way the markers cannot follow (more than trimming) gets no ranges.
    std::string format(const std::vector<chat_message> &msgs, bool add_assistant_prompt,
                       std::vector<text_span> &contents) const {
        std::string text = format(msgs, add_assistant_prompt);
        contents.clear();
        std::vector<chat_message> marked = msgs;
        for (size_t i = 0; i < marked.size(); ++i) marked[i].content = "\x1e" + std::to_string(i) + "\x1f";
        const std::string with_markers = format(marked, add_assistant_prompt);
        for (const bool trimmed : {false, true}) {
            std::string rebuilt;
            std::vector<text_span> spans;
            size_t pos = 0;
            for (size_t at; (at = with_markers.find('\x1e', pos)) != std::string::npos;) {
                const size_t end = with_markers.find('\x1f', at);
                if (end == std::string::npos) break;
                const size_t i = size_t(std::strtoul(with_markers.c_str() + at + 1, nullptr, 10));
                if (i >= msgs.size()) break;
                std::string content = msgs[i].content;
                if (trimmed) {
                    const size_t a = content.find_first_not_of(" \t\r\n");
                    content = a == std::string::npos
                                  ? ""
                                  : content.substr(a, content.find_last_not_of(" \t\r\n") - a + 1);
                }
                rebuilt += with_markers.substr(pos, at - pos);
                if (!content.empty()) spans.push_back({rebuilt.size(), content.size()});
                rebuilt += content;
                pos = end + 1;
            }
            rebuilt += with_markers.substr(std::min(pos, with_markers.size()));
            if (rebuilt == text) {
                contents = std::move(spans);
                break;
            }
        }
        return text;
    }
    // "jinja" or the family's name
    std::string name() const { return jinja.empty() ? chat_template_name(kind) : "jinja"; }
};

// The special tokens as the template writes them.
inline chat_template_tokens template_tokens(const model &m) {
    const vocab &v = m.vocab();
    chat_template_tokens t;
    if (v.bos() != token_null) t.bos = v.token_to_piece(v.bos(), true);
    if (v.eos() != token_null) t.eos = v.token_to_piece(v.eos(), true);
    return t;
}

// Jinja text that the interpreter renders for a plain exchange (system, user, assistant, user).
inline bool jinja_renders(const std::string &tmpl, const chat_template_tokens &tokens) {
    if (!chat_template_is_jinja(tmpl)) return false;
    try {
        render_chat_template(tmpl, {{"user", "Hello"}, {"assistant", "Hi."}, {"user", "Bye"}}, true, tokens);
        return true;
    } catch (const jinja_error &) {
        return false;
    }
}

// --chat-template (a family name or Jinja text) if given, else the model's tokenizer.chat_template,
// else ChatML. Jinja text is rendered by the interpreter (the family it resembles, or ChatML, is the
// fallback for conversations it refuses). An unrecognised --chat-template is an error (the user
// asked for something specific).
inline template_choice choose_chat_template(const model &m, const std::string &requested) {
    const chat_template_tokens tokens = template_tokens(m);
    auto with_jinja = [&](template_choice c, const std::string &text) {
        if (jinja_renders(text, tokens)) {
            c.jinja = text;
            c.tokens = tokens;
        }
        return c;
    };
    if (!requested.empty()) {
        const auto kind = chat_template_detect(requested);
        template_choice c =
            with_jinja({kind.value_or(chat_template_kind::chatml), "--chat-template", ""}, requested);
        if (kind || !c.jinja.empty()) return c;
        throw error(
            "--chat-template '" + requested.substr(0, 60) +
            "': not a known family name nor a recognisable Jinja template (names: chatml, llama2, "
            "llama2-sys, llama2-sys-bos, llama2-sys-strip, mistral-v1, mistral-v3, mistral-v3-tekken, "
            "mistral-v7, llama3, phi3, phi4, zephyr, gemma, command-r, deepseek3)");
    }
    const auto from_model = m.chat_template();
    if (from_model && !from_model->empty()) {
        if (auto kind = chat_template_detect(*from_model))
            return with_jinja({*kind, "tokenizer.chat_template", ""}, *from_model);
        template_choice c =
            with_jinja({chat_template_kind::chatml, "tokenizer.chat_template", ""}, *from_model);
        if (c.jinja.empty()) {
            c.source = "fallback";
            c.fallback = m.path() +
                         ": tokenizer.chat_template is neither a template weft can render nor a family it "
                         "recognises; formatting as ChatML";
        }
        return c;
    }
    return {chat_template_kind::chatml, "fallback",
            m.path() + " has no tokenizer.chat_template; formatting as ChatML"};
}

// A context for a conversation: n_ctx 0 takes the model's training context (at most 4096);
// n_threads 0 takes the hardware's (at most 4).
inline inference_params conversation_params(const model &m, uint32_t n_ctx, uint32_t n_batch,
                                            int32_t n_threads) {
    inference_params ip;
    const int64_t n_ctx_train = m.hparams().n_ctx_train;
    ip.n_ctx = n_ctx > 0 ? n_ctx : uint32_t(n_ctx_train > 0 ? std::min<int64_t>(n_ctx_train, 4096) : 4096);
    ip.n_batch = std::min(n_batch, ip.n_ctx);
    ip.n_ubatch = std::min<uint32_t>(512, ip.n_batch);
    const int32_t hw_threads = int32_t(std::max(1u, std::min(4u, std::thread::hardware_concurrency())));
    ip.n_threads = ip.n_threads_batch = n_threads > 0 ? n_threads : hw_threads;
    return ip;
}

}  // namespace weft::serving
