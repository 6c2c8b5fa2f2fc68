// src/core/allocator.cpp — the memory planner (best-fit free list, use counts, in place) and its buffer.
#include "weft/core/allocator.h"

#include <algorithm>

#include "weft/core/checked.h"
#include "weft/core/error.h"
#include "weft/core/ops.h"

namespace weft {

namespace {

// Offsets in one growing address range: best fit over the free blocks, neighbours coalesced on
// release, and a block that reaches the top gives the top back, so the peak is what the graph
// really needs at once.
class free_list {
  public:
    explicit free_list(size_t alignment) : alignment_(alignment) {}

    size_t alloc(size_t n) {
        n = rounded(n);
        size_t best = free_.size();
        for (size_t i = 0; i < free_.size(); ++i)
            if (free_[i].size >= n && (best == free_.size() || free_[i].size < free_[best].size)) best = i;
        if (best != free_.size()) {
            const size_t offset = free_[best].offset;
            free_[best].offset += n;
            free_[best].size -= n;
            if (free_[best].size == 0) free_.erase(free_.begin() + ptrdiff_t(best));
            return offset;
        }
        // release() never leaves a free block touching the top, so nothing can be extended
        const size_t offset = top_;
        top_ += n;
        peak_ = std::max(peak_, top_);
        return offset;
    }

    void release(size_t offset, size_t n) {
        n = rounded(n);
        WEFT_ASSERT(offset + n <= top_);
        auto it = std::lower_bound(free_.begin(), free_.end(), offset,
                                   [](const block &b, size_t off) { return b.offset < off; });
        WEFT_ASSERT(it == free_.end() || it->offset >= offset + n);  // no double free
        it = free_.insert(it, block{offset, n});
        if (it + 1 != free_.end() && it->offset + it->size == (it + 1)->offset) {
            it->size += (it + 1)->size;
            free_.erase(it + 1);
        }
        if (it != free_.begin() && (it - 1)->offset + (it - 1)->size == it->offset) {
            (it - 1)->size += it->size;
            it = free_.erase(it) - 1;
        }
        if (it->offset + it->size == top_) {
            top_ = it->offset;
            free_.erase(it);
        }
    }

    size_t peak() const { return peak_; }

  private:
    struct block {
        size_t offset;
        size_t size;
    };
    size_t rounded(size_t n) const { return align_up(std::max<size_t>(n, 1), alignment_); }

    size_t alignment_;
    std::vector<block> free_;  // sorted by offset, never adjacent
    size_t top_ = 0;
    size_t peak_ = 0;
};

struct planner_inputs {
    size_t alignment = 64;
    const buffer_type *bt = nullptr;      // block sizes from bt->alloc_size (else nbytes)
    const backend_buffer *own = nullptr;  // tensors already placed here are planned again
    const std::unordered_set<const tensor *> *keep = nullptr;
};

const tensor *root_of(const tensor *t) {
    return t->view_src ? t->view_src : t;
}

// Whether node n reads slot s. A view-like result (view ops, cpy, set_rows) does not read the
// tensor whose memory it shares; that memory is kept alive by the view's own consumers instead.
bool reads(const tensor *n, const tensor *s) {
    return s != nullptr && !(n->view_src && root_of(s) == n->view_src);
}

graph_allocator::plan plan_graph(const graph &g, const planner_inputs &in) {
    WEFT_ASSERT(in.alignment > 0);
    graph_allocator::plan p;
    free_list memory(in.alignment);

    auto needs_memory = [&](const tensor *t) {
        return t->view_src == nullptr && (t->data == nullptr || (in.own && t->buffer == in.own));
    };
    auto block_size = [&](const tensor *t) { return in.bt ? in.bt->alloc_size(*t) : t->nbytes(); };

    // Remaining reads of each memory owner (a view's reads count for its source), and the owners
    // that must survive the whole graph: sources of views nobody in the graph reads (the view is a
    // result), of views flagged output, and whatever the caller asks to keep.
    std::unordered_map<const tensor *, int> remaining;
    std::unordered_map<const tensor *, int> consumers;
    std::unordered_set<const tensor *> pinned;
    for (const tensor *n : g.nodes)
        for (const tensor *s : n->src) {
            if (s == nullptr) continue;
            ++consumers[s];
            if (reads(n, s)) ++remaining[root_of(s)];
        }
    for (const tensor *n : g.nodes)
        if (n->view_src && (consumers[n] == 0 || (n->flags & tensor_flag_output))) pinned.insert(n->view_src);
    if (in.keep)
        for (const tensor *k : *in.keep) pinned.insert(root_of(k));

    auto never_freed = [&](const tensor *t) {
        return pinned.count(t) || (t->flags & (tensor_flag_input | tensor_flag_output));
    };

    // Leafs without data (inputs the caller fills) get memory for the whole graph; weights do not.
    for (const tensor *leaf : g.leafs)
        if (needs_memory(leaf) && !(leaf->flags & tensor_flag_param))
            p.offsets[leaf] = memory.alloc(block_size(leaf));

    struct block {
        size_t offset;
        size_t size;
    };
    std::unordered_map<const tensor *, block> live;  // node -> the block it currently owns

    for (const tensor *n : g.nodes) {
        if (needs_memory(n)) {
            const tensor *s = n->src[0];
            const bool inplace = op_can_inplace(n->op) && s != nullptr && s->view_src == nullptr &&
                                 live.count(s) && !never_freed(s) && remaining[s] == 1 &&
                                 !(n->flags & tensor_flag_input) && s->type == n->type &&
                                 s->nbytes() == n->nbytes() && block_size(s) == block_size(n) &&
                                 s->is_contiguous() && n->is_contiguous();
            if (inplace) {
                live[n] = live[s];
                live.erase(s);
                p.offsets[n] = p.offsets[s];
                p.inplace[n] = s;
            } else {
                const size_t size = block_size(n);
                const size_t offset = memory.alloc(size);
                live[n] = {offset, size};
                p.offsets[n] = offset;
            }
        }
        // n has run: its sources have one reader less, and a source nobody reads any more is freed
        for (const tensor *s : n->src) {
            if (!reads(n, s)) continue;
            const tensor *r = root_of(s);
            if (--remaining[r] > 0 || never_freed(r)) continue;
            auto it = live.find(r);
            if (it == live.end()) continue;
            memory.release(it->second.offset, it->second.size);
            live.erase(it);
        }
    }
    p.peak_bytes = memory.peak();
    return p;
}

const std::unordered_set<const tensor *> no_keep;

}  // namespace

graph_allocator::graph_allocator(buffer_type &bt) : bt_(bt) {}
graph_allocator::~graph_allocator() = default;

graph_allocator::plan graph_allocator::make_plan(const graph &g, size_t alignment) {
    return make_plan(g, alignment, no_keep);
}

graph_allocator::plan graph_allocator::make_plan(const graph &g, size_t alignment,
                                                 const std::unordered_set<const tensor *> &keep) {
    return plan_graph(g, planner_inputs{alignment, nullptr, nullptr, &keep});
}

size_t graph_allocator::buffer_size() const {
    return buffer_ ? buffer_->size() : 0;
}

void graph_allocator::reserve(const graph &g) {
    reserve(g, no_keep);
}
void graph_allocator::alloc_graph(graph &g) {
    alloc_graph(g, no_keep);
}

void graph_allocator::reserve(const graph &g, const std::unordered_set<const tensor *> &keep) {
    const plan p = plan_graph(g, planner_inputs{bt_.alignment(), &bt_, buffer_.get(), &keep});
    planned_peak_ = p.peak_bytes;
    // a new buffer invalidates whatever was placed in the old one; reserve before allocating
    if (p.peak_bytes > buffer_size()) buffer_ = bt_.alloc(p.peak_bytes);
}

void graph_allocator::alloc_graph(graph &g, const std::unordered_set<const tensor *> &keep) {
    const plan p = plan_graph(g, planner_inputs{bt_.alignment(), &bt_, buffer_.get(), &keep});
    planned_peak_ = p.peak_bytes;
    if (p.peak_bytes > buffer_size()) {
        buffer_ = bt_.alloc(p.peak_bytes);
        ++grows_;
    }
    for (const auto &[t, offset] : p.offsets) buffer_->place(const_cast<tensor &>(*t), offset);
    // views follow their sources (placed just now, or earlier when the source lives here)
    auto place_view = [&](tensor *t) {
        if (t->view_src && t->view_src->data && buffer_ && t->view_src->buffer == buffer_.get())
            buffer_->place(*t, 0);
    };
    for (tensor *t : g.leafs) place_view(t);
    for (tensor *t : g.nodes) place_view(t);
}

}  // namespace weft
