// src/gguf/gguf_set.cpp — a model's GGUF files as one: a single file or every part of a split set,
// each validated against the first part; split-part names.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "weft/gguf/gguf.h"

namespace weft {

bool gguf_is_split_key(std::string_view key) {
    return key == gguf_split_no_key || key == gguf_split_count_key || key == gguf_split_tensors_count_key;
}

std::string gguf_split_path(const std::string &prefix, uint32_t index, uint32_t count) {
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, "-%05u-of-%05u.gguf", index + 1, count);
    return prefix + suffix;
}

std::optional<std::string> gguf_split_prefix(const std::string &path, uint32_t index, uint32_t count) {
    const std::string suffix = gguf_split_path("", index, count);
    if (path.size() <= suffix.size() || !std::string_view(path).ends_with(suffix)) return std::nullopt;
    return path.substr(0, path.size() - suffix.size());
}

namespace {

// The split key `key` of part f as an integer, or nullopt when absent (wrong types are gguf_errors).
std::optional<int64_t> split_key_value(const gguf_file &f, const char *key) {
    return f.get_int(key);
}

std::string split_part_text(uint32_t index, uint32_t count) {
    return "part " + std::to_string(index + 1) + " of " + std::to_string(count);
}

bool split_part_exists(const std::string &path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 || errno != ENOENT;
}

}  // namespace

gguf_set::~gguf_set() = default;

void gguf_set::add_part(std::unique_ptr<gguf_file> f) {
    const auto index = uint32_t(parts_.size());
    for (gguf_tensor_info t : f->tensors()) {
        t.part = index;
        tensors_.push_back(std::move(t));
    }
    parts_.push_back(std::move(f));
}

std::unique_ptr<gguf_set> gguf_set::of_file(std::unique_ptr<gguf_file> f) {
    if (const auto count = split_key_value(*f, gguf_split_count_key); count && *count > 1)
        throw gguf_error(f->path() + ": " + gguf_split_count_key + " says it is one of " +
                         std::to_string(*count) +
                         " parts of a split set, whose other parts cannot be read from here");
    std::unique_ptr<gguf_set> s(new gguf_set());
    s->add_part(std::move(f));
    for (size_t i = 0; i < s->tensors_.size(); ++i) s->tensor_index_.emplace(s->tensors_[i].name, i);
    return s;
}

std::unique_ptr<gguf_set> gguf_set::open(const std::string &path, const gguf_open_options &opt) {
    std::unique_ptr<gguf_set> s(new gguf_set());
    s->add_part(gguf_file::open(path, opt));
    const gguf_file &first = *s->parts_[0];

    const std::optional<int64_t> count_value = split_key_value(first, gguf_split_count_key);
    // split.count 0 is what the established merge leaves in a merged file: not a set any more
    const int64_t count = count_value.value_or(0);
    if (count < 0 || count > 65535)
        throw gguf_error(path + ": " + gguf_split_count_key + " " + std::to_string(count) +
                         " is not a number of parts (0 to 65535)");
    const int64_t index = split_key_value(first, gguf_split_no_key).value_or(0);
    if (count > 1 && index != 0) {
        const auto prefix = gguf_split_prefix(path, uint32_t(index), uint32_t(count));
        throw gguf_error(path + ": this is " +
                         (index > 0 && index < count ? split_part_text(uint32_t(index), uint32_t(count))
                                                     : "part index " + std::to_string(index)) +
                         " of a split set; load its first part" +
                         (prefix ? " " + gguf_split_path(*prefix, 0, uint32_t(count)) : std::string()));
    }
    const std::optional<int64_t> expected_tensors = split_key_value(first, gguf_split_tensors_count_key);

    if (count > 1) {
        const auto n = uint32_t(count);
        const std::optional<std::string> prefix = gguf_split_prefix(path, 0, n);
        if (!prefix)
            throw gguf_error(path + ": the first of a split set of " + std::to_string(n) +
                             " parts (split.count), but not named as one (<prefix>" +
                             gguf_split_path("", 0, n) + "), so its other parts cannot be found");
        for (uint32_t i = 1; i < n; ++i) {
            const std::string part_path = gguf_split_path(*prefix, i, n);
            const std::string in_set = " (" + split_part_text(i, n) + " of the split set " + path + ")";
            if (!split_part_exists(part_path)) throw gguf_error(part_path + ": missing" + in_set);
            std::unique_ptr<gguf_file> part;
            try {
                part = gguf_file::open(part_path, opt);
            } catch (const gguf_error &e) {
                throw gguf_error(e.what() + in_set);
            }
            const std::optional<int64_t> part_count = split_key_value(*part, gguf_split_count_key);
            if (!part_count)
                throw gguf_error(part_path + ": has no " + gguf_split_count_key +
                                 ": not a part of a split set" + in_set);
            if (*part_count != count)
                throw gguf_error(part_path + ": " + gguf_split_count_key + " is " +
                                 std::to_string(*part_count) + " but the first part says " +
                                 std::to_string(count) + ": a part of another split set" + in_set);
            const std::optional<int64_t> part_index = split_key_value(*part, gguf_split_no_key);
            if (part_index != int64_t(i))
                throw gguf_error(part_path + ": " + gguf_split_no_key + " is " +
                                 (part_index ? std::to_string(*part_index) : std::string("absent")) +
                                 ", expected " + std::to_string(i) + in_set);
            const std::optional<int64_t> part_tensors = split_key_value(*part, gguf_split_tensors_count_key);
            if (part_tensors != expected_tensors)
                throw gguf_error(
                    part_path + ": " + gguf_split_tensors_count_key + " is " +
                    (part_tensors ? std::to_string(*part_tensors) : std::string("absent")) +
                    " but the first part says " +
                    (expected_tensors ? std::to_string(*expected_tensors) : std::string("none")) +
                    ": a part of another split set" + in_set);
            s->add_part(std::move(part));
        }
    }

    // The index holds views of the names: built once every part's tensors are in place.
    s->tensor_index_.reserve(s->tensors_.size());
    for (size_t i = 0; i < s->tensors_.size(); ++i) {
        const gguf_tensor_info &t = s->tensors_[i];
        const auto [it, inserted] = s->tensor_index_.emplace(t.name, i);
        if (!inserted)
            throw gguf_error(s->parts_[t.part]->path() + ": tensor " + quoted(t.name) + " is also in " +
                             s->parts_[s->tensors_[it->second].part]->path() +
                             ": parts of different split sets?");
    }
    if (count >= 1 && expected_tensors && *expected_tensors != int64_t(s->tensors_.size()))
        throw gguf_error(
            path + ": " + gguf_split_tensors_count_key + " says the set holds " +
            std::to_string(*expected_tensors) + " tensors, its " + std::to_string(s->parts_.size()) +
            (s->parts_.size() == 1 ? " part holds " : " parts hold ") + std::to_string(s->tensors_.size()));
    return s;
}

const gguf_tensor_info *gguf_set::find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t *gguf_set::tensor_data(const gguf_tensor_info &t) const {
    WEFT_ASSERT(t.part < parts_.size());
    return parts_[t.part]->tensor_data(t);
}

void gguf_set::release_pages(const void *p, size_t n) const {
    // each part ignores a range outside its own mapping
    for (const auto &part : parts_) part->release_pages(p, n);
}

uint64_t gguf_set::total_file_size() const {
    uint64_t n = 0;
    for (const auto &part : parts_) n += part->file_size();
    return n;
}

}  // namespace weft
