// src/core/backend.cpp — the non-virtual parts of the backend interface: placing tensors in buffers.
#include "weft/core/backend.h"

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

}  // namespace weft
