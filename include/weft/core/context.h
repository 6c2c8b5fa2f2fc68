// weft/core/context.h — the arena: tensors (and, unless no_alloc, their data) from one block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "weft/core/tensor.h"

namespace weft {

struct context_params {
    size_t mem_size = 0;    // bytes of the block: tensor metadata plus, unless no_alloc, data
    bool no_alloc = false;  // metadata only: data stays null until a planner or loader sets it
};

// Bytes of arena needed for n tensors' metadata (to size a no_alloc context).
size_t context_overhead(size_t n_tensors);

class context {
  public:
    explicit context(context_params params);
    ~context();
    context(const context &) = delete;
    context &operator=(const context &) = delete;

    // ne has 1..4 entries; throws weft::error when the block is exhausted (naming the sizes) or a
    // dimension is negative / the element count overflows / ne[0] is not a multiple of the block.
    tensor *new_tensor(dtype t, std::span<const int64_t> ne);
    tensor *new_tensor(dtype t, std::initializer_list<int64_t> ne) {
        return new_tensor(t, std::span<const int64_t>(ne.begin(), ne.size()));
    }
    // same type and shape, fresh data (or none)
    tensor *dup_tensor(const tensor &src);
    // a tensor that shares src's memory: view_src/view_offs set, data follows src's when present
    tensor *new_view(tensor &src, dtype t, std::span<const int64_t> ne, std::span<const size_t> nb,
                     size_t offset);

    tensor *find(std::string_view name) const;
    const std::vector<tensor *> &tensors() const { return tensors_; }

    bool no_alloc() const { return params_.no_alloc; }
    void set_no_alloc(bool v) { params_.no_alloc = v; }
    size_t used_bytes() const { return used_; }
    size_t capacity() const { return params_.mem_size; }

  private:
    void *take(size_t bytes, size_t align);

    context_params params_;
    std::unique_ptr<std::byte[]> block_;
    size_t used_ = 0;
    std::vector<tensor *> tensors_;
};

}  // namespace weft
