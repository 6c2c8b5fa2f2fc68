// src/quant/imatrix.cpp — the legacy importance-matrix file: read with bounds checks, written
// through a temporary file.
#include "weft/quant/imatrix.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "weft/core/error.h"
#include "weft/core/safe_file.h"

namespace weft {

const std::vector<float> *importance_matrix::importance(const std::string &name) const {
    const auto e = entries.find(name);
    if (e == entries.end()) return nullptr;
    auto &n = normalized_[name];
    if (n.empty()) {
        n = e->second.values;
        if (e->second.ncall > 0)
            for (float &v : n) v /= float(e->second.ncall);
    }
    return &n;
}

namespace {

class reader {
  public:
    explicit reader(const std::string &path) : path_(path), in_(path, std::ios::binary) {
        if (!in_) throw error(path + ": cannot open");
        std::error_code ec;
        size_ = std::filesystem::file_size(path, ec);
        if (ec) throw error(path + ": cannot read its size");
    }
    int32_t i32(const char *what) {
        int32_t v = 0;
        bytes(&v, sizeof v, what);
        return v;
    }
    void bytes(void *dst, uint64_t n, const char *what) {
        if (n > remaining()) fail(std::string(what) + " runs past the end of the file");
        in_.read(static_cast<char *>(dst), std::streamsize(n));
        if (!in_) fail(std::string("truncated at ") + what);
        pos_ += n;
    }
    uint64_t remaining() const { return size_ - pos_; }
    [[noreturn]] void fail(const std::string &what) const {
        throw error(path_ + ": imatrix file, offset " + std::to_string(pos_) + ": " + what);
    }

  private:
    std::string path_;
    std::ifstream in_;
    uint64_t size_ = 0, pos_ = 0;
};

}  // namespace

importance_matrix read_imatrix(const std::string &path) {
    reader r(path);
    importance_matrix m;
    const int32_t n_entries = r.i32("the entry count");
    // every entry takes at least 12 bytes (name length, ncall, nval)
    if (n_entries < 0 || uint64_t(n_entries) * 12 > r.remaining())
        r.fail("entry count " + std::to_string(n_entries) + " does not fit the file");
    for (int32_t e = 0; e < n_entries; ++e) {
        const int32_t len = r.i32("a name length");
        if (len <= 0 || len > 4096)
            r.fail("entry " + std::to_string(e) + ": name length " + std::to_string(len));
        std::string name(size_t(len), '\0');
        r.bytes(name.data(), uint64_t(len), "a name");
        imatrix_entry entry;
        entry.ncall = r.i32("ncall");
        const int32_t nval = r.i32("nval");
        if (entry.ncall < 0) r.fail("entry '" + name + "': negative ncall");
        if (nval < 0 || uint64_t(nval) * sizeof(float) > r.remaining())
            r.fail("entry '" + name + "': " + std::to_string(nval) + " values do not fit the file");
        entry.values.resize(size_t(nval));
        r.bytes(entry.values.data(), uint64_t(nval) * sizeof(float), "values");
        for (float v : entry.values)
            if (!(v >= 0.0f) || v == std::numeric_limits<float>::infinity())
                r.fail("entry '" + name + "': a value that is negative, infinite or NaN");
        if (!m.entries.emplace(std::move(name), std::move(entry)).second) r.fail("an entry name repeats");
    }
    if (r.remaining() >= 4) {  // the optional trailer: chunks, then the dataset's name
        m.chunks = r.i32("the chunk count");
        if (r.remaining() >= 4) {
            const int32_t len = r.i32("the dataset name length");
            if (len < 0 || uint64_t(len) > r.remaining())
                r.fail("dataset name length " + std::to_string(len));
            m.dataset.resize(size_t(len));
            r.bytes(m.dataset.data(), uint64_t(len), "the dataset name");
        }
    }
    return m;
}

void write_imatrix(const std::string &path, const importance_matrix &m) {
    output_file out(path);
    auto i32 = [&out](int32_t v) { out.write(&v, sizeof v); };
    i32(int32_t(m.entries.size()));
    for (const auto &[name, e] : m.entries) {
        i32(int32_t(name.size()));
        out.write(name);
        i32(e.ncall);
        i32(int32_t(e.values.size()));
        out.write(e.values.data(), e.values.size() * sizeof(float));
    }
    i32(m.chunks);
    i32(int32_t(m.dataset.size()));
    out.write(m.dataset);
    out.commit();
}

}  // namespace weft
