// weft/core/scheduler.h — assigns nodes to backends, inserts copies between them, runs the graph.
#pragma once

#include <memory>
#include <vector>

#include "weft/core/allocator.h"
#include "weft/core/backend.h"
#include "weft/core/context.h"
#include "weft/core/graph.h"

namespace weft {

class scheduler {
  public:
    // backends in priority order; the last one must be a CPU (host) backend that supports every op
    explicit scheduler(std::vector<backend *> backends);
    ~scheduler();

    void reserve(const graph &g);  // worst-case compute buffers, once
    // Assigns every node a backend and splits the graph (as alloc_graph does) without allocating:
    // backend_of, n_splits and n_copies then describe the placement (weft graph shows it).
    void assign(graph &g);
    // Assigns every node a backend (the first that supports it and can read its weights' buffers),
    // splits the graph into runs per backend with copies for inputs living elsewhere, allocates.
    void alloc_graph(graph &g);
    // alloc_graph (if not done for g) then execute every split in order.
    compute_status compute(graph &g);

    void set_eval_callback(eval_callback cb) { cb_ = std::move(cb); }
    backend *backend_of(const tensor *node) const;
    int n_splits() const { return n_splits_; }
    int n_copies() const { return n_copies_; }
    size_t compute_buffer_size() const;  // bytes, all backends
    int grow_count() const;

  private:
    void count_placement();
    struct impl;
    std::unique_ptr<impl> impl_;
    eval_callback cb_;
    int n_splits_ = 0;
    int n_copies_ = 0;
};

}  // namespace weft
