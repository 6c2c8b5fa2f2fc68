// weft/core/backend.h — the backend interface: buffer types, buffers, op support, graph execution.
//
// Narrow on purpose: a GPU backend implements these classes without touching core. Optional
// methods have defaults and say so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "weft/core/graph.h"
#include "weft/core/tensor.h"

namespace weft {

class buffer_type;
class op_profile;

// A block of backend memory that tensors are placed into.
class backend_buffer {
  public:
    virtual ~backend_buffer() = default;
    virtual buffer_type &type() const = 0;
    virtual void *base() const = 0;  // device address space for non-host buffers
    virtual size_t size() const = 0;
    // Copy between host memory and a tensor's data in this buffer (offset in bytes into the tensor).
    virtual void set_tensor(tensor &t, const void *src, size_t offset, size_t n) = 0;
    virtual void get_tensor(const tensor &t, void *dst, size_t offset, size_t n) const = 0;
    virtual void clear(uint8_t value) = 0;
    bool is_host() const;

    // Places t at `offset` of this buffer (sets t.buffer and t.data); views are placed by
    // their view_src. Asserts that t fits.
    void place(tensor &t, size_t offset);
};

class buffer_type {
  public:
    virtual ~buffer_type() = default;
    virtual const char *name() const = 0;
    virtual std::unique_ptr<backend_buffer> alloc(size_t size) = 0;
    virtual size_t alignment() const { return 64; }                          // optional
    virtual size_t alloc_size(const tensor &t) const { return t.nbytes(); }  // optional
    virtual bool is_host() const { return false; }                           // optional
};

// The bytes one buffer of bt takes to hold every tensor of ts (null entries skipped), each at an
// offset aligned to bt.alignment().
size_t placed_size(const buffer_type &bt, std::span<tensor *const> ts);
// Allocates that buffer, zeroed, and places the tensors in it in order (a cache's tensors). Throws
// what bt.alloc throws.
std::unique_ptr<backend_buffer> alloc_placed(buffer_type &bt, std::span<tensor *const> ts);

enum class compute_status : int32_t { ok = 0, aborted = 2, failed = -2 };

// A point in a backend's queue of work: complete once everything queued before it is done.
class backend_event {
  public:
    virtual ~backend_event() = default;
    // Blocks the host until the event is complete.
    virtual void synchronize() = 0;
};

class backend {
  public:
    virtual ~backend() = default;
    virtual const char *name() const = 0;
    virtual buffer_type &default_buffer_type() = 0;
    // Placement: the scheduler gives a node to the first backend that supports it.
    virtual bool supports_op(const tensor &node) const = 0;
    // Whether this backend can read tensors in buffers of type bt directly (default: its own type).
    virtual bool supports_buffer_type(const buffer_type &bt) const {
        return &bt == &const_cast<backend *>(this)->default_buffer_type();
    }
    // Executes the nodes of g in order; the callback (may be empty) observes nodes.
    virtual compute_status graph_compute(graph &g, const eval_callback &cb) = 0;

    // Optional: host threads the next graphs use (a device without host threads ignores it).
    virtual void set_n_threads(int n) { (void)n; }
    // Optional: times every computed node into `profile` (null: stop); the caller keeps it alive.
    virtual void set_profile(op_profile *profile) { (void)profile; }
    // Optional: polled between nodes; returning true aborts the graph (compute_status::aborted) at
    // the next point where the backend can stop (the CPU: its next barrier between nodes).
    virtual void set_abort_callback(std::function<bool()> cb) { (void)cb; }

    // --- Asynchronous use (optional). A backend with a queue of its own (a GPU stream, a remote
    // rank) runs the *_async calls in the order they were made and returns before they are done;
    // synchronize() waits for all of them, an event for the ones queued before it. The defaults do
    // the work at once (a CPU backend has nothing to overlap), so every backend supports the calls.
    //
    // Copies host memory into t (a tensor of a buffer this backend reads) / t into host memory; the
    // host memory must stay valid until the copy is done.
    virtual void set_tensor_async(tensor &t, const void *src, size_t offset, size_t n);
    virtual void get_tensor_async(const tensor &t, void *dst, size_t offset, size_t n);
    // Copies src (in a buffer of `from`) into dst (a buffer of this backend) without the host in
    // between; false when this backend cannot (the caller then goes through host memory).
    virtual bool copy_tensor_async(backend &from, const tensor &src, tensor &dst) {
        (void)from, (void)src, (void)dst;
        return false;
    }
    virtual compute_status graph_compute_async(graph &g, const eval_callback &cb) {
        return graph_compute(g, cb);
    }
    // Waits until everything queued on this backend is done; the status of the graphs since the
    // last synchronize (the first that failed or was aborted).
    virtual compute_status synchronize() { return compute_status::ok; }
    // An event after everything queued so far; wait_event makes this backend's later work wait for
    // an event of another backend (default: the host waits).
    virtual std::unique_ptr<backend_event> record_event();
    virtual void wait_event(backend_event &e) { e.synchronize(); }
};

}  // namespace weft
