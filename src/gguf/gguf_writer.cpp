// src/gguf/gguf_writer.cpp — GGUF writing: metadata and aligned tensors to a temp file, renamed on success.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "gguf/gguf_format.h"
#include "weft/core/checked.h"
#include "weft/core/safe_file.h"
#include "weft/gguf/gguf.h"

namespace weft {

struct gguf_writer::impl {
    struct tensor_entry {
        std::string name;
        dtype type = dtype::f32;
        uint32_t n_dims = 0;
        int64_t ne[4] = {1, 1, 1, 1};
        size_t nbytes = 0;
        const void *data = nullptr;  // or:
        tensor_fill_fn fill;
    };
    std::vector<gguf_kv> kvs;
    std::vector<tensor_entry> tensors;

    void set(gguf_kv kv) {
        for (auto &existing : kvs) {
            if (existing.key == kv.key) {
                existing = std::move(kv);
                return;
            }
        }
        kvs.push_back(std::move(kv));
    }

    template <class T>
    void set_scalar(const std::string &key, gguf_type t, T v) {
        gguf_kv kv;
        kv.key = key;
        kv.type = t;
        kv.raw.resize(sizeof v);
        std::memcpy(kv.raw.data(), &v, sizeof v);
        set(std::move(kv));
    }

    tensor_entry &add(const std::string &name, dtype t, std::span<const int64_t> ne) {
        for (const auto &e : tensors)
            if (e.name == name) throw gguf_error("gguf_writer: duplicate tensor '" + name + "'");
        if (ne.empty() || ne.size() > 4)
            throw gguf_error("gguf_writer: tensor '" + name + "' has " + std::to_string(ne.size()) +
                             " dimensions, expected 1 to 4");
        if (!type_is_known(int32_t(t)))
            throw gguf_error("gguf_writer: tensor '" + name + "' has unknown type id " +
                             std::to_string(int32_t(t)));
        tensor_entry e;
        e.name = name;
        e.type = t;
        e.n_dims = uint32_t(ne.size());
        for (size_t d = 0; d < ne.size(); ++d) {
            if (ne[d] <= 0)
                throw gguf_error("gguf_writer: tensor '" + name + "' ne[" + std::to_string(d) +
                                 "] = " + std::to_string(ne[d]) + " is not positive");
            e.ne[d] = ne[d];
        }
        const auto &traits = type_traits(t);
        if (e.ne[0] % traits.block_size != 0)
            throw gguf_error("gguf_writer: tensor '" + name + "' ne[0] = " + std::to_string(e.ne[0]) +
                             " is not a multiple of the " + type_name(t) + " block size " +
                             std::to_string(traits.block_size));
        size_t rows = 1;
        for (int d = 1; d < 4; ++d) {
            if (mul_overflows(rows, size_t(e.ne[d]), rows))
                throw gguf_error("gguf_writer: tensor '" + name + "' is too large");
        }
        if (mul_overflows(rows, row_size(t, e.ne[0]), e.nbytes))
            throw gguf_error("gguf_writer: tensor '" + name + "' is too large");
        tensors.push_back(std::move(e));
        return tensors.back();
    }

    size_t alignment() const {
        for (const auto &kv : kvs) {
            if (kv.key != "general.alignment") continue;
            if (kv.type != gguf_type::u32)
                throw gguf_error("gguf_writer: general.alignment has type " +
                                 std::string(gguf_type_name(kv.type)) + ", expected u32");
            uint32_t a;
            std::memcpy(&a, kv.raw.data(), 4);
            if (a == 0 || (a & (a - 1)) != 0)
                throw gguf_error("gguf_writer: general.alignment " + std::to_string(a) +
                                 " is not a non-zero power of two");
            return a;
        }
        return gguf_default_alignment;
    }
};

namespace {

// The header (magic to the end of the tensor infos) is assembled in memory, then written at once.
class header_buffer {
  public:
    // not inlined: GCC 12 reports a false -Wstringop-overflow in the vector insert when it is
    [[gnu::noinline]] void bytes(const void *p, size_t n) {
        const auto *b = static_cast<const uint8_t *>(p);
        out_.insert(out_.end(), b, b + n);
    }
    template <class T>
    void scalar(T v) {
        bytes(&v, sizeof v);
    }
    void string(const std::string &s) {
        scalar<uint64_t>(s.size());
        bytes(s.data(), s.size());
    }
    const std::vector<uint8_t> &data() const { return out_; }

  private:
    std::vector<uint8_t> out_;
};

void check_kv(const gguf_kv &kv) {
    const std::string what = "gguf_writer: metadata '" + kv.key + "'";
    if (!gguf_type_is_valid(uint32_t(kv.type))) throw gguf_error(what + ": unknown value type");
    const gguf_type elem = kv.element_type();
    if (kv.is_array() && (!gguf_type_is_valid(uint32_t(elem)) || elem == gguf_type::array))
        throw gguf_error(what + ": arrays of " + gguf_type_name(elem) + " are not supported");
    const uint64_t n = kv.is_array() ? kv.n : 1;
    if (elem == gguf_type::string) {
        if (kv.strings.size() != n)
            throw gguf_error(what + ": holds " + std::to_string(kv.strings.size()) + " strings, expected " +
                             std::to_string(n));
    } else if (kv.raw.size() != n * gguf_type_size(elem)) {
        throw gguf_error(what + ": holds " + std::to_string(kv.raw.size()) + " bytes, expected " +
                         std::to_string(n * gguf_type_size(elem)));
    }
}

}  // namespace

gguf_writer::gguf_writer() : impl_(std::make_unique<impl>()) {}
gguf_writer::~gguf_writer() = default;

void gguf_writer::set_u8(const std::string &key, uint8_t v) {
    impl_->set_scalar(key, gguf_type::u8, v);
}
void gguf_writer::set_i8(const std::string &key, int8_t v) {
    impl_->set_scalar(key, gguf_type::i8, v);
}
void gguf_writer::set_u16(const std::string &key, uint16_t v) {
    impl_->set_scalar(key, gguf_type::u16, v);
}
void gguf_writer::set_i16(const std::string &key, int16_t v) {
    impl_->set_scalar(key, gguf_type::i16, v);
}
void gguf_writer::set_u32(const std::string &key, uint32_t v) {
    impl_->set_scalar(key, gguf_type::u32, v);
}
void gguf_writer::set_i32(const std::string &key, int32_t v) {
    impl_->set_scalar(key, gguf_type::i32, v);
}
void gguf_writer::set_u64(const std::string &key, uint64_t v) {
    impl_->set_scalar(key, gguf_type::u64, v);
}
void gguf_writer::set_i64(const std::string &key, int64_t v) {
    impl_->set_scalar(key, gguf_type::i64, v);
}
void gguf_writer::set_f32(const std::string &key, float v) {
    impl_->set_scalar(key, gguf_type::f32, v);
}
void gguf_writer::set_f64(const std::string &key, double v) {
    impl_->set_scalar(key, gguf_type::f64, v);
}
void gguf_writer::set_bool(const std::string &key, bool v) {
    impl_->set_scalar(key, gguf_type::boolean, uint8_t(v));
}

void gguf_writer::set_string(const std::string &key, const std::string &v) {
    gguf_kv kv;
    kv.key = key;
    kv.type = gguf_type::string;
    kv.strings = {v};
    impl_->set(std::move(kv));
}

void gguf_writer::set_array(const std::string &key, gguf_type elem, const void *data, size_t n) {
    const size_t esize = gguf_type_size(elem);
    if (esize == 0)
        throw gguf_error("gguf_writer: metadata '" + key +
                         "': set_array takes numeric or bool elements, not " + gguf_type_name(elem));
    gguf_kv kv;
    kv.key = key;
    kv.type = gguf_type::array;
    kv.array_type = elem;
    kv.n = n;
    kv.raw.resize(n * esize);
    if (n) std::memcpy(kv.raw.data(), data, n * esize);
    impl_->set(std::move(kv));
}

void gguf_writer::set_string_array(const std::string &key, const std::vector<std::string> &v) {
    gguf_kv kv;
    kv.key = key;
    kv.type = gguf_type::array;
    kv.array_type = gguf_type::string;
    kv.n = v.size();
    kv.strings = v;
    impl_->set(std::move(kv));
}

void gguf_writer::set_kv(const gguf_kv &kv) {
    check_kv(kv);
    impl_->set(kv);
}

void gguf_writer::remove(const std::string &key) {
    auto &kvs = impl_->kvs;
    kvs.erase(std::remove_if(kvs.begin(), kvs.end(), [&](const gguf_kv &kv) { return kv.key == key; }),
              kvs.end());
}

void gguf_writer::add_tensor(const std::string &name, dtype t, std::span<const int64_t> ne, const void *data,
                             size_t nbytes) {
    auto &e = impl_->add(name, t, ne);
    if (nbytes != e.nbytes) {
        const std::string expected = std::to_string(e.nbytes);
        impl_->tensors.pop_back();
        throw gguf_error("gguf_writer: tensor '" + name + "' (" + type_name(t) + ") has " +
                         std::to_string(nbytes) + " bytes, its type and shape need " + expected);
    }
    if (!data && nbytes) {
        impl_->tensors.pop_back();
        throw gguf_error("gguf_writer: tensor '" + name + "' has no data");
    }
    e.data = data;
}

void gguf_writer::add_tensor_fill(const std::string &name, dtype t, std::span<const int64_t> ne,
                                  tensor_fill_fn fill) {
    if (!fill) throw gguf_error("gguf_writer: tensor '" + name + "' has no fill function");
    impl_->add(name, t, ne).fill = std::move(fill);
}

void gguf_writer::set_alignment(size_t a) {
    if (a == 0 || (a & (a - 1)) != 0 || a > UINT32_MAX)
        throw gguf_error("gguf_writer: alignment " + std::to_string(a) +
                         " is not a power of two that fits in u32");
    if (a == gguf_default_alignment)
        remove("general.alignment");
    else
        set_u32("general.alignment", uint32_t(a));
}

// The header bytes (magic to the end of the tensor infos) and each tensor's offset in the data section.
struct gguf_writer::layout {
    std::vector<uint8_t> header;
    std::vector<size_t> offsets;
    size_t alignment = gguf_default_alignment;
    size_t data_end = 0;  // the end of the last tensor in the data section
};

gguf_writer::layout gguf_writer::plan() const {
    layout l;
    l.alignment = impl_->alignment();
    for (const auto &kv : impl_->kvs) check_kv(kv);

    header_buffer h;
    h.bytes("GGUF", 4);
    h.scalar<uint32_t>(gguf_version_current);
    h.scalar<uint64_t>(impl_->tensors.size());
    h.scalar<uint64_t>(impl_->kvs.size());
    for (const auto &kv : impl_->kvs) {
        h.string(kv.key);
        h.scalar<uint32_t>(uint32_t(kv.type));
        if (kv.is_array()) {
            h.scalar<uint32_t>(uint32_t(kv.array_type));
            h.scalar<uint64_t>(kv.n);
        }
        if (kv.element_type() == gguf_type::string) {
            for (const auto &s : kv.strings) h.string(s);
        } else {
            h.bytes(kv.raw.data(), kv.raw.size());
        }
    }
    size_t offset = 0;
    for (const auto &t : impl_->tensors) {
        offset = align_up(offset, l.alignment);
        l.offsets.push_back(offset);
        h.string(t.name);
        h.scalar<uint32_t>(t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; ++d) h.scalar<int64_t>(t.ne[d]);
        h.scalar<int32_t>(int32_t(t.type));
        h.scalar<uint64_t>(offset);
        offset += t.nbytes;
    }
    l.data_end = offset;
    l.header = h.data();
    return l;
}

uint64_t gguf_writer::file_size() const {
    const layout l = plan();
    return align_up(l.header.size(), l.alignment) + align_up(l.data_end, l.alignment);
}

void gguf_writer::write(const std::string &path) const {
    // a temporary file beside path, renamed over it when complete; its errors are this writer's
    std::optional<output_file> out;
    try {
        out.emplace(path);
    } catch (const error &e) {
        throw gguf_error(e.what());
    }
    write_to(*out);
    try {
        out->commit();
    } catch (const gguf_error &) {
        throw;
    } catch (const error &e) {  // a failed flush or rename
        throw gguf_error(e.what());
    }
}

void gguf_writer::write_to(output_file &out) const {
    const layout l = plan();
    const size_t alignment = l.alignment;
    uint8_t *scratch = nullptr;  // a fill tensor's bytes
    size_t scratch_size = 0;
    auto release_scratch = [&] {
        if (scratch) ::operator delete(scratch, std::align_val_t(64));
        scratch = nullptr;
        scratch_size = 0;
    };
    try {
        size_t pos = 0;
        auto put = [&](const void *p, size_t n) {
            if (n) out.write(p, n);
            pos += n;
        };
        auto pad_to = [&](size_t target) {
            if (pos >= target) return;
            out.write_zeros(target - pos);
            pos = target;
        };
        put(l.header.data(), l.header.size());
        pad_to(align_up(pos, alignment));
        const size_t data_start = pos;
        for (size_t i = 0; i < impl_->tensors.size(); ++i) {
            const auto &t = impl_->tensors[i];
            pad_to(data_start + l.offsets[i]);
            if (t.fill) {
                if (scratch_size < t.nbytes) {
                    release_scratch();
                    scratch = static_cast<uint8_t *>(
                        ::operator new(std::max<size_t>(t.nbytes, 1), std::align_val_t(64)));
                    scratch_size = t.nbytes;
                }
                t.fill(scratch, t.nbytes);
                put(scratch, t.nbytes);
            } else {
                put(t.data, t.nbytes);
            }
        }
        // The established writer pads the file to the alignment after the last tensor too.
        pad_to(align_up(pos, alignment));
        release_scratch();
    } catch (const gguf_error &) {
        release_scratch();
        throw;
    } catch (const error &e) {  // a failed write
        release_scratch();
        throw gguf_error(e.what());
    } catch (...) {
        release_scratch();
        throw;
    }
}

}  // namespace weft
