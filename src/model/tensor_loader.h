// src/model/tensor_loader.h — creates weights by name, checks shapes, points them into the mapping.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "weft/core/context.h"
#include "weft/gguf/gguf.h"

namespace weft {

class backend_buffer;

class tensor_loader {
  public:
    // buffers: one host buffer over each part's data section (empty for a metadata-only pass).
    tensor_loader(const gguf_set &f, context &ctx, std::span<const std::unique_ptr<backend_buffer>> buffers);

    // The tensor `name` with shape ne (trailing 1s may be omitted on either side). Missing and
    // required: weft::error "<file>: missing tensor '<name>'"; present with another shape:
    // "<file>: tensor '<name>' has shape [a, b], expected [c, d]".
    tensor *create(const std::string &name, std::initializer_list<int64_t> ne);
    // Same, but a missing tensor gives null.
    tensor *create_optional(const std::string &name, std::initializer_list<int64_t> ne);
    bool has(const std::string &name) const { return f_.find_tensor(name) != nullptr; }

    size_t n_created() const { return created_.size(); }
    // Throws weft::error naming the first tensor of the file that no create call asked for (a file
    // of another architecture, or a converter bug): such a model would silently compute wrong.
    void check_all_used(const std::string &arch) const;

  private:
    tensor *create_impl(const std::string &name, std::initializer_list<int64_t> ne, bool required);

    const gguf_set &f_;
    context &ctx_;
    std::span<const std::unique_ptr<backend_buffer>> buffers_;
    std::unordered_set<std::string> created_;
};

// Zero copy: one host buffer over the whole data section of each part of f (every tensor points
// into its part's) and a no_alloc context with room for its tensors. Throws weft::error when f has
// no tensor data.
struct mapped_tensors {
    std::vector<std::unique_ptr<backend_buffer>> buffers;  // one per part
    std::unique_ptr<context> ctx;
};
mapped_tensors map_tensors(const gguf_set &f);

// "blk.3.attn_q.weight"
std::string block_tensor_name(int64_t il, const char *what, const char *suffix = "weight");

}  // namespace weft
