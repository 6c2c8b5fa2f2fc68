// src/model/lora.cpp — LoRA adapters: reading and checking them against a base model, and merging
// them into a new model file.
#include "weft/model/lora.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "model/tensor_loader.h"
#include "weft/core/backend.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/model/model.h"
#include "weft/quant/quant.h"

namespace weft {

namespace {

constexpr std::string_view suffix_a = ".lora_a", suffix_b = ".lora_b";

std::string shape_of(const gguf_tensor_info &t) {
    std::string s = "[";
    for (uint32_t i = 0; i < t.n_dims; ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
    return s + "]";
}

// Rows of a tensor as floats (any type with traits).
std::vector<float> rows_as_float(const gguf_set &f, const gguf_tensor_info &t) {
    const int64_t n_per_row = t.ne[0];
    int64_t n_rows = 1;
    for (uint32_t i = 1; i < t.n_dims; ++i) n_rows *= t.ne[i];
    std::vector<float> out(static_cast<size_t>(n_per_row * n_rows));
    const uint8_t *src = f.tensor_data(t);
    const size_t row_bytes = row_size(t.type, n_per_row);
    const quant_traits &q = quant_traits_of(t.type);
    for (int64_t r = 0; r < n_rows; ++r)
        q.to_float(src + size_t(r) * row_bytes, out.data() + r * n_per_row, n_per_row);
    return out;
}

}  // namespace

void check_lora_scale(double scale, const std::string &what) {
    if (!std::isfinite(scale) || std::fabs(scale) > lora_max_scale)
        throw error(what + ": the LoRA scale " + std::to_string(scale) + " is not a finite number in [-" +
                    std::to_string(int(lora_max_scale)) + ", " + std::to_string(int(lora_max_scale)) + "]");
}

void check_lora_alpha(double alpha, const std::string &what) {
    if (!std::isfinite(alpha) || alpha < 0.0 || alpha > lora_max_alpha)
        throw error(what + ": adapter.lora.alpha " + std::to_string(alpha) +
                    " is not a finite number in [0, " + std::to_string(int(lora_max_alpha)) + "]");
}

lora_adapter::~lora_adapter() = default;

std::unique_ptr<lora_adapter> lora_adapter::load(const std::string &path, const model &base) {
    std::unique_ptr<lora_adapter> a(new lora_adapter());
    a->path_ = path;
    a->file_ = gguf_set::open(path);
    const gguf_set &files = *a->file_;
    const gguf_file &f = files.metadata();
    auto quoted_or_absent = [](const std::optional<std::string> &s) {
        return s ? weft::quoted(*s) : "absent";
    };
    const auto type = f.get_string("general.type");
    if (!type || *type != "adapter")
        throw error(path + ": not a LoRA adapter (general.type is " + quoted_or_absent(type) +
                    ", expected \"adapter\")");
    const auto adapter_type = f.get_string("adapter.type");
    if (!adapter_type || *adapter_type != "lora")
        throw error(path + ": adapter.type is " + quoted_or_absent(adapter_type) +
                    "; weft reads \"lora\" adapters");
    const auto arch = f.get_string("general.architecture");
    if (!arch || *arch != base.arch_name())
        throw error(path + ": an adapter for " + quoted_or_absent(arch) + ", the model " + base.path() +
                    " is " + weft::quoted(base.arch_name()));
    const double alpha = f.get_float("adapter.lora.alpha").value_or(0.0);
    check_lora_alpha(alpha, path);
    a->alpha_ = float(alpha);
    if (files.tensors().empty()) throw error(path + ": the adapter holds no tensors");

    // pair the tensors by the weight they adapt
    std::map<std::string, std::pair<const gguf_tensor_info *, const gguf_tensor_info *>> stems;
    for (const gguf_tensor_info &t : files.tensors()) {
        const std::string_view name = t.name;
        const bool is_a = name.ends_with(suffix_a), is_b = name.ends_with(suffix_b);
        if (!is_a && !is_b)
            throw error(path + ": tensor " + weft::quoted(t.name) + " is neither a .lora_a nor a .lora_b");
        auto &slot = stems[std::string(name.substr(0, name.size() - suffix_a.size()))];
        (is_a ? slot.first : slot.second) = &t;
    }
    mapped_tensors mapped = map_tensors(files);
    a->buffers_ = std::move(mapped.buffers);
    a->ctx_ = std::move(mapped.ctx);
    tensor_loader tl(files, *a->ctx_, a->buffers_);
    for (const auto &[stem, ab] : stems) {
        if (!ab.first || !ab.second)
            throw error(path + ": " + weft::quoted(stem + std::string(ab.first ? suffix_b : suffix_a)) +
                        " is missing (every .lora_a needs its .lora_b)");
        const std::string weight = stem + ".weight";
        const gguf_tensor_info *w = base.files().find_tensor(weight);
        if (!w)
            throw error(path + ": adapts " + weft::quoted(weight) + ", which the model " + base.path() +
                        " does not have");
        if (w->n_dims != 2)
            throw error(path + ": adapts " + weft::quoted(weight) + " of shape " + shape_of(*w) +
                        "; only matrices are adapted (not expert stacks)");
        const int64_t n_in = w->ne[0], n_out = w->ne[1];
        const gguf_tensor_info &ta = *ab.first;
        const int64_t rank = ta.n_dims >= 2 ? ta.ne[1] : 1;
        if (rank < 1 || ta.ne[0] != n_in)
            throw error(path + ": " + weft::quoted(ta.name) + " has shape " + shape_of(ta) + ", expected [" +
                        std::to_string(n_in) + ", r] for " + weft::quoted(weight) + " of shape " +
                        shape_of(*w));
        for (const gguf_tensor_info *t : {ab.first, ab.second})
            if (!has_quant_traits(t->type))
                throw error(path + ": " + weft::quoted(t->name) + " is of type " + type_name(t->type) +
                            ", which has no conversion to float (adapters are f32, f16, bf16 or quantized)");
        pair p;
        p.rank = rank;
        p.a = tl.create(ta.name, {n_in, rank});
        p.b = tl.create(ab.second->name, {rank, n_out});
        a->pairs_.emplace(weight, p);
    }
    return a;
}

const lora_adapter::pair *lora_adapter::find(const std::string &weight_name) const {
    const auto it = pairs_.find(weight_name);
    return it == pairs_.end() ? nullptr : &it->second;
}

int64_t lora_merge_write(const std::string &base_path, std::span<const lora_use> loras,
                         const std::string &out_path) {
    const auto base = gguf_set::open(base_path);
    gguf_writer w;
    for (const gguf_kv &kv : base->metadata().kvs())
        if (!gguf_is_split_key(kv.key)) w.set_kv(kv);  // a split base is written as one file
    int64_t merged = 0;
    for (const gguf_tensor_info &t : base->tensors()) {
        std::vector<std::pair<const lora_adapter *, float>> uses;
        for (const lora_use &u : loras)
            if (u.adapter && u.scale != 0.0f && u.adapter->find(t.name)) uses.push_back({u.adapter, u.scale});
        const std::span<const int64_t> ne(t.ne, t.n_dims);
        if (uses.empty()) {
            w.add_tensor(t.name, t.type, ne, base->tensor_data(t), t.nbytes);
            continue;
        }
        if (!has_quant_traits(t.type))
            throw error(base_path + ": tensor " + weft::quoted(t.name) + " of type " + type_name(t.type) +
                        " cannot be merged (no conversion to float)");
        ++merged;
        const gguf_set *file = base.get();
        const gguf_tensor_info info = t;
        w.add_tensor_fill(t.name, t.type, ne, [file, info, uses](uint8_t *dst, size_t nbytes) {
            const int64_t n_in = info.ne[0], n_out = info.ne[1];
            std::vector<float> wf = rows_as_float(*file, info);
            for (const auto &[adapter, scale] : uses) {
                const lora_adapter::pair &p = *adapter->find(info.name);
                const float factor = adapter->factor(p, scale);
                // A [r rows of n_in], B [n_out rows of r] as floats; W[o][i] += factor · Σ_k B[o][k] A[k][i]
                auto as_float = [](const tensor &x) {
                    std::vector<float> v(size_t(x.nelements()));
                    const quant_traits &q = quant_traits_of(x.type);
                    const size_t row_bytes = row_size(x.type, x.ne[0]);
                    for (int64_t r = 0; r < x.nrows(); ++r)
                        q.to_float(static_cast<const uint8_t *>(x.data) + size_t(r) * row_bytes,
                                   v.data() + r * x.ne[0], x.ne[0]);
                    return v;
                };
                const std::vector<float> a = as_float(*p.a), b = as_float(*p.b);
                const int64_t r = p.rank;
                std::vector<double> row(static_cast<size_t>(n_in));
                for (int64_t o = 0; o < n_out; ++o) {
                    std::fill(row.begin(), row.end(), 0.0);
                    for (int64_t k = 0; k < r; ++k) {
                        const double bk = b[size_t(o * r + k)];
                        const float *ak = a.data() + k * n_in;
                        for (int64_t i = 0; i < n_in; ++i) row[size_t(i)] += bk * double(ak[i]);
                    }
                    float *wo = wf.data() + o * n_in;
                    for (int64_t i = 0; i < n_in; ++i)
                        wo[i] = float(double(wo[i]) + double(factor) * row[size_t(i)]);
                }
            }
            // an adapter whose products overflow would leave a model whose every logit is NaN
            for (size_t i = 0; i < wf.size(); ++i)
                if (!std::isfinite(wf[i]))
                    throw error("merging " + info.name + ": the merged weight " + std::to_string(i) +
                                " is not finite (the adapters' values or scales are too large)");
            const size_t written = quantize_rows(info.type, wf.data(), dst, n_out, n_in);
            if (written != nbytes)
                throw error("merging " + info.name + ": wrote " + std::to_string(written) + " bytes");
        });
    }
    w.write(out_path);
    return merged;
}

}  // namespace weft
