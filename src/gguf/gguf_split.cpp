// src/gguf/gguf_split.cpp — a model into a set of GGUF parts and a set back into one file; every
// output written whole to temporary files before any is renamed into place.
#include "weft/gguf/gguf_split.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "gguf/gguf_format.h"
#include "weft/core/checked.h"
#include "weft/core/safe_file.h"

namespace weft {

namespace {

// The established tool pads every tensor to 32 bytes when it counts a part's size.
constexpr uint64_t split_size_padding = 32;

// Throws when `out` is the same file (device and inode; a link to it included) as one of in's files.
void refuse_overwriting_input(const gguf_set &in, const std::string &out) {
    struct stat out_st {};
    if (::stat(out.c_str(), &out_st) != 0) return;  // does not exist (yet): cannot be an input
    for (size_t i = 0; i < in.n_parts(); ++i) {
        struct stat in_st {};
        if (::stat(in.part(i).path().c_str(), &in_st) == 0 && in_st.st_dev == out_st.st_dev &&
            in_st.st_ino == out_st.st_ino)
            throw error(out + ": is the input file " + in.part(i).path() + "; refusing to overwrite it");
    }
}

// The tensor at `t` of `in` added to w, its bytes read from the input's mapping at write time.
void add_input_tensor(gguf_writer &w, const gguf_set &in, const gguf_tensor_info &t) {
    const uint8_t *data = in.tensor_data(t);
    if (!data) throw error(in.part(t.part).path() + ": opened without its tensor data");
    w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne, t.n_dims), data, t.nbytes);
}

// Every metadata key of the first part except the split keys.
void copy_model_metadata(gguf_writer &w, const gguf_set &in) {
    for (const gguf_kv &kv : in.metadata().kvs())
        if (!gguf_is_split_key(kv.key)) w.set_kv(kv);
}

// The writer of one part (its metadata and tensors); the bytes are the input's until written.
std::unique_ptr<gguf_writer> part_writer(const gguf_set &in, const gguf_split_part &part, uint32_t index,
                                         uint32_t count) {
    auto w = std::make_unique<gguf_writer>();
    if (index == 0)
        copy_model_metadata(*w, in);  // general.alignment among them
    else if (in.metadata().alignment() != gguf_default_alignment)
        w->set_alignment(in.metadata().alignment());  // every part keeps the model's alignment
    // the established tool's order (its count is set last, once the number of parts is known)
    w->set_u16(gguf_split_no_key, uint16_t(index));
    w->set_i32(gguf_split_tensors_count_key, int32_t(in.tensors().size()));
    w->set_u16(gguf_split_count_key, uint16_t(count));
    for (size_t i = part.first_tensor; i < part.first_tensor + part.n_tensors; ++i)
        add_input_tensor(*w, in, in.tensors()[i]);
    return w;
}

}  // namespace

uint64_t gguf_parse_split_size(const std::string &text) {
    const auto bad = [&](const std::string &why) {
        return error("--split-max-size '" + text + "': " + why +
                     " (expected a whole number of M or G, e.g. 500M, 2G)");
    };
    if (text.size() < 2) throw bad("too short");
    const char unit = text.back();
    const uint64_t scale = unit == 'M' ? 1000ull * 1000 : unit == 'G' ? 1000ull * 1000 * 1000 : 0;
    if (scale == 0) throw bad(std::string("unknown unit '") + unit + "'");
    const std::string digits = text.substr(0, text.size() - 1);
    if (digits.find_first_not_of("0123456789") != std::string::npos) throw bad("not a whole number");
    errno = 0;
    const unsigned long long n = std::strtoull(digits.c_str(), nullptr, 10);
    if (errno == ERANGE || n > UINT64_MAX / scale) throw bad("too large");
    if (n == 0) throw bad("must be positive");
    return uint64_t(n) * scale;
}

std::vector<gguf_split_part> gguf_plan_split(const gguf_set &in, const std::string &out_prefix,
                                             const gguf_split_limits &limits) {
    if (limits.max_bytes == 0 && limits.max_tensors < 1)
        throw error("--split-max-tensors " + std::to_string(limits.max_tensors) + ": must be at least 1");
    const std::vector<gguf_tensor_info> &tensors = in.tensors();
    std::vector<gguf_split_part> parts(1);
    uint64_t part_bytes = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const uint64_t padded = align_up(uint64_t(tensors[i].nbytes), split_size_padding);
        gguf_split_part &cur = parts.back();
        const bool full = limits.max_bytes > 0 ? part_bytes + padded > limits.max_bytes
                                               : int64_t(cur.n_tensors) >= limits.max_tensors;
        if (full && cur.n_tensors > 0) {
            gguf_split_part next;
            next.first_tensor = i;
            parts.push_back(next);
            part_bytes = 0;
        }
        ++parts.back().n_tensors;
        part_bytes += padded;
    }
    if (parts.size() > 65535)
        throw error(in.path() + ": " + std::to_string(parts.size()) +
                    " parts; a split set has at most 65535 (raise the limit)");
    const auto count = uint32_t(parts.size());
    for (uint32_t i = 0; i < count; ++i) {
        parts[i].path = gguf_split_path(out_prefix, i, count);
        parts[i].file_size = part_writer(in, parts[i], i, count)->file_size();
    }
    return parts;
}

void gguf_write_split(const gguf_set &in, const std::vector<gguf_split_part> &parts) {
    for (const gguf_split_part &part : parts) refuse_overwriting_input(in, part.path);
    const auto count = uint32_t(parts.size());
    // all parts complete in temporary files before the first is renamed into place
    std::vector<std::unique_ptr<output_file>> outs;
    for (uint32_t i = 0; i < count; ++i) {
        outs.push_back(std::make_unique<output_file>(parts[i].path));
        part_writer(in, parts[i], i, count)->write_to(*outs.back());
    }
    for (uint32_t i = 0; i < count; ++i) {
        try {
            outs[i]->commit();
        } catch (...) {
            // the parts already in place would be a set with members missing: take them back
            for (uint32_t j = 0; j < i; ++j) std::remove(parts[j].path.c_str());
            throw;
        }
    }
}

void gguf_write_merged(const gguf_set &in, const std::string &out) {
    if (!in.metadata().has(gguf_split_count_key))
        throw error(in.path() + ": has no " + std::string(gguf_split_count_key) +
                    ": not the first part of a split set, nothing to merge");
    refuse_overwriting_input(in, out);
    gguf_writer w;
    copy_model_metadata(w, in);
    for (const gguf_tensor_info &t : in.tensors()) add_input_tensor(w, in, t);
    w.write(out);
}

}  // namespace weft
