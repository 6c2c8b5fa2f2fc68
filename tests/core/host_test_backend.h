// tests/core/host_test_backend.h — for the core tests: host buffers, a slow reference evaluator of a
// few ops, and a fake backend built on them (the real CPU backend is tested in tests/backends).
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "weft/core/backend.h"
#include "weft/core/error.h"
#include "weft/core/graph.h"
#include "weft/core/ops.h"

namespace weft::test {

// Heap memory; `host` says whether backends may treat it as host memory. A non-host type stands
// for device memory (still readable by the test, so results can be checked).
class test_buffer_type : public buffer_type {
  public:
    explicit test_buffer_type(std::string name, bool host) : name_(std::move(name)), host_(host) {}
    const char *name() const override { return name_.c_str(); }
    std::unique_ptr<backend_buffer> alloc(size_t size) override;
    bool is_host() const override { return host_; }
    int n_allocs = 0;

  private:
    std::string name_;
    bool host_;
};

class test_buffer : public backend_buffer {
  public:
    test_buffer(test_buffer_type &type, size_t size)
        : type_(type),
          size_(size),
          memory_(static_cast<std::byte *>(std::aligned_alloc(64, (size + 63) / 64 * 64))) {
        std::memset(memory_.get(), 0xAB, size);  // garbage, so a missed write shows up
    }
    buffer_type &type() const override { return type_; }
    void *base() const override { return memory_.get(); }
    size_t size() const override { return size_; }
    void set_tensor(tensor &t, const void *src, size_t offset, size_t n) override {
        WEFT_ASSERT(t.buffer == this && offset + n <= t.nbytes());
        std::memcpy(static_cast<char *>(t.data) + offset, src, n);
    }
    void get_tensor(const tensor &t, void *dst, size_t offset, size_t n) const override {
        WEFT_ASSERT(t.buffer == this && offset + n <= t.nbytes());
        std::memcpy(dst, static_cast<const char *>(t.data) + offset, n);
    }
    void clear(uint8_t value) override { std::memset(memory_.get(), value, size_); }

  private:
    struct free_deleter {
        void operator()(std::byte *p) const { std::free(p); }
    };
    test_buffer_type &type_;
    size_t size_;
    std::unique_ptr<std::byte, free_deleter> memory_;
};

inline std::unique_ptr<backend_buffer> test_buffer_type::alloc(size_t size) {
    ++n_allocs;
    return std::make_unique<test_buffer>(*this, size);
}

// The slow, obvious reference: one element at a time through tensor_get_f32 / tensor_set_f32, so
// strides, broadcasting and aliasing (in place) are handled exactly as written.
inline void reference_eval(tensor &n) {
    const tensor *a = n.src[0];
    const tensor *b = n.src[1];
    auto each = [&](auto &&f) {
        for (int64_t i3 = 0; i3 < n.ne[3]; ++i3)
            for (int64_t i2 = 0; i2 < n.ne[2]; ++i2)
                for (int64_t i1 = 0; i1 < n.ne[1]; ++i1)
                    for (int64_t i0 = 0; i0 < n.ne[0]; ++i0) f(i0, i1, i2, i3);
    };
    auto binary = [&](auto &&op) {
        each([&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
            const float x = tensor_get_f32(*a, i0, i1, i2, i3);
            const float y = tensor_get_f32(*b, i0 % b->ne[0], i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);
            tensor_set_f32(n, op(x, y), i0, i1, i2, i3);
        });
    };
    auto unary = [&](auto &&op) {
        each([&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
            tensor_set_f32(n, op(tensor_get_f32(*a, i0, i1, i2, i3)), i0, i1, i2, i3);
        });
    };
    switch (n.op) {
        case op_kind::add:
            binary([](float x, float y) { return x + y; });
            break;
        case op_kind::sub:
            binary([](float x, float y) { return x - y; });
            break;
        case op_kind::mul:
            binary([](float x, float y) { return x * y; });
            break;
        case op_kind::div:
            binary([](float x, float y) { return x / y; });
            break;
        case op_kind::scale: {
            const float s = n.param_f32(0);
            unary([s](float x) { return x * s; });
            break;
        }
        case op_kind::silu:
            unary([](float x) { return x / (1.0f + std::exp(-x)); });
            break;
        case op_kind::cont:
            unary([](float x) { return x; });
            break;
        case op_kind::view:
        case op_kind::reshape:
        case op_kind::permute:
        case op_kind::transpose:
            break;  // no work: the data is the source's
        default:
            throw error(std::string("reference_eval: op ") + op_name(n.op) +
                        " is not implemented in the test");
    }
}

inline void reference_eval(graph &g) {
    for (tensor *n : g.nodes) reference_eval(*n);
}

// A backend for scheduler tests: runs the reference evaluator over its own buffer type and records
// what it ran and every source it was handed in memory it cannot read.
class test_backend : public backend {
  public:
    // ops empty: supports every op the reference evaluator knows
    test_backend(std::string name, bool host, std::set<op_kind> ops = {})
        : name_(std::move(name)), bt_(name_ + "_buffer", host), ops_(std::move(ops)) {}

    const char *name() const override { return name_.c_str(); }
    buffer_type &default_buffer_type() override { return bt_; }
    bool supports_op(const tensor &node) const override {
        if (!ops_.empty()) return ops_.count(node.op) > 0 || op_is_view(node.op);
        switch (node.op) {
            case op_kind::add:
            case op_kind::sub:
            case op_kind::mul:
            case op_kind::div:
            case op_kind::scale:
            case op_kind::silu:
            case op_kind::cont:
                return true;
            default:
                return op_is_view(node.op);
        }
    }
    bool supports_buffer_type(const buffer_type &bt) const override {
        return &bt == &bt_ || (bt_.is_host() && bt.is_host());
    }

    compute_status graph_compute(graph &g, const eval_callback &cb) override {
        for (tensor *n : g.nodes) {
            const bool observe = cb && cb(n, true);
            if (!op_is_view(n->op)) {
                for (const tensor *s : n->src) {
                    if (s == nullptr) continue;
                    const tensor *r = s->view_src ? s->view_src : s;
                    const bool ok = r->buffer ? supports_buffer_type(r->buffer->type()) : bt_.is_host();
                    if (!ok) unreadable_reads.push_back(std::string(n->name) + " <- " + s->name);
                }
                reference_eval(*n);
                computed.push_back(n);
            }
            if (observe && !cb(n, false)) return compute_status::aborted;
        }
        ++n_graphs;
        return compute_status::ok;
    }

    std::vector<tensor *> computed;
    std::vector<std::string> unreadable_reads;
    int n_graphs = 0;

  private:
    std::string name_;
    test_buffer_type bt_;
    std::set<op_kind> ops_;
};

// A test_backend with a queue of its own, like a GPU stream: the *_async calls and graphs are run
// in order by a worker thread, each task a little late (so work the scheduler did not wait for
// shows up as wrong values), and return at once. A graph's nodes and their sources are taken when
// it is queued, as a real backend encodes them then.
class queued_test_backend : public test_backend {
  public:
    using test_backend::test_backend;
    ~queued_test_backend() override {
        synchronize();
        {
            std::lock_guard lock(m_);
            stopping_ = true;
        }
        cv_.notify_all();
        worker_.join();
    }

    void set_tensor_async(tensor &t, const void *src, size_t offset, size_t n) override {
        enqueue([&t, src, offset, n] { t.buffer->set_tensor(t, src, offset, n); });
    }
    void get_tensor_async(const tensor &t, void *dst, size_t offset, size_t n) override {
        enqueue([&t, dst, offset, n] { t.buffer->get_tensor(t, dst, offset, n); });
    }
    compute_status graph_compute_async(graph &g, const eval_callback &cb) override {
        (void)cb;
        std::vector<tensor> nodes;  // copies: the scheduler puts the sources back after this returns
        for (tensor *n : g.nodes) nodes.push_back(*n);
        ++n_async_graphs;
        enqueue([this, nodes]() mutable {
            for (tensor &n : nodes)
                if (!op_is_view(n.op)) reference_eval(n);
            ++n_graphs;
        });
        return compute_status::ok;
    }
    compute_status synchronize() override {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return tasks_.empty() && !running_; });
        return compute_status::ok;
    }
    std::unique_ptr<backend_event> record_event() override {
        auto e = std::make_shared<flag>();
        enqueue([e] {
            std::lock_guard lock(e->m);
            e->done = true;
            e->cv.notify_all();
        });
        return std::make_unique<queued_event>(e);
    }
    void wait_event(backend_event &e) override {
        // this queue waits, the host does not
        enqueue([&e] { e.synchronize(); });
    }

    std::atomic<int> n_async_graphs{0};
    std::atomic<int> max_pending{0};  // the most tasks queued at once: > 1 shows the host went ahead

  private:
    struct flag {
        std::mutex m;
        std::condition_variable cv;
        bool done = false;
    };
    class queued_event final : public backend_event {
      public:
        explicit queued_event(std::shared_ptr<flag> f) : f_(std::move(f)) {}
        void synchronize() override {
            std::unique_lock lock(f_->m);
            f_->cv.wait(lock, [&] { return f_->done; });
        }

      private:
        std::shared_ptr<flag> f_;
    };

    void enqueue(std::function<void()> task) {
        {
            std::lock_guard lock(m_);
            tasks_.push_back(std::move(task));
            max_pending = std::max<int>(max_pending, int(tasks_.size()));
        }
        cv_.notify_all();
    }
    void run() {
        std::unique_lock lock(m_);
        for (;;) {
            cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
            if (tasks_.empty()) return;
            std::function<void()> task = std::move(tasks_.front());
            tasks_.pop_front();
            running_ = true;
            lock.unlock();
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            task();
            lock.lock();
            running_ = false;
            cv_.notify_all();
        }
    }

    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> tasks_;
    bool running_ = false, stopping_ = false;
    std::thread worker_{[this] { run(); }};
};

}  // namespace weft::test
