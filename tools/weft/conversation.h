// tools/weft/conversation.h — what the conversational commands (chat, serve) share: which chat
// template to format with, and the inference context they set up.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>

#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/chat_template.h"
#include "weft/runtime/context.h"

namespace weft::tool {

struct template_choice {
    chat_template_kind kind = chat_template_kind::chatml;
    std::string source;    // where the family came from, for the log
    std::string fallback;  // non-empty when ChatML was chosen because nothing better was known: why
};

// --chat-template (a family name or Jinja text) if given, else the model's tokenizer.chat_template,
// else ChatML. An unrecognised --chat-template is an error (the user asked for something specific).
inline template_choice choose_chat_template(const model &m, const std::string &requested) {
    if (!requested.empty()) {
        if (auto kind = chat_template_detect(requested)) return {*kind, "--chat-template", ""};
        throw error(
            "--chat-template '" + requested.substr(0, 60) +
            "': not a known family name nor a recognisable Jinja template (names: chatml, llama2, "
            "llama2-sys, llama2-sys-bos, llama2-sys-strip, mistral-v1, mistral-v3, mistral-v3-tekken, "
            "mistral-v7, llama3, phi3, phi4, zephyr, gemma, command-r, deepseek3)");
    }
    const auto from_model = m.chat_template();
    if (from_model && !from_model->empty()) {
        if (auto kind = chat_template_detect(*from_model)) return {*kind, "tokenizer.chat_template", ""};
        return {chat_template_kind::chatml, "fallback",
                m.path() + ": tokenizer.chat_template is not a family weft recognises; formatting as ChatML"};
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

}  // namespace weft::tool
