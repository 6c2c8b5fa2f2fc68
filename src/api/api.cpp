// src/api/api.cpp — the C API (weft.h): versions, errors, models, tokens and chat templates.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "api/handles.h"
#include "weft/gguf/gguf.h"
#include "weft/runtime/context.h"

namespace weft::api {
namespace {

thread_local std::string last_error_message;

// -ngl without a device: all blocks when a GPU takes them (as `weft run` counts "all").
constexpr int32_t all_layers = 999;

// The GPU device the parameters ask to offload to (null: none), and the host device name.
device *offload_device(const weft_model_params &p, std::string &host_device) {
    const std::string name = p.device ? p.device : "";
    if (name == "none" || p.n_gpu_layers == 0) return nullptr;
    if (!name.empty()) {
        device &d = select_device(name);  // an unknown name throws, listing the devices
        if (d.default_buffer_type().is_host()) {
            host_device = name;
            return nullptr;
        }
        return &d;
    }
    if (p.n_gpu_layers < 0) return nullptr;
    for (device *d : available_devices())
        if (!d->default_buffer_type().is_host()) return d;
    if (!p.quiet)
        std::fprintf(stderr, "weft: n_gpu_layers %d: no GPU device; computing on the CPU\n",
                     int(p.n_gpu_layers));
    return nullptr;
}

}  // namespace

weft_status fail(weft_status status, const std::string &message) {
    last_error_message = message;
    return status;
}

weft_status write_text(const std::string &text, char *buf, size_t capacity, size_t *length) {
    if (length) *length = text.size();
    if (text.size() >= capacity)
        return fail(WEFT_ERR_BUFFER_TOO_SMALL, "the text takes " + std::to_string(text.size() + 1) +
                                                   " bytes with its NUL, room for " +
                                                   std::to_string(capacity));
    require(buf, "buf");
    std::memcpy(buf, text.data(), text.size());
    buf[text.size()] = '\0';
    return WEFT_OK;
}

}  // namespace weft::api

using weft::api::api_error;
using weft::api::guarded;
using weft::api::require;

extern "C" {

WEFT_API int weft_version(void) {
    return WEFT_API_VERSION;
}

WEFT_API const char *weft_version_string(void) {
#define WEFT_STR2(x) #x
#define WEFT_STR(x) WEFT_STR2(x)
    return "weft " WEFT_PROJECT_VERSION " (C API " WEFT_STR(WEFT_API_VERSION_MAJOR) "." WEFT_STR(
        WEFT_API_VERSION_MINOR) "." WEFT_STR(WEFT_API_VERSION_PATCH) ")";
#undef WEFT_STR
#undef WEFT_STR2
}

WEFT_API const char *weft_last_error(void) {
    return weft::api::last_error_message.c_str();
}

WEFT_API const char *weft_status_name(weft_status status) {
    switch (status) {
        case WEFT_OK:
            return "WEFT_OK";
        case WEFT_ERR_INVALID_ARGUMENT:
            return "WEFT_ERR_INVALID_ARGUMENT";
        case WEFT_ERR_IO:
            return "WEFT_ERR_IO";
        case WEFT_ERR_BAD_FILE:
            return "WEFT_ERR_BAD_FILE";
        case WEFT_ERR_CONTEXT_FULL:
            return "WEFT_ERR_CONTEXT_FULL";
        case WEFT_ERR_BUFFER_TOO_SMALL:
            return "WEFT_ERR_BUFFER_TOO_SMALL";
        case WEFT_ERR_ABORTED:
            return "WEFT_ERR_ABORTED";
        case WEFT_ERR_NO_MEMORY:
            return "WEFT_ERR_NO_MEMORY";
        case WEFT_ERR_UNSUPPORTED:
            return "WEFT_ERR_UNSUPPORTED";
        case WEFT_ERR_INTERNAL:
            return "WEFT_ERR_INTERNAL";
    }
    return "WEFT_ERR_UNKNOWN";
}

WEFT_API void weft_model_params_init(weft_model_params *params) {
    if (!params) return;
    *params = weft_model_params{};
    params->use_mmap = true;
    params->n_gpu_layers = -1;
    params->quiet = true;
}

WEFT_API weft_status weft_model_load(const char *path, const weft_model_params *params, weft_model **out) {
    return guarded(WEFT_ERR_BAD_FILE, [&] {
        require(path, "path");
        require(out, "out");
        *out = nullptr;
        weft_model_params p;
        weft_model_params_init(&p);
        if (params) p = *params;
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec))
            throw api_error(WEFT_ERR_IO, std::string(path) + ": no such file");
        auto m = std::make_unique<weft_model>();
        weft::model_params mp;
        mp.use_mmap = p.use_mmap;
        if (weft::device *d = weft::api::offload_device(p, m->host_device)) {
            mp.offload_device = d;
            mp.n_gpu_layers = p.n_gpu_layers < 0 ? weft::api::all_layers : p.n_gpu_layers;
        }
        m->model = weft::model::load(path, mp);
        for (size_t i = 0; i < p.n_loras; ++i) {
            require(p.loras, "loras");
            require(p.loras[i].path, "loras[i].path");
            m->adapters.push_back(weft::lora_adapter::load(p.loras[i].path, *m->model));
            m->loras.push_back({m->adapters.back().get(), p.loras[i].scale});
        }
        m->description = m->model->describe();
        m->chat_template = weft::serving::choose_chat_template(*m->model, "");
        if (!p.quiet)
            std::fprintf(stderr, "weft: loaded %s in %.1f ms: %s\n", path, m->model->load_ms(),
                         m->description.c_str());
        *out = m.release();
        return WEFT_OK;
    });
}

WEFT_API void weft_model_free(weft_model *model) {
    delete model;
}

WEFT_API int32_t weft_model_n_vocab(const weft_model *model) {
    return model ? model->model->vocab().n_tokens() : 0;
}

WEFT_API int32_t weft_model_n_embd(const weft_model *model) {
    return model ? int32_t(model->model->hparams().n_embd) : 0;
}

WEFT_API int32_t weft_model_n_ctx_train(const weft_model *model) {
    return model ? int32_t(model->model->hparams().n_ctx_train) : 0;
}

WEFT_API bool weft_model_is_encoder(const weft_model *model) {
    return model && model->model->hparams().encoder;
}

WEFT_API const char *weft_model_describe(const weft_model *model) {
    return model ? model->description.c_str() : "";
}

WEFT_API weft_token weft_model_token_bos(const weft_model *model) {
    return model ? model->model->vocab().bos() : weft::token_null;
}

WEFT_API weft_token weft_model_token_eos(const weft_model *model) {
    return model ? model->model->vocab().eos() : weft::token_null;
}

WEFT_API bool weft_model_token_is_eog(const weft_model *model, weft_token token) {
    return model && token >= 0 && token < model->model->vocab().n_tokens() &&
           model->model->vocab().is_eog(token);
}

WEFT_API weft_status weft_tokenize(const weft_model *model, const char *text, size_t length, bool add_special,
                                   bool parse_special, weft_token *tokens, size_t capacity,
                                   size_t *n_tokens) {
    return guarded(WEFT_ERR_INVALID_ARGUMENT, [&] {
        require(model, "model");
        if (length > 0) require(text, "text");
        const std::vector<weft::token> out = model->model->vocab().tokenize(
            std::string_view(text ? text : "", length), add_special, parse_special);
        return weft::api::write_out(out.data(), out.size(), tokens, capacity, n_tokens, "tokens");
    });
}

WEFT_API weft_status weft_detokenize(const weft_model *model, const weft_token *tokens, size_t n_tokens,
                                     bool special, char *buf, size_t capacity, size_t *length) {
    return guarded(WEFT_ERR_INVALID_ARGUMENT, [&] {
        require(model, "model");
        if (n_tokens > 0) require(tokens, "tokens");
        const weft::vocab &v = model->model->vocab();
        for (size_t i = 0; i < n_tokens; ++i)
            if (tokens[i] < 0 || tokens[i] >= v.n_tokens())
                throw api_error(WEFT_ERR_INVALID_ARGUMENT, "token " + std::to_string(tokens[i]) +
                                                               " is not in the vocabulary (" +
                                                               std::to_string(v.n_tokens()) + " tokens)");
        return weft::api::write_text(v.detokenize({tokens, n_tokens}, special), buf, capacity, length);
    });
}

WEFT_API weft_status weft_chat_apply_template(const weft_model *model, const char *template_name,
                                              const weft_chat_message *messages, size_t n_messages,
                                              bool add_assistant, char *buf, size_t capacity,
                                              size_t *length) {
    return guarded(WEFT_ERR_INVALID_ARGUMENT, [&] {
        require(model, "model");
        if (n_messages > 0) require(messages, "messages");
        std::vector<weft::chat_message> msgs;
        for (size_t i = 0; i < n_messages; ++i) {
            if (!messages[i].role || !messages[i].content)
                throw api_error(WEFT_ERR_INVALID_ARGUMENT,
                                "messages[" + std::to_string(i) + "]: a NULL role or content");
            msgs.push_back({messages[i].role, messages[i].content});
        }
        const bool own = !template_name || !*template_name;
        const weft::serving::template_choice chosen =
            own ? model->chat_template : weft::serving::choose_chat_template(*model->model, template_name);
        return weft::api::write_text(chosen.format(msgs, add_assistant), buf, capacity, length);
    });
}

}  // extern "C"
