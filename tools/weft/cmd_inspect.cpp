// tools/weft/cmd_inspect.cpp — `weft inspect FILE.gguf [--json]`: header, metadata, tensors and totals.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "weft/command.h"
#include "weft/file_arguments.h"
#include "weft/gguf/gguf.h"

namespace weft::tool {
namespace {

// Keys keep the file's order in the JSON output.
using json = nlohmann::ordered_json;

struct inspect_options {
    std::string path;
    bool as_json = false;
    size_t max_elements = 8;  // array elements shown
    size_t max_string = 80;   // characters of a string shown in the text view
};

template <class T>
T load(const uint8_t *p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

size_t element_size(gguf_type t) {
    switch (t) {
        case gguf_type::u8:
        case gguf_type::i8:
        case gguf_type::boolean:
            return 1;
        case gguf_type::u16:
        case gguf_type::i16:
            return 2;
        case gguf_type::u32:
        case gguf_type::i32:
        case gguf_type::f32:
            return 4;
        case gguf_type::u64:
        case gguf_type::i64:
        case gguf_type::f64:
            return 8;
        default:
            return 0;
    }
}

// Element i of a numeric/bool value as JSON.
json numeric_element(const gguf_kv &kv, uint64_t i) {
    const gguf_type t = kv.element_type();
    const uint8_t *p = kv.raw.data() + i * element_size(t);
    switch (t) {
        case gguf_type::u8:
            return load<uint8_t>(p);
        case gguf_type::i8:
            return load<int8_t>(p);
        case gguf_type::u16:
            return load<uint16_t>(p);
        case gguf_type::i16:
            return load<int16_t>(p);
        case gguf_type::u32:
            return load<uint32_t>(p);
        case gguf_type::i32:
            return load<int32_t>(p);
        case gguf_type::u64:
            return load<uint64_t>(p);
        case gguf_type::i64:
            return load<int64_t>(p);
        case gguf_type::f32:
            return load<float>(p);
        case gguf_type::f64:
            return load<double>(p);
        case gguf_type::boolean:
            return p[0] != 0;
        default:
            return nullptr;
    }
}

json element(const gguf_kv &kv, uint64_t i) {
    if (kv.element_type() == gguf_type::string) return kv.strings[size_t(i)];
    return numeric_element(kv, i);
}

// Printable, quoted, cut to `max` bytes (the rest is counted).
std::string shown_string(const std::string &s, size_t max) {
    std::string out = "\"";
    const size_t n = std::min(s.size(), max);
    for (size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '\n')
            out += "\\n";
        else if (c == '\t')
            out += "\\t";
        else if (c == '"' || c == '\\')
            out += '\\', out += char(c);
        else if (c < 0x20 || c == 0x7f) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", c);
            out += hex;
        } else
            out += char(c);
    }
    out += "\"";
    if (s.size() > max) out += "... (" + std::to_string(s.size()) + " bytes)";
    return out;
}

std::string shown_element(const gguf_kv &kv, uint64_t i, size_t max_string) {
    if (kv.element_type() == gguf_type::string) return shown_string(kv.strings[size_t(i)], max_string);
    return numeric_element(kv, i).dump();
}

std::string shape_of(const gguf_tensor_info &t) {
    std::string s = "[";
    for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
    return s + "]";
}

int64_t n_elements(const gguf_tensor_info &t) {
    return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
}

std::string human_bytes(double b) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, ++u;
    char buf[32];
    std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
    return buf;
}

struct totals {
    uint64_t parameters = 0;
    uint64_t bytes = 0;
    std::map<std::string, size_t> tensors_per_type;
    double bits_per_weight() const { return parameters ? 8.0 * double(bytes) / double(parameters) : 0.0; }
};

totals count(const gguf_set &f) {
    totals t;
    for (const auto &ti : f.tensors()) {
        t.parameters += uint64_t(n_elements(ti));
        t.bytes += ti.nbytes;
        ++t.tensors_per_type[type_name(ti.type)];
    }
    return t;
}

std::string file_type_text(const gguf_file &f) {
    const gguf_kv *kv = f.find("general.file_type");
    if (!kv) return "";
    const auto id = f.get_int("general.file_type");
    const char *name = gguf_file_type_name(*id);
    return std::string(name ? name : "unknown") + " (" + std::to_string(*id) + ")";
}

void print_json(const gguf_set &set, const inspect_options &opt) {
    const gguf_file &f = set.metadata();
    json out;
    out["path"] = f.path();
    out["version"] = f.version();
    out["alignment"] = f.alignment();
    out["file_size"] = f.file_size();
    out["data_offset"] = f.data_offset();
    if (set.is_split()) {
        json parts = json::array();
        for (size_t i = 0; i < set.n_parts(); ++i)
            parts.push_back({{"path", set.part(i).path()},
                             {"file_size", set.part(i).file_size()},
                             {"data_offset", set.part(i).data_offset()},
                             {"tensors", set.part(i).tensors().size()}});
        out["parts"] = parts;
    }
    if (f.has("general.file_type")) {
        const auto id = *f.get_int("general.file_type");
        const char *name = gguf_file_type_name(id);
        out["file_type"] = {{"id", id}, {"name", name ? json(name) : json(nullptr)}};
    } else {
        out["file_type"] = nullptr;
    }
    json meta = json::object();
    for (const auto &kv : f.kvs()) {
        if (!kv.is_array()) {
            meta[kv.key] = element(kv, 0);
            continue;
        }
        json head = json::array();
        for (uint64_t i = 0; i < kv.n && i < opt.max_elements; ++i) head.push_back(element(kv, i));
        meta[kv.key] = {{"array_of", gguf_type_name(kv.array_type)}, {"count", kv.n}, {"head", head}};
    }
    out["metadata"] = meta;
    json tensors = json::array();
    for (const auto &ti : set.tensors()) {
        json shape = json::array();
        for (uint32_t d = 0; d < ti.n_dims; ++d) shape.push_back(ti.ne[d]);
        json entry = {{"name", ti.name},
                      {"shape", shape},
                      {"type", type_name(ti.type)},
                      {"bytes", ti.nbytes},
                      {"offset", ti.offset}};
        if (set.is_split()) entry["part"] = ti.part + 1;  // counted from 1, as the file names count
        tensors.push_back(entry);
    }
    out["tensors"] = tensors;
    const totals t = count(set);
    out["totals"] = {{"tensors", set.tensors().size()},
                     {"parameters", t.parameters},
                     {"bytes", t.bytes},
                     {"bits_per_weight", t.bits_per_weight()},
                     {"tensors_per_type", t.tensors_per_type}};
    // Names and strings in a file need not be UTF-8: replace bad bytes instead of failing.
    std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
}

void print_text(const gguf_set &set, const inspect_options &opt) {
    const gguf_file &f = set.metadata();
    std::printf("file:       %s\n", f.path().c_str());
    if (set.is_split()) {
        std::printf("split set:  %zu parts, %" PRIu64 " bytes (%s) in all\n", set.n_parts(),
                    set.total_file_size(), human_bytes(double(set.total_file_size())).c_str());
        for (size_t i = 0; i < set.n_parts(); ++i)
            std::printf("  part %zu:   %s, %zu tensors, %" PRIu64 " bytes\n", i + 1,
                        set.part(i).path().c_str(), set.part(i).tensors().size(), set.part(i).file_size());
    }
    std::printf("version:    %u\n", f.version());
    std::printf("alignment:  %zu\n", f.alignment());
    std::printf("size:       %" PRIu64 " bytes (%s), data section at offset %" PRIu64 "\n", f.file_size(),
                human_bytes(double(f.file_size())).c_str(), f.data_offset());
    const std::string ft = file_type_text(f);
    if (!ft.empty()) std::printf("file type:  %s\n", ft.c_str());

    std::printf("\nmetadata (%zu keys):\n", f.kvs().size());
    size_t key_width = 0;
    for (const auto &kv : f.kvs()) key_width = std::max(key_width, kv.key.size());
    key_width = std::min<size_t>(key_width, 48);
    for (const auto &kv : f.kvs()) {
        std::string value;
        std::string type = gguf_type_name(kv.type);
        if (kv.is_array()) {
            type = std::string(gguf_type_name(kv.array_type)) + "[" + std::to_string(kv.n) + "]";
            value = "[";
            for (uint64_t i = 0; i < kv.n && i < opt.max_elements; ++i)
                value += (i ? ", " : "") + shown_element(kv, i, opt.max_string / 4);
            if (kv.n > opt.max_elements) value += ", ... (" + std::to_string(kv.n) + " elements)";
            value += "]";
        } else {
            value = shown_element(kv, 0, opt.max_string);
        }
        std::printf("  %-*s %-14s %s\n", int(key_width), printable(kv.key).c_str(), type.c_str(),
                    value.c_str());
    }

    const std::vector<gguf_tensor_info> &tensors = set.tensors();
    std::printf("\ntensors (%zu):%s\n", tensors.size(), tensors.empty() ? " none" : "");
    size_t name_width = 4;
    for (const auto &ti : tensors) name_width = std::max(name_width, ti.name.size());
    name_width = std::min<size_t>(name_width, 64);
    if (!tensors.empty())
        std::printf("  %-*s %-26s %-6s %12s%s\n", int(name_width), "name", "shape", "type", "bytes",
                    set.is_split() ? "  part" : "");
    for (const auto &ti : tensors) {
        const std::string part = set.is_split() ? "  " + std::to_string(ti.part + 1) : "";
        std::printf("  %-*s %-26s %-6s %12zu%s\n", int(name_width), printable(ti.name).c_str(),
                    shape_of(ti).c_str(), type_name(ti.type), ti.nbytes, part.c_str());
    }

    const totals t = count(set);
    std::printf("\ntotals:\n");
    std::printf("  tensors:         %zu\n", tensors.size());
    std::printf("  parameters:      %" PRIu64 "\n", t.parameters);
    std::printf("  tensor bytes:    %" PRIu64 " (%s)\n", t.bytes, human_bytes(double(t.bytes)).c_str());
    std::printf("  bits per weight: %.4f\n", t.bits_per_weight());
    std::string types;
    for (const auto &[name, n] : t.tensors_per_type)
        types += (types.empty() ? "" : ", ") + name + ": " + std::to_string(n);
    std::printf("  tensor types:    %s\n", types.c_str());
}

int inspect_main(int argc, char **argv) {
    CLI::App app{
        "Shows a GGUF file: format version, alignment, metadata (long arrays and strings summarised),\n"
        "the tensor table (name, shape, type, bytes), totals, bits per weight and the file type.\n"
        "Only the header is read; the file is validated as the loader would. Given the first part of a\n"
        "split set (NAME-00001-of-0000N.gguf) it shows the whole model, every part's tensors.",
        "weft inspect"};
    inspect_options opt;
    app.add_option("file", opt.path, "GGUF file")->required()->check(weft::tool::input_file());
    app.add_flag("--json", opt.as_json,
                 "print one JSON object to stdout (arrays as {array_of, count, head})");
    app.add_option("--max-elements", opt.max_elements, "array elements to show")->capture_default_str();
    app.add_option("--max-string", opt.max_string, "characters of a string to show in the text view")
        ->capture_default_str();
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;

    gguf_open_options open_opt;
    open_opt.load_data = false;
    const auto f = gguf_set::open(opt.path, open_opt);
    if (opt.as_json)
        print_json(*f, opt);
    else
        print_text(*f, opt);
    return 0;
}

[[maybe_unused]] const bool registered_inspect =
    register_command({"inspect", "show a GGUF file's metadata, tensors and totals", &inspect_main});

}  // namespace
}  // namespace weft::tool
