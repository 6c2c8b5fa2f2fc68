// src/core/backend.cpp — the non-virtual parts of the backend interface: placing tensors in buffers.
#include "weft/core/backend.h"

#include "weft/core/checked.h"
#include "weft/core/error.h"

namespace weft {

bool backend_buffer::is_host() const {
    return type().is_host();
}

void backend_buffer::place(tensor &t, size_t offset) {
    if (t.view_src != nullptr) {
        // a view lives wherever its source does; `offset` is unused
        const tensor &src = *t.view_src;
        WEFT_ASSERT(src.data != nullptr && src.buffer == this);
        t.buffer = this;
        t.data = static_cast<char *>(src.data) + t.view_offs;
        return;
    }
    WEFT_ASSERT(offset <= size() && type().alloc_size(t) <= size() - offset);
    t.buffer = this;
    t.data = static_cast<char *>(base()) + offset;
}

size_t placed_size(const buffer_type &bt, std::span<tensor *const> ts) {
    size_t total = 0;
    for (const tensor *t : ts)
        if (t) total += align_up(t->nbytes(), bt.alignment());
    return total;
}

std::unique_ptr<backend_buffer> alloc_placed(buffer_type &bt, std::span<tensor *const> ts) {
    std::unique_ptr<backend_buffer> buffer = bt.alloc(placed_size(bt, ts));
    buffer->clear(0);
    size_t offset = 0;
    for (tensor *t : ts) {
        if (!t) continue;
        buffer->place(*t, offset);
        offset += align_up(t->nbytes(), bt.alignment());
    }
    return buffer;
}

namespace {

// The event of a backend that does its work at once: complete when recorded.
class completed_event final : public backend_event {
  public:
    void synchronize() override {}
};

}  // namespace

void backend::set_tensor_async(tensor &t, const void *src, size_t offset, size_t n) {
    WEFT_ASSERT(t.buffer != nullptr);
    t.buffer->set_tensor(t, src, offset, n);
}

void backend::get_tensor_async(const tensor &t, void *dst, size_t offset, size_t n) {
    WEFT_ASSERT(t.buffer != nullptr);
    t.buffer->get_tensor(t, dst, offset, n);
}

std::unique_ptr<backend_event> backend::record_event() {
    return std::make_unique<completed_event>();
}

}  // namespace weft
