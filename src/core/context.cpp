// src/core/context.cpp — the arena context: tensor metadata (and data) carved from one block.
#include "weft/core/context.h"

#include <limits>
#include <new>
#include <string>

#include "weft/core/checked.h"
#include "weft/core/error.h"

namespace weft {

namespace {
constexpr size_t data_alignment = 64;
}  // namespace

size_t context_overhead(size_t n_tensors) {
    return n_tensors * align_up(sizeof(tensor), alignof(tensor)) + 64;
}

context::context(context_params params) : params_(params) {
    if (params_.mem_size == 0) params_.mem_size = context_overhead(16);
    block_.reset(new std::byte[params_.mem_size + data_alignment]);
}

context::~context() {
    for (tensor *t : tensors_) t->~tensor();
}

void *context::take(size_t bytes, size_t align) {
    auto base = reinterpret_cast<uintptr_t>(block_.get());
    uintptr_t start = align_up(base + used_, align);
    const size_t end = start - base + bytes;
    if (end > params_.mem_size + data_alignment || end - (start - base) != bytes)
        throw error("context out of memory: need " + std::to_string(bytes) + " more bytes, " +
                    std::to_string(params_.mem_size - std::min(used_, params_.mem_size)) + " of " +
                    std::to_string(params_.mem_size) + " left");
    used_ = end;
    return reinterpret_cast<void *>(start);
}

tensor *context::new_tensor(dtype t, std::span<const int64_t> ne) {
    const auto &ti = type_traits(t);
    if (!ti.known) throw error("new_tensor: unknown type id " + std::to_string(int(t)));
    if (ne.empty() || ne.size() > max_dims)
        throw error("new_tensor: " + std::to_string(ne.size()) + " dimensions (1 to 4 allowed)");
    int64_t count = 1;
    for (int64_t n : ne) {
        if (n < 0) throw error("new_tensor: negative dimension " + std::to_string(n));
        count = checked_mul(count, n, "new_tensor: element count");
    }
    if (ne[0] % ti.block_size != 0)
        throw error("new_tensor: ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " + ti.name +
                    " block size " + std::to_string(ti.block_size));
    // the byte size too (nbytes() and the strides below then cannot wrap)
    checked_mul(uint64_t(count / ti.block_size), uint64_t(ti.type_size), "new_tensor: byte size");

    auto *tn = new (take(sizeof(tensor), alignof(tensor))) tensor();
    tensors_.push_back(tn);
    tn->type = t;
    for (size_t i = 0; i < ne.size(); ++i) tn->ne[i] = ne[i];
    tn->nb[0] = ti.type_size;
    tn->nb[1] = size_t(tn->ne[0] / ti.block_size) * ti.type_size;
    for (int i = 2; i < max_dims; ++i) tn->nb[i] = tn->nb[i - 1] * size_t(tn->ne[i - 1]);
    if (!params_.no_alloc) tn->data = take(std::max<size_t>(tn->nbytes(), 1), data_alignment);
    return tn;
}

tensor *context::dup_tensor(const tensor &src) {
    return new_tensor(src.type, std::span<const int64_t>(src.ne, size_t(src.n_dims())));
}

tensor *context::new_view(tensor &src, dtype t, std::span<const int64_t> ne, std::span<const size_t> nb,
                          size_t offset) {
    WEFT_ASSERT(!ne.empty() && ne.size() <= max_dims && nb.size() == ne.size());
    tensor *base = src.view_src ? src.view_src : &src;
    const size_t base_offs = (src.view_src ? src.view_offs : 0) + offset;
    auto *tn = new (take(sizeof(tensor), alignof(tensor))) tensor();
    tensors_.push_back(tn);
    tn->type = t;
    for (size_t i = 0; i < ne.size(); ++i) {
        tn->ne[i] = ne[i];
        tn->nb[i] = nb[i];
    }
    // dims past ne.size() are 1 with strides that keep the tensor contiguous when it is
    for (size_t i = ne.size(); i < max_dims; ++i) tn->nb[i] = tn->nb[i - 1] * size_t(tn->ne[i - 1]);
    if (tn->nbytes() + base_offs > base->nbytes())
        throw error("view of '" + std::string(src.name) + "' " + src.shape_str() + ": view " +
                    tn->shape_str() + " at offset " + std::to_string(offset) +
                    " runs past the end of its source");
    tn->view_src = base;
    tn->view_offs = base_offs;
    tn->buffer = base->buffer;
    if (base->data) tn->data = static_cast<char *>(base->data) + base_offs;
    return tn;
}

tensor *context::find(std::string_view name) const {
    for (tensor *t : tensors_)
        if (name == t->name) return t;
    return nullptr;
}

}  // namespace weft
