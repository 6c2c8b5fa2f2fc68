// weft/core/allocator.h — the memory planner: offsets for every tensor of a graph in one buffer.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "weft/core/backend.h"
#include "weft/core/graph.h"

namespace weft {

// Plans a graph's memory: walks the nodes in order, gives each tensor without data an offset in
// one buffer (best-fit over a free list), frees a tensor's block once its last consumer has run
// (inputs and outputs are never freed), lets an op run in place over its only-consumed source
// where op_can_inplace allows it, and gives views their source's memory.
class graph_allocator {
  public:
    explicit graph_allocator(buffer_type &bt);
    ~graph_allocator();

    // Sizes the buffer for a worst-case graph once; later graphs of the same or smaller shape
    // allocate without growing it. May be called again with a bigger graph (grows).
    void reserve(const graph &g);
    // Places every tensor of g that has no data. Grows the buffer if g needs more than reserved
    // (and counts that: a correctly reserved context never grows).
    void alloc_graph(graph &g);
    // The same, keeping the tensors in `keep` alive to the end of the graph (never freed, never
    // overwritten in place): the scheduler passes the tensors that another backend reads later.
    void reserve(const graph &g, const std::unordered_set<const tensor *> &keep);
    void alloc_graph(graph &g, const std::unordered_set<const tensor *> &keep);

    size_t planned_peak_bytes() const { return planned_peak_; }  // of the last planned graph
    size_t buffer_size() const;
    int grow_count() const { return grows_; }
    backend_buffer *buffer() const { return buffer_.get(); }

    // The plan alone, without a buffer: offset per tensor and the peak. For tests and `weft graph`.
    struct plan {
        std::unordered_map<const tensor *, size_t> offsets;          // tensors that get memory of their own
        std::unordered_map<const tensor *, const tensor *> inplace;  // node -> source it reuses
        size_t peak_bytes = 0;
    };
    // Tensors planned: those without data (nodes, and leafs that are not weights: a leaf flagged
    // tensor_flag_param is the loader's business), each block aligned to `alignment`.
    static plan make_plan(const graph &g, size_t alignment);
    static plan make_plan(const graph &g, size_t alignment, const std::unordered_set<const tensor *> &keep);

  private:
    buffer_type &bt_;
    std::unique_ptr<backend_buffer> buffer_;
    size_t planned_peak_ = 0;
    int grows_ = 0;
};

}  // namespace weft
