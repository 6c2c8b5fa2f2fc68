// src/api/handles.h — what the C API's opaque handles hold, and the guard every entry point runs in
// (no C++ exception crosses weft.h: each becomes a weft_status and the thread's last error message).
#pragma once

#include <atomic>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "weft.h"
#include "weft/core/error.h"
#include "weft/model/lora.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/serving/conversation.h"
#include "weft/serving/engine.h"

struct weft_model {
    std::unique_ptr<weft::model> model;
    std::vector<std::unique_ptr<weft::lora_adapter>> adapters;
    std::vector<weft::lora_use> loras;  // the adapters with their scales, as sessions apply them
    std::string host_device;            // the device the sessions compute the host's share on ("": the CPU)
    std::string description;
    weft::serving::template_choice chat_template;  // the model's own
};

struct weft_session {
    weft_model *owner = nullptr;
    weft::inference_params params;
    bool context_shift = false;
    // The one generate loop of the project (a decoder model; null for an encoder).
    std::unique_ptr<weft::serving::engine> engine;
    // A context of its own for logits and embeddings, made on first use: the engine's cache stays
    // as the conversation left it.
    std::unique_ptr<weft::inference_context> scratch;
    std::atomic<bool> abort_requested{false};
};

namespace weft::api {

// A failure with the status it maps to (an error the C API finds itself, or one it classifies).
class api_error : public weft::error {
  public:
    api_error(weft_status s, const std::string &what) : weft::error(what), status(s) {}
    weft_status status;
};

// Records `message` as this thread's last error and returns `status`.
weft_status fail(weft_status status, const std::string &message);

// Runs `body` (returning weft_status) and turns every exception into a status and message:
// api_error its own status, a weft::error `otherwise` (what bad input means where it is thrown).
template <class Body>
weft_status guarded(weft_status otherwise, Body &&body) noexcept {
    try {
        return body();
    } catch (const api_error &e) {
        return fail(e.status, e.what());
    } catch (const weft::error &e) {
        return fail(otherwise, e.what());
    } catch (const std::bad_alloc &) {
        return fail(WEFT_ERR_NO_MEMORY, "out of memory");
    } catch (const std::exception &e) {
        return fail(WEFT_ERR_INTERNAL, e.what());
    } catch (...) {
        return fail(WEFT_ERR_INTERNAL, "an unknown error");
    }
}

// Throws api_error(WEFT_ERR_INVALID_ARGUMENT) naming `what` when p is null.
inline void require(const void *p, const char *what) {
    if (!p) throw api_error(WEFT_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

// Writes n items to out (capacity of them) and n to *count; WEFT_ERR_BUFFER_TOO_SMALL (nothing
// written) when they do not fit.
template <class T>
weft_status write_out(const T *items, size_t n, T *out, size_t capacity, size_t *count, const char *what) {
    if (count) *count = n;
    if (n > capacity)
        return fail(WEFT_ERR_BUFFER_TOO_SMALL, std::string(what) + ": " + std::to_string(n) +
                                                   " needed, room for " + std::to_string(capacity));
    if (n > 0) require(out, what);
    for (size_t i = 0; i < n; ++i) out[i] = items[i];
    return WEFT_OK;
}

// Text to buf with a NUL: needs text.size() < capacity (see weft_detokenize).
weft_status write_text(const std::string &text, char *buf, size_t capacity, size_t *length);

}  // namespace weft::api
