// src/model/tensor_loader.cpp — weights by name: existence and shape checks, placement into the mapping.
#include "model/tensor_loader.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "weft/backends/cpu.h"
#include "weft/core/backend.h"
#include "weft/core/error.h"

namespace weft {

namespace {

std::string shape_text(std::span<const int64_t> ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// ne without trailing 1s (at least one entry)
std::vector<int64_t> trimmed(std::span<const int64_t> ne) {
    std::vector<int64_t> v(ne.begin(), ne.end());
    while (v.size() > 1 && v.back() == 1) v.pop_back();
    return v;
}

}  // namespace

mapped_tensors map_tensors(const gguf_set &f) {
    mapped_tensors m;
    for (size_t i = 0; i < f.n_parts(); ++i) {
        const gguf_file &part = f.part(i);
        const uint8_t *base = part.data_base();
        if (!base) throw error(part.path() + ": the file has no tensor data");
        m.buffers.push_back(cpu_buffer_from_host_ptr(const_cast<uint8_t *>(base), part.data_size()));
    }
    context_params cp;
    cp.mem_size = context_overhead(f.tensors().size() + 8);
    cp.no_alloc = true;
    m.ctx = std::make_unique<context>(cp);
    return m;
}

std::string block_tensor_name(int64_t il, const char *what, const char *suffix) {
    return "blk." + std::to_string(il) + "." + what + "." + suffix;
}

tensor_loader::tensor_loader(const gguf_set &f, context &ctx,
                             std::span<const std::unique_ptr<backend_buffer>> buffers)
    : f_(f), ctx_(ctx), buffers_(buffers) {}

tensor *tensor_loader::create(const std::string &name, std::initializer_list<int64_t> ne) {
    return create_impl(name, ne, true);
}

tensor *tensor_loader::create_optional(const std::string &name, std::initializer_list<int64_t> ne) {
    return create_impl(name, ne, false);
}

tensor *tensor_loader::create_impl(const std::string &name, std::initializer_list<int64_t> ne,
                                   bool required) {
    const gguf_tensor_info *info = f_.find_tensor(name);
    if (!info) {
        if (required) throw error(f_.path() + ": missing tensor '" + name + "'");
        return nullptr;
    }
    const std::span<const int64_t> expected(ne.begin(), ne.size());
    const std::span<const int64_t> found(info->ne, info->n_dims);
    if (trimmed(expected) != trimmed(found))
        throw error(f_.part(info->part).path() + ": tensor '" + name + "' has shape " + shape_text(found) +
                    ", expected " + shape_text(expected));
    if (!created_.insert(name).second) throw error(f_.path() + ": tensor '" + name + "' is used twice");

    tensor *t = ctx_.new_tensor(info->type, found);
    t->set_name(name);
    t->flags |= tensor_flag_param;
    if (!buffers_.empty()) {
        const gguf_file &part = f_.part(info->part);
        buffers_[info->part]->place(*t, size_t(info->offset));
        // The kernels read weights where they lie, as elements of their type: a file whose
        // general.alignment (1 or 2) leaves a tensor at an odd address cannot be read in place.
        const size_t need = std::min<size_t>(type_traits(info->type).type_size, 4);
        if (t->data && reinterpret_cast<uintptr_t>(t->data) % need != 0)
            throw error(part.path() + ": tensor " + weft::quoted(name) + ": data at file offset " +
                        std::to_string(part.data_offset() + info->offset) + " is not aligned to " +
                        std::to_string(need) + " bytes (general.alignment " +
                        std::to_string(part.alignment()) + "); weft reads weights in place");
    }
    return t;
}

void tensor_loader::check_all_used(const std::string &arch) const {
    if (created_.size() == f_.tensors().size()) return;
    for (const gguf_tensor_info &t : f_.tensors())
        if (!created_.count(t.name))
            throw error(f_.part(t.part).path() + ": tensor " + weft::quoted(t.name) + " is not part of the " +
                        arch + " architecture (" + std::to_string(f_.tensors().size() - created_.size()) +
                        " unused tensors)");
}

}  // namespace weft
