// tests/hostile/gguf_mutator.h — a deterministic GGUF mutation corpus: from one valid file, hundreds
// of hostile variants (truncations at every structural boundary, hostile counts and lengths, wrong
// value types for known keys, out-of-range hyper-parameters, bad token ids and merges, bad tensor
// infos, seeded bit flips). The same base always gives the same cases, in the same order.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "weft/gguf/gguf.h"

namespace weft::test {

// A decoded GGUF file that encodes back to the same bytes (for the canonical files writers make).
struct gguf_image {
    uint32_t version = 3;
    std::vector<gguf_kv> kvs;
    std::vector<gguf_tensor_info> tensors;
    size_t alignment = 32;
    std::vector<uint8_t> data;  // the data section

    static gguf_image decode(const std::vector<uint8_t> &bytes, const std::string &name) {
        const auto f = gguf_file::from_memory(bytes.data(), bytes.size(), name);
        gguf_image g;
        g.version = f->version();
        g.kvs = f->kvs();
        g.tensors = f->tensors();
        g.alignment = f->alignment();
        g.data.assign(bytes.begin() + std::ptrdiff_t(f->data_offset()), bytes.end());
        return g;
    }
    const gguf_kv *find(const std::string &key) const {
        for (const auto &kv : kvs)
            if (kv.key == key) return &kv;
        return nullptr;
    }
    // Replaces (or appends) the pair with kv.key.
    void set(gguf_kv kv) {
        if (const gguf_kv *old = find(kv.key))
            kvs[size_t(old - kvs.data())] = std::move(kv);
        else
            kvs.push_back(std::move(kv));
    }
    void remove(const std::string &key) {
        std::erase_if(kvs, [&](const gguf_kv &kv) { return kv.key == key; });
    }
    std::string arch() const {
        const gguf_kv *kv = find("general.architecture");
        return kv && kv->type == gguf_type::string ? kv->strings[0] : std::string("llama");
    }
};

// Values of any type for gguf_image::set.
inline gguf_kv kv_string(const std::string &key, const std::string &v) {
    gguf_kv kv;
    kv.key = key;
    kv.type = gguf_type::string;
    kv.strings = {v};
    return kv;
}
template <class T>
gguf_kv kv_scalar(const std::string &key, gguf_type type, T v) {
    gguf_kv kv;
    kv.key = key;
    kv.type = type;
    kv.raw.resize(sizeof v);
    std::memcpy(kv.raw.data(), &v, sizeof v);
    return kv;
}
template <class T>
gguf_kv kv_array(const std::string &key, gguf_type elem, const std::vector<T> &v) {
    gguf_kv kv;
    kv.key = key;
    kv.type = gguf_type::array;
    kv.array_type = elem;
    kv.n = v.size();
    kv.raw.resize(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(kv.raw.data(), v.data(), kv.raw.size());
    return kv;
}
inline gguf_kv kv_strings(const std::string &key, const std::vector<std::string> &v) {
    gguf_kv kv;
    kv.key = key;
    kv.type = gguf_type::array;
    kv.array_type = gguf_type::string;
    kv.n = v.size();
    kv.strings = v;
    return kv;
}

// Where the encoder put each field of the file.
enum class field_kind {
    magic,
    version,
    tensor_count,
    kv_count,
    key_length,
    key,
    value_type,
    string_length,
    string_bytes,
    scalar,
    array_type,
    array_length,
    array_bytes,
    name_length,
    name,
    n_dims,
    dim,
    tensor_type,
    tensor_offset,
    padding,
    tensor_data,
};
struct gguf_field {
    size_t offset = 0;
    size_t size = 0;
    field_kind kind = field_kind::magic;
    std::string label;  // e.g. "kv 3 'llama.block_count' value type", "tensor 'output.weight' ne[1]"
    int item = -1;      // index of the pair or tensor the field belongs to
};

struct gguf_encoded {
    std::vector<uint8_t> bytes;
    std::vector<gguf_field> fields;
};

inline gguf_encoded encode(const gguf_image &g) {
    gguf_encoded e;
    auto put = [&](const void *p, size_t n, field_kind kind, std::string label, int item) {
        e.fields.push_back({e.bytes.size(), n, kind, std::move(label), item});
        const auto *b = static_cast<const uint8_t *>(p);
        e.bytes.insert(e.bytes.end(), b, b + n);
    };
    auto put_u32 = [&](uint32_t v, field_kind k, std::string l, int item) {
        put(&v, 4, k, std::move(l), item);
    };
    auto put_u64 = [&](uint64_t v, field_kind k, std::string l, int item) {
        put(&v, 8, k, std::move(l), item);
    };
    // a string: its length and its bytes, the latter recorded only when non-empty
    auto put_str = [&](const std::string &s, field_kind len_kind, field_kind bytes_kind, const std::string &l,
                       int item) {
        put_u64(s.size(), len_kind, l + " length", item);
        if (!s.empty()) put(s.data(), s.size(), bytes_kind, l, item);
    };
    put("GGUF", 4, field_kind::magic, "magic", -1);
    put_u32(g.version, field_kind::version, "version", -1);
    put_u64(g.tensors.size(), field_kind::tensor_count, "tensor count", -1);
    put_u64(g.kvs.size(), field_kind::kv_count, "metadata count", -1);
    for (size_t i = 0; i < g.kvs.size(); ++i) {
        const gguf_kv &kv = g.kvs[i];
        const int item = int(i);
        const std::string l = "kv " + std::to_string(i) + " '" + kv.key + "'";
        put_str(kv.key, field_kind::key_length, field_kind::key, l + " key", item);
        put_u32(uint32_t(kv.type), field_kind::value_type, l + " type", item);
        if (kv.type == gguf_type::string) {
            put_str(kv.strings[0], field_kind::string_length, field_kind::string_bytes, l + " string", item);
        } else if (kv.type == gguf_type::array) {
            put_u32(uint32_t(kv.array_type), field_kind::array_type, l + " element type", item);
            put_u64(kv.n, field_kind::array_length, l + " array length", item);
            if (kv.array_type == gguf_type::string) {
                // element 0, 1 and the last are fields of their own; the rest is one run of bytes
                const size_t n = kv.strings.size();
                for (size_t j = 0; j < n; ++j) {
                    const std::string el = l + " element " + std::to_string(j);
                    if (j < 2 || j + 1 == n) {
                        put_str(kv.strings[j], field_kind::string_length, field_kind::string_bytes, el, item);
                    } else {
                        const uint64_t len = kv.strings[j].size();
                        e.bytes.insert(e.bytes.end(), reinterpret_cast<const uint8_t *>(&len),
                                       reinterpret_cast<const uint8_t *>(&len) + 8);
                        e.bytes.insert(e.bytes.end(), kv.strings[j].begin(), kv.strings[j].end());
                    }
                }
            } else if (!kv.raw.empty()) {
                put(kv.raw.data(), kv.raw.size(), field_kind::array_bytes, l + " array data", item);
            }
        } else {
            put(kv.raw.data(), kv.raw.size(), field_kind::scalar, l + " value", item);
        }
    }
    for (size_t i = 0; i < g.tensors.size(); ++i) {
        const gguf_tensor_info &t = g.tensors[i];
        const int item = int(i);
        const std::string l = "tensor " + std::to_string(i) + " '" + t.name + "'";
        put_str(t.name, field_kind::name_length, field_kind::name, l + " name", item);
        put_u32(t.n_dims, field_kind::n_dims, l + " n_dims", item);
        for (uint32_t d = 0; d < t.n_dims; ++d)
            put(&t.ne[d], 8, field_kind::dim, l + " ne[" + std::to_string(d) + "]", item);
        const auto type = int32_t(t.type);
        put(&type, 4, field_kind::tensor_type, l + " type", item);
        put_u64(t.offset, field_kind::tensor_offset, l + " offset", item);
    }
    const size_t pad = (g.alignment - e.bytes.size() % g.alignment) % g.alignment;
    const std::vector<uint8_t> zeros(pad, 0);
    if (pad) put(zeros.data(), pad, field_kind::padding, "alignment padding", -1);
    const size_t data_offset = e.bytes.size();
    e.bytes.insert(e.bytes.end(), g.data.begin(), g.data.end());
    for (size_t i = 0; i < g.tensors.size(); ++i)
        e.fields.push_back({data_offset + size_t(g.tensors[i].offset), g.tensors[i].nbytes,
                            field_kind::tensor_data,
                            "tensor " + std::to_string(i) + " '" + g.tensors[i].name + "' data", int(i)});
    return e;
}

// One case; its bytes are made on demand (a corpus of a megabyte-sized base would not fit in memory).
struct mutation_case {
    std::string name;   // "<base>/<group>/<what>", unique
    std::string group;  // truncate, field, semantic, bitflip
    std::function<std::vector<uint8_t>()> bytes;
};

// Generates the cases of one base file. Every structural field and every pair gets its mutations;
// the per-tensor ones go to a sample of the tensors (first, second, middle, last).
class gguf_mutator {
  public:
    gguf_mutator(std::string base_name, const std::vector<uint8_t> &base_bytes, uint64_t seed)
        : base_(std::move(base_name)), seed_(seed) {
        auto s = std::make_shared<shared>();
        s->image = gguf_image::decode(base_bytes, base_);
        // mutations start from the base as encode() writes it, so every field offset is exact
        s->encoded = encode(s->image);
        s_ = std::move(s);
    }

    std::vector<mutation_case> generate() {
        cases_.clear();
        names_.clear();
        truncations();
        field_patches();
        wrong_value_types();
        hyperparameters();
        token_ids_and_vocab();
        tensor_table();
        bit_flips();
        return std::move(cases_);
    }

  private:
    static constexpr uint64_t u64_max = std::numeric_limits<uint64_t>::max();
    static constexpr int64_t i64_max = std::numeric_limits<int64_t>::max();

    struct shared {
        gguf_image image;
        gguf_encoded encoded;
    };
    const gguf_image &image() const { return s_->image; }
    const std::vector<uint8_t> &bytes() const { return s_->encoded.bytes; }

    void add(const std::string &group, const std::string &what, std::function<std::vector<uint8_t>()> make) {
        std::string name = base_ + "/" + group + "/" + what;
        // a label repeats only where the file repeats a name; keep case names unique anyway
        for (int k = 2; !names_.insert(name).second; ++k)
            name = base_ + "/" + group + "/" + what + " #" + std::to_string(k);
        cases_.push_back({std::move(name), group, std::move(make)});
    }
    // A semantic case: the base decoded, edited, encoded again.
    void add_edit(const std::string &what, std::function<void(gguf_image &)> edit) {
        add("semantic", what, [s = s_, edit = std::move(edit)] {
            gguf_image g = s->image;
            edit(g);
            return encode(g).bytes;
        });
    }
    void add_set(const std::string &what, gguf_kv kv) {
        add_edit(what, [kv = std::move(kv)](gguf_image &g) { g.set(kv); });
    }
    // The base with `v` written over the start of field `f`.
    template <class T>
    void add_patch(const gguf_field &f, const std::string &what, T v) {
        add("field", f.label + " = " + what, [s = s_, at = f.offset, n = std::min(sizeof v, f.size), v] {
            std::vector<uint8_t> b = s->encoded.bytes;
            std::memcpy(b.data() + at, &v, n);
            return b;
        });
    }
    bool sampled_tensor(int item) const {
        const int n = int(image().tensors.size());
        return item == 0 || item == 1 || item == n / 2 || item == n - 1;
    }
    uint64_t field_u64(const gguf_field &f) const {
        uint64_t v = 0;
        std::memcpy(&v, bytes().data() + f.offset, 8);
        return v;
    }

    // The file cut at the start of every field and in the middle of every field longer than a byte.
    void truncations() {
        std::set<size_t> cuts;
        auto cut = [&](size_t at, const std::string &what) {
            if (at >= bytes().size() || !cuts.insert(at).second) return;
            add("truncate", what + " (" + std::to_string(at) + ")", [s = s_, at] {
                return std::vector<uint8_t>(s->encoded.bytes.begin(),
                                            s->encoded.bytes.begin() + std::ptrdiff_t(at));
            });
        };
        for (const gguf_field &f : s_->encoded.fields) {
            // the fields of a sampled tensor (its info, its data); the start of the others' infos
            const bool tensor_field = f.kind >= field_kind::name_length && f.kind != field_kind::padding;
            if (tensor_field && !sampled_tensor(f.item)) {
                if (f.kind == field_kind::name_length) cut(f.offset, "at " + f.label);
                continue;
            }
            cut(f.offset, "at " + f.label);
            if (f.size > 1) cut(f.offset + f.size / 2, "inside " + f.label);
        }
        cut(bytes().size() - 1, "last byte missing");
    }

    // Hostile values written over counts, lengths, types, dimensions and offsets.
    void field_patches() {
        const std::vector<uint64_t> huge = {uint64_t(1) << 31, uint64_t(1) << 32, uint64_t(1) << 63, u64_max};
        const uint64_t data_size = image().data.size();
        const int n_kv = int(image().kvs.size());
        for (const gguf_field &f : s_->encoded.fields) {
            auto huge_u64 = [&] {
                for (uint64_t v : huge) add_patch(f, std::to_string(v), v);
            };
            switch (f.kind) {
                case field_kind::version:
                    for (uint32_t v : {0u, 1u, 2u, 4u, 0x03000000u, 0xffffffffu})
                        add_patch(f, std::to_string(v), v);
                    break;
                case field_kind::tensor_count:
                case field_kind::kv_count: {
                    const uint64_t n = field_u64(f);
                    add_patch(f, "count + 1", n + 1);
                    if (n > 0) add_patch(f, "count - 1", n - 1);
                    add_patch(f, "0", uint64_t(0));
                    huge_u64();
                    break;
                }
                case field_kind::key_length:
                case field_kind::string_length:
                case field_kind::array_length:
                    // every value length, every array length, the key length of every fourth pair
                    if (f.kind != field_kind::key_length || f.item % 4 == 0 || f.item + 1 == n_kv) {
                        const uint64_t n = field_u64(f);
                        add_patch(f, "length + 1", n + 1);
                        if (n > 0) add_patch(f, "length - 1", n - 1);
                        huge_u64();
                    }
                    break;
                case field_kind::value_type:
                    for (uint32_t v : {4u, 8u, 9u, 13u, 0xffffffffu}) add_patch(f, std::to_string(v), v);
                    break;
                case field_kind::array_type:
                    for (uint32_t v : {0u, 4u, 8u, 9u, 12u, 13u}) add_patch(f, std::to_string(v), v);
                    break;
                case field_kind::name_length:
                    if (sampled_tensor(f.item)) {
                        add_patch(f, "0", uint64_t(0));
                        huge_u64();
                    }
                    break;
                case field_kind::n_dims:
                    if (sampled_tensor(f.item))
                        for (uint32_t v : {0u, 3u, 5u, 0xffffffffu}) add_patch(f, std::to_string(v), v);
                    break;
                case field_kind::dim:
                    if (sampled_tensor(f.item))
                        for (int64_t v : {int64_t(0), int64_t(-1), int64_t(1), int64_t(3), int64_t(1) << 31,
                                          int64_t(1) << 40, int64_t(1) << 62, i64_max,
                                          std::numeric_limits<int64_t>::min()})
                            add_patch(f, std::to_string(v), v);
                    break;
                case field_kind::tensor_type:
                    if (sampled_tensor(f.item))
                        // unknown ids (4 and 5 are retired), then real types the data does not match
                        for (int32_t v : {-1, 4, 5, 41, 1000, std::numeric_limits<int32_t>::min(), 1, 8, 12,
                                          14, 20, 24, 26, 30})
                            add_patch(f, std::to_string(v), v);
                    break;
                case field_kind::tensor_offset:
                    if (sampled_tensor(f.item)) {
                        const uint64_t off = image().tensors[size_t(f.item)].offset;
                        const uint64_t a = image().alignment;
                        add_patch(f, "offset + 1 (misaligned)", off + 1);
                        add_patch(f, "offset + alignment", off + a);
                        if (off >= a) add_patch(f, "offset - alignment", off - a);
                        add_patch(f, "end of data", data_size / a * a);
                        add_patch(f, "past end of data", (data_size / a + 1) * a);
                        add_patch(f, "aligned near 2^64", u64_max / a * a);
                        huge_u64();
                        // overlap: the offset of the next tensor (the first, for the last)
                        const size_t other =
                            size_t(f.item) + 1 < image().tensors.size() ? size_t(f.item) + 1 : 0;
                        if (other != size_t(f.item))
                            add_patch(f, "offset of tensor " + std::to_string(other),
                                      image().tensors[other].offset);
                    }
                    break;
                default:
                    break;
            }
        }
        // dimensions that are each fine but whose product overflows int64
        if (!image().tensors.empty()) {
            for (const auto &[what, ne] : std::vector<std::pair<std::string, std::array<int64_t, 4>>>{
                     {"2^65", {int64_t(1) << 32, int64_t(1) << 16, int64_t(1) << 16, 2}},
                     {"just above int64", {3037000500, 3037000500, 1, 1}},
                     {"just above uint64 in bytes", {int64_t(1) << 31, int64_t(1) << 30, 1, 1}}}) {
                add("field", "last tensor dims product " + what, [s = s_, ne] {
                    gguf_image g = s->image;
                    gguf_tensor_info &t = g.tensors.back();
                    t.n_dims = 4;
                    std::copy(ne.begin(), ne.end(), t.ne);
                    return encode(g).bytes;
                });
            }
        }
    }

    // Every pair replaced by a value of each other type, and removed.
    void wrong_value_types() {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        for (const gguf_kv &orig : image().kvs) {
            const std::string &k = orig.key;
            for (auto &[what, kv] : std::vector<std::pair<std::string, gguf_kv>>{
                     {"string", kv_string(k, "x")},
                     {"u32 7", kv_scalar(k, gguf_type::u32, uint32_t(7))},
                     {"i8 -1", kv_scalar(k, gguf_type::i8, int8_t(-1))},
                     {"f32 nan", kv_scalar(k, gguf_type::f32, nan)},
                     {"bool", kv_scalar(k, gguf_type::boolean, uint8_t(1))},
                     {"i32 array", kv_array<int32_t>(k, gguf_type::i32, {1, 2, 3})},
                     {"string array", kv_strings(k, {"a", "b"})},
                     {"empty u32 array", kv_array<uint32_t>(k, gguf_type::u32, {})},
                 }) {
                if (kv.type == orig.type && kv.array_type == orig.array_type) continue;
                add_set("type " + k + " as " + what, kv);
            }
            add_edit("missing " + k, [k](gguf_image &g) { g.remove(k); });
        }
    }

    // Hyper-parameters out of range: zero, negative, huge, not dividing each other.
    void hyperparameters() {
        const std::string a = s_->image.arch() + ".";
        for (const char *suffix :
             {"context_length", "embedding_length", "block_count", "feed_forward_length",
              "attention.head_count", "attention.head_count_kv", "attention.key_length",
              "attention.value_length", "rope.dimension_count", "expert_count", "expert_used_count",
              "expert_feed_forward_length", "attention.sliding_window", "vocab_size",
              "rope.scaling.original_context_length", "attention.q_lora_rank", "attention.kv_lora_rank",
              "leading_dense_block_count", "pooling_type"}) {
            const std::string key = a + suffix;
            for (int64_t v : {int64_t(0), int64_t(-1), int64_t(1), int64_t(3), int64_t(7), int64_t(1) << 31,
                              int64_t(1) << 40, int64_t(1) << 62, i64_max})
                add_set(key + " = " + std::to_string(v), kv_scalar(key, gguf_type::i64, v));
            add_set(key + " = u64 max", kv_scalar(key, gguf_type::u64, u64_max));
        }
        const float inf = std::numeric_limits<float>::infinity();
        for (const char *suffix :
             {"attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon", "rope.freq_base",
              "rope.scaling.factor", "rope.scale_linear", "attn_logit_softcapping", "final_logit_softcapping",
              "expert_weights_scale"}) {
            const std::string key = a + suffix;
            for (float v : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), inf, -inf, 1e38f, 1e-45f})
                add_set(key + " = " + std::to_string(v), kv_scalar(key, gguf_type::f32, v));
        }
        for (const char *type : {"yarn", "linear", "longrope", "", "none"}) {
            add_edit(a + "rope.scaling.type '" + type + "' with a tiny factor", [a, type](gguf_image &g) {
                g.set(kv_string(a + "rope.scaling.type", type));
                g.set(kv_scalar(a + "rope.scaling.factor", gguf_type::f32, 1e-30f));
            });
        }
        // per-layer arrays: the wrong length, a zero, a huge entry
        for (const char *suffix :
             {"attention.head_count", "attention.head_count_kv", "feed_forward_length"}) {
            for (const auto &[what, v] : std::vector<std::pair<std::string, std::vector<int32_t>>>{
                     {"empty", {}},
                     {"too long", std::vector<int32_t>(4097, 4)},
                     {"zeros", std::vector<int32_t>(64, 0)},
                     {"huge", std::vector<int32_t>(64, std::numeric_limits<int32_t>::max())}})
                add_set(a + suffix + " per layer " + what, kv_array(a + suffix, gguf_type::i32, v));
        }
        // a different architecture over the same tensors and keys
        for (const char *arch : {"qwen2", "qwen3", "qwen2moe", "gemma", "gemma2", "phi2", "phi3", "deepseek2",
                                 "command-r", "bert", "olmo2", "starcoder2", "granite", "nonexistent", ""})
            add_set(std::string("architecture '") + arch + "'", kv_string("general.architecture", arch));
        for (uint32_t v : {0u, 1u, 3u, 64u, 1u << 31}) {
            add_edit("general.alignment = " + std::to_string(v), [v](gguf_image &g) {
                g.set(kv_scalar("general.alignment", gguf_type::u32, v));
                if (v != 0 && (v & (v - 1)) == 0 && v <= 64) g.alignment = v;  // a valid file again
            });
        }
    }

    void token_ids_and_vocab() {
        const gguf_kv *tokens = s_->image.find("tokenizer.ggml.tokens");
        const int64_t n_vocab = tokens ? int64_t(tokens->n) : 0;
        for (const char *id : {"bos", "eos", "unknown", "eot", "eom", "padding", "seperator", "mask"}) {
            const std::string key = std::string("tokenizer.ggml.") + id + "_token_id";
            for (int64_t v : {n_vocab, n_vocab + 1, int64_t(1) << 31, int64_t(-2), i64_max,
                              std::numeric_limits<int64_t>::min()})
                add_set(key + " = " + std::to_string(v), kv_scalar(key, gguf_type::i64, v));
            add_set(key + " = u32 0xfffffffe", kv_scalar(key, gguf_type::u32, uint32_t(0xfffffffe)));
        }
        if (!tokens) return;
        const std::vector<std::string> texts = tokens->strings;
        const auto n = size_t(n_vocab);
        auto with_tokens = [&](const std::string &what,
                               std::function<void(std::vector<std::string> &)> change) {
            add_edit("tokens " + what, [texts, change = std::move(change)](gguf_image &g) {
                std::vector<std::string> v = texts;
                change(v);
                g.set(kv_strings("tokenizer.ggml.tokens", v));
            });
        };
        with_tokens("empty", [](auto &v) { v.clear(); });
        with_tokens("one", [](auto &v) { v.resize(1); });
        with_tokens("half as many", [](auto &v) { v.resize(v.size() / 2); });
        with_tokens("all the same", [](auto &v) { std::fill(v.begin(), v.end(), "a"); });
        with_tokens("all empty", [](auto &v) { std::fill(v.begin(), v.end(), ""); });
        with_tokens("with invalid UTF-8 and NUL", [](auto &v) {
            for (size_t i = 0; i < v.size(); i += 3) v[i] = std::string("\xff\xfe\x00\x80", 4) + v[i];
        });
        with_tokens("with a 64 KiB token", [](auto &v) { v.back() = std::string(1 << 16, 'a'); });
        for (const char *key : {"tokenizer.ggml.scores", "tokenizer.ggml.token_type"})
            add_set(std::string(key) + " too short", kv_array<int32_t>(key, gguf_type::i32, {1, 2}));
        add_set("token types all 99",
                kv_array("tokenizer.ggml.token_type", gguf_type::i32, std::vector<int32_t>(n, 99)));
        add_set("token types all control",
                kv_array("tokenizer.ggml.token_type", gguf_type::i32, std::vector<int32_t>(n, 3)));
        add_set("scores all NaN", kv_array("tokenizer.ggml.scores", gguf_type::f32,
                                           std::vector<float>(n, std::numeric_limits<float>::quiet_NaN())));
        for (const char *model : {"llama", "gpt2", "bert", "rwkv", ""})
            add_set(std::string("tokenizer model '") + model + "'", kv_string("tokenizer.ggml.model", model));
        const std::string pair = n > 5 ? texts[4] + " " + texts[5] : "a b";
        for (const char *pre : {"default", "llama3", "qwen2", "nonexistent"}) {
            add_edit(std::string("gpt2 with pre '") + pre + "'", [pre, pair](gguf_image &g) {
                g.set(kv_string("tokenizer.ggml.model", "gpt2"));
                g.set(kv_string("tokenizer.ggml.pre", pre));
                g.set(kv_strings("tokenizer.ggml.merges", {pair}));
            });
        }
        // merges: missing tokens, malformed lines, missing results, many duplicates (as gpt2)
        const std::string t1 = n > 1 ? texts[1] : "a";
        for (const auto &[what, merges] : std::vector<std::pair<std::string, std::vector<std::string>>>{
                 {"referencing missing tokens", {"\xe2\x80\xbdnot-a-token also-missing", "zz qq"}},
                 {"without a space", {"ab", t1}},
                 {"empty lines", {"", " ", "  "}},
                 {"three parts", {"a b c"}},
                 {"whose result is missing", {t1 + " " + t1}},
                 {"duplicated", std::vector<std::string>(4096, "a b")},
                 {"invalid UTF-8", {"\xff \xfe", std::string("\x00 \x00", 3)}}}) {
            add_edit("merges " + what, [merges](gguf_image &g) {
                g.set(kv_strings("tokenizer.ggml.merges", merges));
                g.set(kv_string("tokenizer.ggml.model", "gpt2"));
            });
        }
    }

    // Tensors missing, renamed, extra, with shapes that disagree with the hyper-parameters.
    void tensor_table() {
        const size_t n = image().tensors.size();
        for (size_t i = 0; i < n; ++i) {
            if (!sampled_tensor(int(i)) && i % 7 != 3) continue;
            const gguf_tensor_info &t = image().tensors[i];
            const std::string l = "tensor '" + t.name + "'";
            add_edit("without " + l,
                     [i](gguf_image &g) { g.tensors.erase(g.tensors.begin() + std::ptrdiff_t(i)); });
            add_edit(l + " renamed", [i](gguf_image &g) { g.tensors[i].name += ".renamed"; });
            if (t.ne[0] != t.ne[1])
                add_edit(l + " transposed",
                         [i](gguf_image &g) { std::swap(g.tensors[i].ne[0], g.tensors[i].ne[1]); });
            if (t.ne[0] >= 64 && t.ne[0] % 64 == 0) {
                // the same bytes as half the columns at twice the rows: a consistent size, a wrong shape
                add_edit(l + " reshaped", [i](gguf_image &g) {
                    g.tensors[i].ne[0] /= 2;
                    g.tensors[i].ne[1] *= 2;
                    g.tensors[i].n_dims = std::max<uint32_t>(g.tensors[i].n_dims, 2);
                });
            }
        }
        if (n == 0) return;
        add_edit("an extra tensor overlapping the first", [](gguf_image &g) {
            gguf_tensor_info extra = g.tensors[0];
            extra.name = "blk.999.unknown.weight";
            g.tensors.push_back(extra);
        });
        add_edit("every tensor at offset 0", [](gguf_image &g) {
            for (auto &t : g.tensors) t.offset = 0;
        });
        add_edit("no tensors", [](gguf_image &g) { g.tensors.clear(); });
    }

    // Single bits flipped at seeded positions (three in four in the header, the rest in the data),
    // and eight random bytes over seeded header positions.
    void bit_flips() {
        std::mt19937_64 rng(seed_);
        const size_t size = bytes().size(), header = size - image().data.size();
        for (int i = 0; i < 96; ++i) {
            const bool in_data = i % 4 == 3 && header < size;
            const size_t pos = in_data ? header + size_t(rng() % (size - header)) : size_t(rng() % header);
            const auto mask = uint8_t(1u << (rng() % 8));
            add("bitflip", "byte " + std::to_string(pos) + " mask " + std::to_string(mask),
                [s = s_, pos, mask] {
                    std::vector<uint8_t> b = s->encoded.bytes;
                    b[pos] ^= mask;
                    return b;
                });
        }
        for (int i = 0; i < 16; ++i) {
            const size_t pos = size_t(rng() % header);
            const uint64_t noise = rng();
            add("bitflip", "8 random bytes at " + std::to_string(pos), [s = s_, pos, noise] {
                std::vector<uint8_t> b = s->encoded.bytes;
                std::memcpy(b.data() + pos, &noise, std::min<size_t>(8, b.size() - pos));
                return b;
            });
        }
    }

    std::string base_;
    uint64_t seed_;
    std::shared_ptr<const shared> s_;
    std::vector<mutation_case> cases_;
    std::set<std::string> names_;
};

}  // namespace weft::test
