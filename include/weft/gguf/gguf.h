// weft/gguf/gguf.h — GGUF files: validated reading (memory-mapped by default) and atomic writing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/type.h"

namespace weft {

class output_file;

// Metadata value types, with their on-disk ids.
enum class gguf_type : uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12,
};
const char *gguf_type_name(gguf_type t);

// The name of a general.file_type value in the established numbering ("ALL_F32", "MOSTLY_Q4_K_M");
// nullptr for a value that is not (or no longer) assigned.
const char *gguf_file_type_name(int64_t file_type);

// A problem with a GGUF file; what() names the file and what is wrong, e.g.
//   "model.gguf: tensor 'blk.0.attn_q.weight': data [1024, 1048576) past end of file (1000000 bytes)"
class gguf_error : public error {
  public:
    using error::error;
};

// One key/value pair, decoded.
struct gguf_kv {
    std::string key;
    gguf_type type = gguf_type::u8;
    gguf_type array_type = gguf_type::u8;  // when type == array
    uint64_t n = 1;                        // elements (1 for scalars)
    std::vector<uint8_t> raw;              // numeric/bool scalar or array elements, little-endian
    std::vector<std::string> strings;      // string, or array of strings

    bool is_array() const { return type == gguf_type::array; }
    gguf_type element_type() const { return is_array() ? array_type : type; }
};

struct gguf_tensor_info {
    std::string name;
    uint32_t n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};
    dtype type = dtype::f32;
    uint64_t offset = 0;  // relative to the start of the data section
    size_t nbytes = 0;    // from type and shape
    uint32_t part = 0;    // in a gguf_set: the index of the part (file) holding it; 0 in a gguf_file
};

struct gguf_open_options {
    bool use_mmap = true;   // false: read the data section into memory with plain reads
    bool load_data = true;  // false: metadata and tensor infos only (e.g. a vocabulary-only load)
};

class gguf_file {
  public:
    // Reads and validates the whole header; throws gguf_error naming `path` and the problem.
    // Versions 2 and 3 (little-endian) are read; nested arrays (arrays of arrays) are rejected.
    static std::unique_ptr<gguf_file> open(const std::string &path, const gguf_open_options &opt = {});
    // Same, over bytes in memory (the fuzzer's entry point); `name` is used in messages. The data
    // section is copied, so `data` need not outlive the result.
    static std::unique_ptr<gguf_file> from_memory(const void *data, size_t size,
                                                  std::string name = "<memory>");
    ~gguf_file();

    const std::string &path() const { return path_; }
    uint32_t version() const { return version_; }
    size_t alignment() const { return alignment_; }
    uint64_t file_size() const { return file_size_; }
    uint64_t data_offset() const { return data_offset_; }  // start of the data section in the file

    // --- metadata
    const std::vector<gguf_kv> &kvs() const { return kvs_; }
    const gguf_kv *find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }

    // Typed getters. Absent key: std::nullopt. Present with an incompatible type: gguf_error naming
    // the key, the type found and the type wanted. Integers convert between widths when the value
    // fits; floats accept f32/f64 (and integers).
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<uint64_t> get_uint(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    std::optional<std::string> get_string(std::string_view key) const;
    // Arrays (a scalar is accepted as an array of one where that makes sense for per-layer values).
    std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
    std::optional<std::vector<float>> get_float_array(std::string_view key) const;
    const std::vector<std::string> *get_string_array(std::string_view key) const;

    // --- tensors
    const std::vector<gguf_tensor_info> &tensors() const { return tensors_; }
    const gguf_tensor_info *find_tensor(std::string_view name) const;
    // The tensor's bytes: in the mapping (or the read buffer); null when opened without data.
    const uint8_t *tensor_data(const gguf_tensor_info &t) const;
    // The whole data section (for wrapping in one host buffer); null without data.
    const uint8_t *data_base() const;
    // Tells the system that the mapped bytes [p, p + n) (inside the data section) will not be read
    // for a while, so the pages wholly inside are dropped from this process's memory; reading them
    // again maps them back from the file. Used after weights were copied elsewhere (repacked). A
    // no-op for a file read into memory.
    void release_pages(const void *p, size_t n) const;
    size_t data_size() const;

  private:
    gguf_file() = default;
    void parse(const uint8_t *bytes, size_t size, bool header_only_in_bytes);

    std::string path_;
    uint32_t version_ = 0;
    size_t alignment_ = 32;
    uint64_t file_size_ = 0;
    uint64_t data_offset_ = 0;
    std::vector<gguf_kv> kvs_;
    std::vector<gguf_tensor_info> tensors_;
    // name -> index; the views point into kvs_ / tensors_, which do not change after parsing
    std::unordered_map<std::string_view, size_t> kv_index_;
    std::unordered_map<std::string_view, size_t> tensor_index_;
    void build_index();

    struct storage;  // the mapping or the read buffer
    std::unique_ptr<storage> storage_;
    const uint8_t *data_ = nullptr;
    size_t data_size_ = 0;
};

// --- split sets: one model in N files, as the established gguf-split tool writes them. Every part
// is a GGUF file of its own holding some of the tensors and the three split keys; the first part also
// holds all the other metadata. Part i+1 of n is named "<prefix>-%05d-of-%05d.gguf".
inline constexpr const char *gguf_split_no_key = "split.no";                        // u16, from 0
inline constexpr const char *gguf_split_count_key = "split.count";                  // u16, parts in the set
inline constexpr const char *gguf_split_tensors_count_key = "split.tensors.count";  // i32, of the whole set
// True for the three keys above (a merged or rewritten model drops them).
bool gguf_is_split_key(std::string_view key);
// The path of part index (from 0) of count: "<prefix>-00002-of-00005.gguf" for 1 of 5.
std::string gguf_split_path(const std::string &prefix, uint32_t index, uint32_t count);
// The prefix of `path` when it is named as part index of count; nullopt when it is not.
std::optional<std::string> gguf_split_prefix(const std::string &path, uint32_t index, uint32_t count);

// A model's GGUF files: one file, or every part of a split set, each opened (mapped) and validated,
// seen as one list of tensors. Metadata lives in the first part (metadata()).
class gguf_set {
  public:
    // Opens `path`. When it is the first part of a split set (split.count > 1) the other parts are
    // opened from the names beside it and checked: each present and a GGUF file, split.count,
    // split.no and split.tensors.count consistent with the first part, no tensor in two parts and
    // the set's tensor count as split.tensors.count says. Throws gguf_error naming the file at fault
    // and what is wrong. A later part given in place of the first is refused, naming the first.
    static std::unique_ptr<gguf_set> open(const std::string &path, const gguf_open_options &opt = {});
    // One file (e.g. from gguf_file::from_memory) as a set of one part; a file that says it is the
    // first of several parts is refused, as its other parts cannot be found.
    static std::unique_ptr<gguf_set> of_file(std::unique_ptr<gguf_file> f);
    ~gguf_set();

    const std::string &path() const { return metadata().path(); }
    size_t n_parts() const { return parts_.size(); }
    bool is_split() const { return parts_.size() > 1; }
    const gguf_file &part(size_t i) const { return *parts_[i]; }
    // The first part: every metadata key of the model (and the split keys).
    const gguf_file &metadata() const { return *parts_[0]; }

    // Every part's tensors, part by part in file order; each says its part.
    const std::vector<gguf_tensor_info> &tensors() const { return tensors_; }
    const gguf_tensor_info *find_tensor(std::string_view name) const;
    // The tensor's bytes in its part's mapping (or read buffer); null when opened without data.
    const uint8_t *tensor_data(const gguf_tensor_info &t) const;
    // gguf_file::release_pages on the part whose mapping holds [p, p + n).
    void release_pages(const void *p, size_t n) const;
    uint64_t total_file_size() const;  // of all parts

  private:
    gguf_set() = default;
    void add_part(std::unique_ptr<gguf_file> f);

    std::vector<std::unique_ptr<gguf_file>> parts_;
    std::vector<gguf_tensor_info> tensors_;
    std::unordered_map<std::string_view, size_t> tensor_index_;  // views into tensors_' names
};

// Builds a GGUF file: metadata in insertion order (setting a key again replaces it), tensors in
// insertion order at aligned offsets. write() goes to "<path>.tmp.<pid>" and renames on success,
// so a failed write leaves no partial file.
class gguf_writer {
  public:
    gguf_writer();
    ~gguf_writer();

    void set_u8(const std::string &key, uint8_t v);
    void set_i8(const std::string &key, int8_t v);
    void set_u16(const std::string &key, uint16_t v);
    void set_i16(const std::string &key, int16_t v);
    void set_u32(const std::string &key, uint32_t v);
    void set_i32(const std::string &key, int32_t v);
    void set_u64(const std::string &key, uint64_t v);
    void set_i64(const std::string &key, int64_t v);
    void set_f32(const std::string &key, float v);
    void set_f64(const std::string &key, double v);
    void set_bool(const std::string &key, bool v);
    void set_string(const std::string &key, const std::string &v);
    void set_array(const std::string &key, gguf_type elem, const void *data, size_t n);  // numeric/bool
    void set_string_array(const std::string &key, const std::vector<std::string> &v);
    void set_kv(const gguf_kv &kv);  // copy a decoded pair (e.g. from another file)
    void remove(const std::string &key);

    // The bytes are copied only at write(): `data` must stay valid until then.
    // Throws gguf_error on a duplicate name or a size inconsistent with type and shape.
    void add_tensor(const std::string &name, dtype t, std::span<const int64_t> ne, const void *data,
                    size_t nbytes);
    // Like add_tensor, but the bytes are produced during write() by `fill(dst)` (dst holds the
    // tensor's nbytes, computed from type and shape), one tensor at a time: a converter streams
    // instead of holding every output tensor in memory. An exception from `fill` aborts the write.
    using tensor_fill_fn = std::function<void(uint8_t *dst, size_t nbytes)>;
    void add_tensor_fill(const std::string &name, dtype t, std::span<const int64_t> ne, tensor_fill_fn fill);

    void set_alignment(size_t a);  // also recorded as general.alignment when not 32
    void write(const std::string &path) const;
    // The whole file into `out`, which the caller commits (several files renamed into place only
    // when all are complete, as gguf-split writes its parts).
    void write_to(output_file &out) const;
    // The bytes write() would produce (header, tensors and padding).
    uint64_t file_size() const;

  private:
    struct impl;
    struct layout;
    layout plan() const;
    std::unique_ptr<impl> impl_;
};

}  // namespace weft
