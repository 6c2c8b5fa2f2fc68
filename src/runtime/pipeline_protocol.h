// src/runtime/pipeline_protocol.h — the messages of a pipeline across ranks (weft/runtime/pipeline.h).
//
// command (rank 0 -> every other rank): int32 kind, then its arguments (open: the context's
//   parameters; then decodes and KV cache edits; close at the end);
// hidden (rank r -> r + 1, one per ubatch): int32 status (a decode return code), then on success
//   the ubatch's hidden states, n_embd floats per token;
// result (last rank -> rank 0, one per decode): int32 return code, the error text, the logits rows.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "weft/core/error.h"
#include "weft/runtime/batch.h"
#include "weft/runtime/pipeline.h"

namespace weft::pipeline_protocol {

enum tag : int { tag_command = 1, tag_hidden = 2, tag_result = 3 };

enum class command : int32_t {
    open,   // rank 0 made its context: its parameters follow
    close,  // rank 0's context ended
    decode,
    seq_rm,
    seq_cp,
    seq_keep,
    seq_add,
    seq_div,
    clear,
    defrag,
    update
};

// Appends and reads plain values and arrays; reading past the end throws weft::error.
class message_writer {
  public:
    template <class T>
    message_writer &value(const T &v) {
        const auto *p = reinterpret_cast<const uint8_t *>(&v);
        bytes.insert(bytes.end(), p, p + sizeof v);
        return *this;
    }
    template <class T>
    message_writer &array(std::span<const T> v) {
        value(uint64_t(v.size()));
        const auto *p = reinterpret_cast<const uint8_t *>(v.data());
        bytes.insert(bytes.end(), p, p + v.size_bytes());
        return *this;
    }
    std::vector<uint8_t> bytes;
};

class message_reader {
  public:
    explicit message_reader(std::span<const uint8_t> b) : b_(b) {}
    template <class T>
    T value() {
        T v;
        std::memcpy(&v, take(sizeof v), sizeof v);
        return v;
    }
    template <class T>
    std::vector<T> array() {
        const auto n = value<uint64_t>();
        if (n > (b_.size() - at_) / sizeof(T))
            throw error("pipeline message truncated: an array of " + std::to_string(n) + " items");
        std::vector<T> v(static_cast<size_t>(n));
        if (n > 0) std::memcpy(v.data(), take(size_t(n) * sizeof(T)), size_t(n) * sizeof(T));
        return v;
    }
    // Several values in order, as a tuple (for std::apply).
    template <class... T>
    std::tuple<T...> values() {
        return std::tuple<T...>{value<T>()...};  // braces: evaluated left to right
    }
    std::span<const uint8_t> rest() const { return b_.subspan(at_); }

  private:
    const uint8_t *take(size_t n);
    std::span<const uint8_t> b_;
    size_t at_ = 0;
};

// A command and its arguments, ready to send.
template <class... Args>
std::vector<uint8_t> command_message(command c, const Args &...args) {
    message_writer w;
    w.value(c);
    (w.value(args), ...);
    return std::move(w.bytes);
}

std::vector<uint8_t> encode_batch(const batch &b);
batch decode_batch(message_reader &r);

}  // namespace weft::pipeline_protocol
