// tests/model/model_test_util.h — temp files, synthetic models, GGUF copies with edits.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weft/gguf/gguf.h"
#include "weft/model/synth.h"

namespace weft::test {

// A file path in the temporary directory, removed when the object goes away.
class temp_file {
  public:
    explicit temp_file(const std::string &stem)
        : path_((std::filesystem::temp_directory_path() /
                 ("weft-" + stem + "-" + std::to_string(::getpid()) + ".gguf"))
                    .string()) {}
    ~temp_file() {
        std::error_code ec;
        std::filesystem::remove(path_, ec);
    }
    temp_file(const temp_file &) = delete;
    temp_file &operator=(const temp_file &) = delete;
    const std::string &path() const { return path_; }

  private:
    std::string path_;
};

// A small synthetic model of `arch` written to a temporary file.
struct synth_file {
    temp_file file;
    synth_spec spec;
    explicit synth_file(const std::string &stem, synth_spec s = {}) : file(stem), spec(std::move(s)) {
        synth_write(spec, file.path());
    }
    const std::string &path() const { return file.path(); }
};

// What copy_gguf changes on the way.
struct gguf_edits {
    std::string drop_tensor;     // leave this tensor out
    std::string reshape_tensor;  // give this tensor another shape (zeroed data)
    std::vector<int64_t> new_shape;
    bool drop_all_tensors = false;                   // a vocabulary-only file
    std::map<std::string, std::string> set_strings;  // string metadata to set (e.g. the architecture)
    std::map<std::string, float> set_floats;         // f32 metadata to set
    std::map<std::string, int64_t> set_ints;         // integer metadata to set (as i64)
    std::vector<std::string> remove_keys;            // metadata to leave out
};

// Copies the GGUF file src to dst with the edits applied.
inline void copy_gguf(const std::string &src, const std::string &dst, const gguf_edits &e) {
    auto f = gguf_file::open(src);
    gguf_writer w;
    for (const gguf_kv &kv : f->kvs()) w.set_kv(kv);
    for (const auto &[k, v] : e.set_strings) w.set_string(k, v);
    for (const auto &[k, v] : e.set_floats) w.set_f32(k, v);
    for (const auto &[k, v] : e.set_ints) w.set_i64(k, v);
    for (const std::string &k : e.remove_keys) w.remove(k);
    std::vector<std::unique_ptr<std::vector<uint8_t>>> keep;
    if (!e.drop_all_tensors) {
        for (const gguf_tensor_info &t : f->tensors()) {
            if (t.name == e.drop_tensor) continue;
            if (t.name == e.reshape_tensor) {
                int64_t rows = 1;
                for (size_t i = 1; i < e.new_shape.size(); ++i) rows *= e.new_shape[i];
                keep.push_back(
                    std::make_unique<std::vector<uint8_t>>(row_size(t.type, e.new_shape[0]) * size_t(rows)));
                w.add_tensor(t.name, t.type, e.new_shape, keep.back()->data(), keep.back()->size());
                continue;
            }
            w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne, t.n_dims), f->tensor_data(t),
                         t.nbytes);
        }
    }
    w.write(dst);
}

}  // namespace weft::test
