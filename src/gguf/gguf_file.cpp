// src/gguf/gguf_file.cpp — GGUF reading: validated header parsing, mmap/read/header-only storage, getters.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <unordered_set>

#include "gguf/gguf_format.h"
#include "weft/core/checked.h"
#include "weft/gguf/gguf.h"

namespace weft {

// ---------------------------------------------------------------------------------------------
// storage: what keeps the bytes of the data section alive

struct gguf_file::storage {
    void *mapping = nullptr;  // mmap of the whole file
    size_t mapping_size = 0;
    uint8_t *buffer = nullptr;  // plain-read data section or from_memory copy (64-byte aligned)

    ~storage() {
        if (mapping) munmap(mapping, mapping_size);
        if (buffer) ::operator delete(buffer, std::align_val_t(64));
    }
};

namespace {

constexpr size_t buffer_alignment = 64;
// Counts were checked against the bytes left, but an entry in memory is larger than its smallest
// encoding: reserve at most this many up front and let real entries grow the vectors.
constexpr uint64_t max_reserve = 1 << 16;

uint8_t *allocate_buffer(size_t n) {
    return static_cast<uint8_t *>(::operator new(std::max<size_t>(n, 1), std::align_val_t(buffer_alignment)));
}

std::string errno_text() {
    return std::strerror(errno);
}

// A closed-on-scope file descriptor.
struct fd_guard {
    int fd = -1;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};

// Where the parser takes its bytes from: a span in memory (mmap, from_memory) or a file read
// through stdio (header-only and plain-read modes). Every read is checked against the bytes left,
// so lengths from the file are validated before anything is allocated for them.
class byte_source {
  public:
    byte_source(const std::string &name, const uint8_t *mem, uint64_t size)
        : name_(name), mem_(mem), size_(size) {}
    byte_source(const std::string &name, FILE *f, uint64_t size) : name_(name), file_(f), size_(size) {}

    uint64_t pos() const { return pos_; }
    uint64_t size() const { return size_; }
    uint64_t remaining() const { return size_ - pos_; }

    [[noreturn]] void fail(const std::string &what) const { throw gguf_error(name_ + ": " + what); }

    void read(void *dst, uint64_t n, const std::string &what) {
        if (n > remaining())
            fail("truncated " + what + " at offset " + std::to_string(pos_) + ": needs " + std::to_string(n) +
                 " bytes, " + std::to_string(remaining()) + " left in the file (" + std::to_string(size_) +
                 " bytes)");
        if (mem_) {
            if (n) std::memcpy(dst, mem_ + pos_, size_t(n));
        } else if (n && std::fread(dst, 1, size_t(n), file_) != size_t(n)) {
            fail("read error at offset " + std::to_string(pos_) + " while reading " + what + ": " +
                 (std::ferror(file_) ? errno_text() : std::string("unexpected end of file")));
        }
        pos_ += n;
    }

    template <class T>
    T read_scalar(const std::string &what) {
        T v;
        read(&v, sizeof v, what);
        return v;
    }

    std::string read_string(const std::string &what) {
        const uint64_t n = read_scalar<uint64_t>(what + " length");
        if (n > remaining())
            fail(what + " length " + std::to_string(n) + " at offset " + std::to_string(pos_ - 8) +
                 " runs past the end of the file (" + std::to_string(remaining()) +
                 " bytes left): truncated or corrupt");
        std::string s(size_t(n), '\0');
        read(s.data(), n, what);
        return s;
    }

  private:
    std::string name_;
    const uint8_t *mem_ = nullptr;
    FILE *file_ = nullptr;
    uint64_t size_ = 0;
    uint64_t pos_ = 0;
};

// Reads one metadata value of type `t` into kv (scalars: one element; arrays: header then elements).
void read_value(byte_source &src, gguf_kv &kv, const std::string &what) {
    if (kv.type == gguf_type::array) {
        const auto elem_raw = src.read_scalar<uint32_t>(what + " array element type");
        if (!gguf_type_is_valid(elem_raw))
            src.fail(what + ": unknown array element type " + std::to_string(elem_raw));
        kv.array_type = gguf_type(elem_raw);
        if (kv.array_type == gguf_type::array) src.fail(what + ": nested arrays are not supported");
        kv.n = src.read_scalar<uint64_t>(what + " array length");
        if (kv.array_type == gguf_type::string) {
            // every string takes at least its 8-byte length
            if (kv.n > src.remaining() / 8)
                src.fail(what + ": array of " + std::to_string(kv.n) + " strings cannot fit in the " +
                         std::to_string(src.remaining()) + " bytes left: truncated or corrupt");
            kv.strings.reserve(size_t(std::min<uint64_t>(kv.n, max_reserve)));
            for (uint64_t i = 0; i < kv.n; ++i)
                kv.strings.push_back(src.read_string(what + " element " + std::to_string(i)));
        } else {
            const size_t esize = gguf_type_size(kv.array_type);
            uint64_t bytes = 0;
            if (mul_overflows(kv.n, esize, bytes) || bytes > src.remaining())
                src.fail(what + ": array of " + std::to_string(kv.n) + " " + gguf_type_name(kv.array_type) +
                         " runs past the end of the file (" + std::to_string(src.remaining()) +
                         " bytes left): truncated or corrupt");
            kv.raw.resize(size_t(bytes));
            src.read(kv.raw.data(), bytes, what + " array data");
        }
        return;
    }
    kv.n = 1;
    if (kv.type == gguf_type::string) {
        kv.strings.push_back(src.read_string(what));
        return;
    }
    kv.raw.resize(gguf_type_size(kv.type));
    src.read(kv.raw.data(), kv.raw.size(), what);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// parsing

// Parses header, metadata and tensor infos from `src`, validating everything against the file size.
// Fills kvs_, tensors_, version_, alignment_, data_offset_, file_size_.
static void parse_header(byte_source &src, uint32_t &version, size_t &alignment, uint64_t &data_offset,
                         std::vector<gguf_kv> &kvs, std::vector<gguf_tensor_info> &tensors) {
    char magic[4];
    if (src.size() < 4)
        src.fail("truncated header: the file has " + std::to_string(src.size()) + " bytes, not a GGUF file");
    src.read(magic, 4, "magic");
    if (std::memcmp(magic, "GGUF", 4) != 0) {
        std::string shown;
        for (char c : magic) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
        src.fail("bad magic '" + shown + "': not a GGUF file");
    }
    version = src.read_scalar<uint32_t>("header (version)");
    if (version == 1)
        src.fail("GGUF version 1 is not supported (only versions 2 and 3); re-convert the model");
    if (version == 0x02000000u || version == 0x03000000u)
        src.fail("big-endian GGUF files are not supported (version field " + std::to_string(version) + ")");
    if (version != 2 && version != 3)
        src.fail("unknown GGUF version " + std::to_string(version) + " (supported: 2 and 3)");
    const uint64_t n_tensors = src.read_scalar<uint64_t>("header (tensor count)");
    const uint64_t n_kv = src.read_scalar<uint64_t>("header (metadata count)");

    // A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
    // 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset). Checking the counts against the bytes
    // left keeps a hostile count from reserving gigabytes.
    if (n_kv > src.remaining() / gguf_min_kv_bytes)
        src.fail("metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                 std::to_string(src.remaining()) + " bytes left: truncated or corrupt header");
    if (n_tensors > src.remaining() / gguf_min_tensor_info_bytes)
        src.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                 std::to_string(src.remaining()) + " bytes left: truncated or corrupt header");

    kvs.clear();
    kvs.reserve(size_t(std::min<uint64_t>(n_kv, max_reserve)));
    std::unordered_set<std::string> keys;
    for (uint64_t i = 0; i < n_kv; ++i) {
        gguf_kv kv;
        kv.key = src.read_string("metadata key " + std::to_string(i));
        const std::string what = "metadata " + quoted(kv.key);
        if (!keys.insert(kv.key).second) src.fail("duplicate metadata key " + quoted(kv.key));
        const auto type_raw = src.read_scalar<uint32_t>(what + " type");
        if (!gguf_type_is_valid(type_raw))
            src.fail(what + ": unknown metadata value type " + std::to_string(type_raw));
        kv.type = gguf_type(type_raw);
        read_value(src, kv, what);
        kvs.push_back(std::move(kv));
    }

    alignment = gguf_default_alignment;
    for (const auto &kv : kvs) {
        if (kv.key != "general.alignment") continue;
        if (kv.type != gguf_type::u32)
            src.fail("general.alignment has type " + std::string(gguf_type_name(kv.type)) + ", expected u32");
        uint32_t a;
        std::memcpy(&a, kv.raw.data(), 4);
        if (a == 0 || (a & (a - 1)) != 0)
            src.fail("general.alignment " + std::to_string(a) + " is not a non-zero power of two");
        alignment = a;
    }

    tensors.clear();
    tensors.reserve(size_t(std::min<uint64_t>(n_tensors, max_reserve)));
    std::unordered_set<std::string> names;
    for (uint64_t i = 0; i < n_tensors; ++i) {
        gguf_tensor_info ti;
        ti.name = src.read_string("tensor info " + std::to_string(i) + " name");
        const std::string what = "tensor " + quoted(ti.name);
        if (!names.insert(ti.name).second) src.fail("duplicate tensor name " + quoted(ti.name));
        ti.n_dims = src.read_scalar<uint32_t>(what + " n_dims");
        if (ti.n_dims > 4)
            src.fail(what + ": n_dims " + std::to_string(ti.n_dims) + " exceeds the maximum of 4");
        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < ti.n_dims; ++d) {
            const auto ne = src.read_scalar<int64_t>(what + " ne[" + std::to_string(d) + "]");
            if (ne <= 0)
                src.fail(what + ": ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                         " is not positive");
            ti.ne[d] = ne;
            if (mul_overflows(n_elements, uint64_t(ne), n_elements) ||
                n_elements > uint64_t(std::numeric_limits<int64_t>::max()))
                src.fail(what + ": element count overflows int64 (shape " + gguf_shape_string(ti) + ")");
        }
        const auto type_raw = src.read_scalar<int32_t>(what + " type");
        if (!type_is_known(type_raw)) src.fail(what + ": unknown type id " + std::to_string(type_raw));
        ti.type = dtype(type_raw);
        const auto &traits = type_traits(ti.type);
        if (ti.ne[0] % traits.block_size != 0)
            src.fail(what + ": ne[0] = " + std::to_string(ti.ne[0]) + " is not a multiple of the " +
                     type_name(ti.type) + " block size " + std::to_string(traits.block_size));
        uint64_t nbytes = 0;
        if (mul_overflows(n_elements / uint64_t(traits.block_size), traits.type_size, nbytes) ||
            nbytes > uint64_t(std::numeric_limits<size_t>::max()))
            src.fail(what + ": byte size overflows (shape " + gguf_shape_string(ti) + ", type " +
                     type_name(ti.type) + ")");
        ti.nbytes = size_t(nbytes);
        ti.offset = src.read_scalar<uint64_t>(what + " offset");
        if (ti.offset % alignment != 0)
            src.fail(what + ": data offset " + std::to_string(ti.offset) +
                     " is not a multiple of the alignment " + std::to_string(alignment));
        tensors.push_back(std::move(ti));
    }

    // The data section starts at the next multiple of the alignment after the tensor infos.
    const uint64_t end_of_infos = src.pos();
    data_offset = end_of_infos + (alignment - end_of_infos % alignment) % alignment;
    const uint64_t file_size = src.size();

    std::vector<const gguf_tensor_info *> by_offset;
    by_offset.reserve(tensors.size());
    for (const auto &ti : tensors) {
        uint64_t end_in_data = 0, end = 0;
        const bool overflows = add_overflows(ti.offset, uint64_t(ti.nbytes), end_in_data) ||
                               add_overflows(end_in_data, data_offset, end);
        if (overflows || end > file_size) {
            const std::string range =
                overflows
                    ? "at offset " + std::to_string(ti.offset) + " (" + std::to_string(ti.nbytes) + " bytes)"
                    : "[" + std::to_string(ti.offset) + ", " + std::to_string(end_in_data) + ")";
            src.fail("tensor " + quoted(ti.name) + ": data " + range + " of the data section at " +
                     std::to_string(data_offset) + " is past the end of the file (" +
                     std::to_string(file_size) + " bytes): truncated data or bad offset");
        }
        by_offset.push_back(&ti);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const auto *a, const auto *b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const auto *prev = by_offset[i - 1];
        const auto *cur = by_offset[i];
        if (prev->offset + prev->nbytes > cur->offset)
            src.fail("tensor " + quoted(cur->name) + " at offset " + std::to_string(cur->offset) +
                     " overlaps tensor " + quoted(prev->name) + " [" + std::to_string(prev->offset) + ", " +
                     std::to_string(prev->offset + prev->nbytes) + ")");
    }
}

void gguf_file::parse(const uint8_t *bytes, size_t size, bool /*header_only_in_bytes*/) {
    byte_source src(path_, bytes, size);
    parse_header(src, version_, alignment_, data_offset_, kvs_, tensors_);
    file_size_ = size;
    build_index();
}

gguf_file::~gguf_file() = default;

std::unique_ptr<gguf_file> gguf_file::from_memory(const void *data, size_t size, std::string name) {
    std::unique_ptr<gguf_file> f(new gguf_file());
    f->path_ = std::move(name);
    const auto *bytes = static_cast<const uint8_t *>(data);
    f->parse(bytes, size, false);
    // Keep a private copy of the data section so the result does not depend on the caller's buffer.
    f->storage_ = std::make_unique<storage>();
    f->data_size_ = f->data_offset_ < size ? size_t(size - f->data_offset_) : 0;
    f->storage_->buffer = allocate_buffer(f->data_size_);
    if (f->data_size_) std::memcpy(f->storage_->buffer, bytes + f->data_offset_, f->data_size_);
    f->data_ = f->storage_->buffer;
    return f;
}

std::unique_ptr<gguf_file> gguf_file::open(const std::string &path, const gguf_open_options &opt) {
    std::unique_ptr<gguf_file> f(new gguf_file());
    f->path_ = path;

    // O_NONBLOCK: a FIFO given by mistake fails the regular-file check at once instead of waiting
    // in open for a writer
    fd_guard fd{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
    if (fd.fd < 0) throw gguf_error(path + ": cannot open: " + errno_text());
    struct stat st {};
    if (::fstat(fd.fd, &st) != 0) throw gguf_error(path + ": cannot stat: " + errno_text());
    if (!S_ISREG(st.st_mode)) throw gguf_error(path + ": not a regular file");
    const uint64_t size = uint64_t(st.st_size);
    f->file_size_ = size;

    if (opt.load_data && opt.use_mmap && size > 0) {
        void *map = ::mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, fd.fd, 0);
        if (map != MAP_FAILED) {
            f->storage_ = std::make_unique<storage>();
            f->storage_->mapping = map;
            f->storage_->mapping_size = size_t(size);
            f->parse(static_cast<const uint8_t *>(map), size_t(size), false);
            f->data_size_ = f->data_offset_ < size ? size_t(size - f->data_offset_) : 0;
            f->data_ = static_cast<const uint8_t *>(map) + std::min<uint64_t>(f->data_offset_, size);
            return f;
        }
        // mmap can fail on some file systems: fall through to plain reads
    }

    // Header-only and plain-read modes parse through stdio, reading only what the header needs.
    FILE *file = ::fdopen(fd.fd, "rb");
    if (!file) throw gguf_error(path + ": cannot open: " + errno_text());
    fd.fd = -1;  // owned by `file` now
    struct file_closer {
        FILE *f;
        ~file_closer() { std::fclose(f); }
    } closer{file};
    std::setvbuf(file, nullptr, _IOFBF, 1 << 20);

    byte_source src(path, file, size);
    parse_header(src, f->version_, f->alignment_, f->data_offset_, f->kvs_, f->tensors_);
    f->build_index();
    if (!opt.load_data) return f;

    f->data_size_ = f->data_offset_ < size ? size_t(size - f->data_offset_) : 0;
    f->storage_ = std::make_unique<storage>();
    f->storage_->buffer = allocate_buffer(f->data_size_);
    if (f->data_size_) {
        if (::fseeko(file, off_t(f->data_offset_), SEEK_SET) != 0)
            throw gguf_error(path + ": cannot seek to the data section: " + errno_text());
        if (std::fread(f->storage_->buffer, 1, f->data_size_, file) != f->data_size_)
            throw gguf_error(path + ": truncated data section: could not read " +
                             std::to_string(f->data_size_) + " bytes at offset " +
                             std::to_string(f->data_offset_));
    }
    f->data_ = f->storage_->buffer;
    return f;
}

// ---------------------------------------------------------------------------------------------
// lookups and typed getters

void gguf_file::build_index() {
    kv_index_.clear();
    tensor_index_.clear();
    kv_index_.reserve(kvs_.size());
    tensor_index_.reserve(tensors_.size());
    for (size_t i = 0; i < kvs_.size(); ++i) kv_index_.emplace(kvs_[i].key, i);
    for (size_t i = 0; i < tensors_.size(); ++i) tensor_index_.emplace(tensors_[i].name, i);
}

const gguf_kv *gguf_file::find(std::string_view key) const {
    const auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const gguf_tensor_info *gguf_file::find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t *gguf_file::tensor_data(const gguf_tensor_info &t) const {
    if (!data_) return nullptr;
    WEFT_ASSERT(t.offset + t.nbytes <= data_size_);
    return data_ + t.offset;
}

void gguf_file::release_pages(const void *p, size_t n) const {
    if (!storage_ || !storage_->mapping || n == 0) return;
    const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
    const auto begin = uintptr_t(p), end = begin + n;
    const auto map_begin = uintptr_t(storage_->mapping), map_end = map_begin + storage_->mapping_size;
    if (begin < map_begin || end > map_end) return;
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (first < last) ::madvise(reinterpret_cast<void *>(first), last - first, MADV_DONTNEED);
}

const uint8_t *gguf_file::data_base() const {
    return data_;
}
size_t gguf_file::data_size() const {
    return data_ ? data_size_ : 0;
}

namespace {

[[noreturn]] void wrong_type(const std::string &path, const gguf_kv &kv, const char *wanted) {
    std::string found = gguf_type_name(kv.type);
    if (kv.is_array()) found = "array of " + std::string(gguf_type_name(kv.array_type));
    throw gguf_error(path + ": metadata key " + quoted(kv.key) + " has type " + found + ", wanted " + wanted);
}

bool is_integer(gguf_type t) {
    switch (t) {
        case gguf_type::u8:
        case gguf_type::i8:
        case gguf_type::u16:
        case gguf_type::i16:
        case gguf_type::u32:
        case gguf_type::i32:
        case gguf_type::u64:
        case gguf_type::i64:
            return true;
        default:
            return false;
    }
}
bool is_float(gguf_type t) {
    return t == gguf_type::f32 || t == gguf_type::f64;
}

// Element i of a numeric value, widened. Signed types go through int64, unsigned through uint64.
template <class T>
T load(const uint8_t *p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

struct wide_int {
    bool negative = false;
    uint64_t magnitude_or_value = 0;  // unsigned value, or the int64 bit pattern when signed
    bool is_signed = false;
};

wide_int element_int(const gguf_kv &kv, uint64_t i) {
    const gguf_type t = kv.element_type();
    const uint8_t *p = kv.raw.data() + i * gguf_type_size(t);
    wide_int w;
    auto set_signed = [&](int64_t v) {
        w.is_signed = true;
        w.negative = v < 0;
        w.magnitude_or_value = uint64_t(v);
    };
    switch (t) {
        case gguf_type::u8:
            w.magnitude_or_value = load<uint8_t>(p);
            break;
        case gguf_type::u16:
            w.magnitude_or_value = load<uint16_t>(p);
            break;
        case gguf_type::u32:
            w.magnitude_or_value = load<uint32_t>(p);
            break;
        case gguf_type::u64:
            w.magnitude_or_value = load<uint64_t>(p);
            break;
        case gguf_type::i8:
            set_signed(load<int8_t>(p));
            break;
        case gguf_type::i16:
            set_signed(load<int16_t>(p));
            break;
        case gguf_type::i32:
            set_signed(load<int32_t>(p));
            break;
        case gguf_type::i64:
            set_signed(load<int64_t>(p));
            break;
        default:
            WEFT_ASSERT(false);
    }
    return w;
}

double element_double(const gguf_kv &kv, uint64_t i) {
    const gguf_type t = kv.element_type();
    const uint8_t *p = kv.raw.data() + i * gguf_type_size(t);
    if (t == gguf_type::f32) return load<float>(p);
    if (t == gguf_type::f64) return load<double>(p);
    const wide_int w = element_int(kv, i);
    return w.is_signed ? double(int64_t(w.magnitude_or_value)) : double(w.magnitude_or_value);
}

int64_t to_int64(const std::string &path, const gguf_kv &kv, uint64_t i) {
    const wide_int w = element_int(kv, i);
    if (!w.is_signed && w.magnitude_or_value > uint64_t(std::numeric_limits<int64_t>::max()))
        throw gguf_error(path + ": metadata key " + quoted(kv.key) + " value " +
                         std::to_string(w.magnitude_or_value) + " does not fit in int64");
    return int64_t(w.magnitude_or_value);
}

}  // namespace

std::optional<int64_t> gguf_file::get_int(std::string_view key) const {
    const gguf_kv *kv = find(key);
    if (!kv) return std::nullopt;
    if (kv->is_array() || !is_integer(kv->type)) wrong_type(path_, *kv, "an integer");
    return to_int64(path_, *kv, 0);
}

std::optional<uint64_t> gguf_file::get_uint(std::string_view key) const {
    const gguf_kv *kv = find(key);
    if (!kv) return std::nullopt;
    if (kv->is_array() || !is_integer(kv->type)) wrong_type(path_, *kv, "an unsigned integer");
    const wide_int w = element_int(*kv, 0);
    if (w.negative)
        throw gguf_error(path_ + ": metadata key " + quoted(kv->key) + " value " +
                         std::to_string(int64_t(w.magnitude_or_value)) +
                         " is negative, wanted an unsigned integer");
    return w.magnitude_or_value;
}

std::optional<double> gguf_file::get_float(std::string_view key) const {
    const gguf_kv *kv = find(key);
    if (!kv) return std::nullopt;
    if (kv->is_array() || !(is_float(kv->type) || is_integer(kv->type))) wrong_type(path_, *kv, "a number");
    return element_double(*kv, 0);
}

std::optional<bool> gguf_file::get_bool(std::string_view key) const {
    const gguf_kv *kv = find(key);
    if (!kv) return std::nullopt;
    if (kv->type != gguf_type::boolean) wrong_type(path_, *kv, "bool");
    return kv->raw[0] != 0;
}

std::optional<std::string> gguf_file::get_string(std::string_view key) const {
    const gguf_kv *kv = find(key);
    if (!kv) return std::nullopt;
    if (kv->type != gguf_type::string) wrong_type(path_, *kv, "string");
    return kv->strings[0];
}

std::optional<std::vector<int64_t>> gguf_file::get_int_array(std::string_view key) const {
    const gguf_kv *kv = find(key);
    if (!kv) return std::nullopt;
    if (!is_integer(kv->element_type())) wrong_type(path_, *kv, "an integer or an array of integers");
    std::vector<int64_t> out(size_t(kv->n));
    for (uint64_t i = 0; i < kv->n; ++i) out[size_t(i)] = to_int64(path_, *kv, i);
    return out;
}

std::optional<std::vector<float>> gguf_file::get_float_array(std::string_view key) const {
    const gguf_kv *kv = find(key);
    if (!kv) return std::nullopt;
    const gguf_type t = kv->element_type();
    if (!(is_float(t) || is_integer(t))) wrong_type(path_, *kv, "a number or an array of numbers");
    std::vector<float> out(size_t(kv->n));
    for (uint64_t i = 0; i < kv->n; ++i) out[size_t(i)] = float(element_double(*kv, i));
    return out;
}

const std::vector<std::string> *gguf_file::get_string_array(std::string_view key) const {
    const gguf_kv *kv = find(key);
    if (!kv) return nullptr;
    if (!kv->is_array() || kv->array_type != gguf_type::string) wrong_type(path_, *kv, "array of string");
    return &kv->strings;
}

}  // namespace weft
