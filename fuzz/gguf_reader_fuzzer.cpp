// fuzz/gguf_reader_fuzzer.cpp — libFuzzer target: any bytes through gguf_file::from_memory and getters.
#include <cstddef>
#include <cstdint>

#include "weft/gguf/gguf.h"

namespace {

// Touches what a loader would touch after a successful open: each key through the getters that
// fit its type (and some that do not), the first and last byte of every tensor.
void exercise(const weft::gguf_file &f) {
    volatile uint64_t sink = f.version() + f.alignment() + f.data_offset() + f.data_size();
    for (const auto &kv : f.kvs()) {
        try {
            sink = sink + uint64_t(f.get_int(kv.key).value_or(0));
        } catch (const weft::gguf_error &) {
        }
        try {
            sink = sink + f.get_uint(kv.key).value_or(0);
        } catch (const weft::gguf_error &) {
        }
        try {
            sink = sink + uint64_t(f.get_float(kv.key).value_or(0.0) != 0.0);
        } catch (const weft::gguf_error &) {
        }
        try {
            sink = sink + uint64_t(f.get_bool(kv.key).value_or(false));
        } catch (const weft::gguf_error &) {
        }
        try {
            sink = sink + f.get_string(kv.key).value_or("").size();
        } catch (const weft::gguf_error &) {
        }
        try {
            sink = sink + f.get_int_array(kv.key).value_or(std::vector<int64_t>{}).size();
        } catch (const weft::gguf_error &) {
        }
        try {
            sink = sink + f.get_float_array(kv.key).value_or(std::vector<float>{}).size();
        } catch (const weft::gguf_error &) {
        }
        try {
            if (const auto *s = f.get_string_array(kv.key)) sink = sink + s->size();
        } catch (const weft::gguf_error &) {
        }
    }
    for (const auto &t : f.tensors()) {
        const uint8_t *p = f.tensor_data(t);
        if (f.find_tensor(t.name) != &t) __builtin_trap();
        if (p && t.nbytes) sink = sink + p[0] + p[t.nbytes - 1];
    }
    (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    try {
        const auto f = weft::gguf_file::from_memory(data, size, "fuzz.gguf");
        exercise(*f);
    } catch (const weft::gguf_error &) {
        // rejected with a message: the expected outcome for most inputs
    }
    return 0;
}
