// tests/gguf/gguf_test_util.h — GGUF test helpers: byte-level builder for hostile files, temp dirs, file I/O.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace weft::test {

// Writes GGUF fields one by one, so a test can put any value (a hostile count, a bad type) anywhere.
class raw_gguf {
  public:
    raw_gguf &bytes(const void *p, size_t n) {
        const auto *b = static_cast<const uint8_t *>(p);
        data.insert(data.end(), b, b + n);
        return *this;
    }
    raw_gguf &u32(uint32_t v) { return bytes(&v, 4); }
    raw_gguf &i32(int32_t v) { return bytes(&v, 4); }
    raw_gguf &u64(uint64_t v) { return bytes(&v, 8); }
    raw_gguf &i64(int64_t v) { return bytes(&v, 8); }
    raw_gguf &f32(float v) { return bytes(&v, 4); }
    raw_gguf &str(const std::string &s) {
        u64(s.size());
        return bytes(s.data(), s.size());
    }
    // magic, version, tensor count, kv count
    raw_gguf &header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3, const char *magic = "GGUF") {
        bytes(magic, 4);
        u32(version);
        u64(n_tensors);
        return u64(n_kv);
    }
    raw_gguf &kv_u32(const std::string &key, uint32_t v) { return str(key).u32(4).u32(v); }
    raw_gguf &kv_string(const std::string &key, const std::string &v) { return str(key).u32(8).str(v); }
    // name, n_dims, ne..., type, offset
    raw_gguf &tensor_info(const std::string &name, std::vector<int64_t> ne, int32_t type, uint64_t offset) {
        str(name).u32(uint32_t(ne.size()));
        for (int64_t n : ne) i64(n);
        return i32(type).u64(offset);
    }
    raw_gguf &pad_to(size_t alignment) {
        while (data.size() % alignment) data.push_back(0);
        return *this;
    }
    raw_gguf &zeros(size_t n) {
        data.insert(data.end(), n, 0);
        return *this;
    }
    std::vector<uint8_t> data;
};

// A fresh directory under the system temp dir, removed at scope exit.
class temp_dir {
  public:
    temp_dir() {
        static std::mt19937_64 rng(std::random_device{}());
        path_ = std::filesystem::temp_directory_path() /
                ("weft-gguf-test-" + std::to_string(::getpid()) + "-" + std::to_string(rng()));
        std::filesystem::create_directories(path_);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::filesystem::path &path() const { return path_; }
    std::string file(const std::string &name) const { return (path_ / name).string(); }

  private:
    std::filesystem::path path_;
};

inline std::vector<uint8_t> read_file_bytes(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_file_bytes(const std::string &path, const std::vector<uint8_t> &bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
}

}  // namespace weft::test
