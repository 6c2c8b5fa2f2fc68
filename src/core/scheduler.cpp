// src/core/scheduler.cpp — backend assignment, splits, copies between backends, allocation, execution.
#include "weft/core/scheduler.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "weft/core/error.h"
#include "weft/core/ops.h"

namespace weft {

namespace {

const tensor *root_of(const tensor *t) {
    return t->view_src ? t->view_src : t;
}

// Whether node n reads slot s (the planner's rule): a view-like result does not read the memory it
// shares, and a pure view op computes nothing at all.
bool reads(const tensor *n, const tensor *s) {
    if (s == nullptr || op_is_view(n->op)) return false;
    return !(n->view_src && root_of(s) == n->view_src);
}

// A node's source replaced, for the time of planning or running one split, by a copy that the
// split's backend can read.
struct substitution {
    tensor *node;
    int slot;
    tensor *replacement;
    tensor *original;
};

class substitution_guard {
  public:
    explicit substitution_guard(std::vector<substitution> subs) : subs_(std::move(subs)) {
        for (const auto &s : subs_) s.node->src[s.slot] = s.replacement;
    }
    ~substitution_guard() {
        for (auto it = subs_.rbegin(); it != subs_.rend(); ++it) it->node->src[it->slot] = it->original;
    }
    substitution_guard(const substitution_guard &) = delete;
    substitution_guard &operator=(const substitution_guard &) = delete;

  private:
    std::vector<substitution> subs_;
};

}  // namespace

struct scheduler::impl {
    struct copy_op {
        tensor *from;  // a memory owner the split's backend cannot read
        tensor *to;    // its copy in that backend's compute memory
    };
    struct split {
        int backend = 0;
        graph sub{0};                 // the split's nodes, in order: the graph its backend executes
        std::vector<copy_op> copies;  // filled before the split runs
        std::vector<substitution> subs;
    };

    std::vector<backend *> backends;
    std::vector<std::unique_ptr<graph_allocator>> allocators;  // one per backend, its default type

    // the current assignment
    std::unordered_map<const tensor *, int> home;  // node -> backend; planned leaf -> backend
    std::vector<split> splits;
    std::vector<graph> backend_graphs;  // per backend: its nodes, its planned leafs and copies
    std::vector<std::unordered_set<const tensor *>> keep;  // per backend: read later elsewhere
    std::vector<tensor *> copy_views;  // views of copies standing for views of unreadable memory
    std::vector<tensor *> prepared_nodes;
    bool prepared = false;

    // copies are created once and reused while their source keeps its shape; graphs rebuilt every
    // step bring new sources, so the whole store is dropped when it holds far more than one graph
    // needs (checked before each assignment, when no split refers to it any more)
    static constexpr size_t max_stored_copies = 4096;
    std::vector<std::unique_ptr<context>> contexts;
    std::map<std::pair<const tensor *, int>, tensor *> copy_cache;       // (owner, backend) -> copy
    std::map<std::pair<const tensor *, int>, tensor *> copy_view_cache;  // (view, backend) -> view of copy

    bool in_our_buffer(const tensor *t) const {
        if (t->buffer == nullptr) return false;
        for (const auto &a : allocators)
            if (a->buffer() == t->buffer) return true;
        return false;
    }
    // Memory the scheduler plans (none yet, or placed by one of our allocators), as opposed to
    // memory that exists on its own (weights, a KV cache, a caller's buffer).
    bool planned(const tensor *t) const { return t->data == nullptr || in_our_buffer(t); }

    int home_of(const tensor *t) const {
        auto it = home.find(t);
        return it == home.end() ? -1 : it->second;
    }

    // Whether backend b can read memory owner r where it will live when the graph runs.
    bool readable(int b, const tensor *r) const {
        if (planned(r)) {
            const int p = home_of(r);
            if (p < 0 || p == b) return true;  // p < 0: a weight without data, nothing to copy
            return backends[size_t(b)]->supports_buffer_type(backends[size_t(p)]->default_buffer_type());
        }
        if (r->buffer) return backends[size_t(b)]->supports_buffer_type(r->buffer->type());
        return backends[size_t(b)]->default_buffer_type().is_host();  // context memory is host memory
    }

    context &copy_context() {
        if (contexts.empty() ||
            contexts.back()->used_bytes() + context_overhead(1) > contexts.back()->capacity())
            contexts.push_back(std::make_unique<context>(context_params{context_overhead(256), true}));
        return *contexts.back();
    }

    tensor *copy_of(tensor *r, int b) {
        tensor *&c = copy_cache[{r, b}];
        if (c == nullptr || c->type != r->type || !same_shape(*c, *r)) {
            c = copy_context().new_tensor(r->type, std::span<const int64_t>(r->ne, max_dims));
            c->format_name("%s#%s", backends[size_t(b)]->name(), r->name);
        }
        return c;
    }

    tensor *view_of_copy(tensor *s, tensor *copy, int b) {
        tensor *&v = copy_view_cache[{s, b}];
        bool valid =
            v != nullptr && v->view_src == copy && v->type == s->type && v->view_offs == s->view_offs;
        for (int i = 0; valid && i < max_dims; ++i) valid = v->ne[i] == s->ne[i] && v->nb[i] == s->nb[i];
        if (!valid) {
            v = copy_context().new_view(*copy, s->type, std::span<const int64_t>(s->ne, max_dims),
                                        std::span<const size_t>(s->nb, max_dims), s->view_offs);
            v->format_name("%s#%s", backends[size_t(b)]->name(), s->name);
        }
        return v;
    }

    // Where a node computes: with memory of its own among its sources (weights, a cache it reads or
    // writes), on the first backend that supports the op and reads all of that memory — the run it
    // starts is anchored there; with only planned sources (activations), inside an anchored run on
    // that run's backend when it supports the op, so a run of a model's blocks stays on the device
    // holding their weights and the host's blocks stay on the host; otherwise on the first backend
    // that supports it (its sources are copied). `anchored` is the run's state, updated here.
    int choose_backend(const tensor &n, int current, bool &anchored) const {
        auto supports = [&](int b) { return backends[size_t(b)]->supports_op(n); };
        if (op_is_view(n.op) && current >= 0 && supports(current)) return current;
        bool own_memory = false;
        for (const tensor *s : n.src) own_memory = own_memory || (s && !planned(root_of(s)));
        if (!own_memory && anchored && current >= 0 && supports(current)) return current;
        anchored = own_memory;
        for (size_t b = 0; b < backends.size(); ++b) {
            if (!supports(int(b))) continue;
            bool reaches_all = true;
            for (const tensor *s : n.src)
                if (s && !planned(root_of(s)) && !readable(int(b), root_of(s))) reaches_all = false;
            if (reaches_all) return int(b);
        }
        for (size_t b = 0; b < backends.size(); ++b)
            if (supports(int(b))) return int(b);
        std::string names;
        for (const backend *be : backends) names += std::string(names.empty() ? "" : ", ") + be->name();
        throw error("[scheduler] no backend supports node '" + std::string(n.name) + "' (" + op_name(n.op) +
                    ", " + n.shape_str() + " " + type_name(n.type) + "); backends: " + names);
    }

    void assign(const graph &g) {
        home.clear();
        int current = -1;
        bool anchored = false;
        for (const tensor *n : g.nodes) {
            const int b = choose_backend(*n, current, anchored);
            // a node that writes into memory of its own (cpy into a cache, set_rows, an in-place
            // recurrent op's states) must reach it
            const int written = op_state_source(*n);
            const tensor *target = written >= 0        ? root_of(n->src[written])
                                   : op_is_view(n->op) ? nullptr
                                                       : n->view_src;
            if (target && !planned(target) && !readable(b, target))
                throw error("[scheduler] node '" + std::string(n->name) + "' (" + op_name(n->op) +
                            ") writes into '" + target->name + "', which backend " +
                            backends[size_t(b)]->name() + " cannot access");
            home[n] = b;
            current = b;
        }
        // a leaf the planner gives memory lives with its first reader
        for (const tensor *n : g.nodes)
            for (const tensor *s : n->src) {
                if (s == nullptr) continue;
                const tensor *r = root_of(s);
                if (r->op == op_kind::none && planned(r) && !(r->flags & tensor_flag_param))
                    home.try_emplace(r, home[n]);
            }
        for (const tensor *leaf : g.leafs)
            if (planned(leaf) && !(leaf->flags & tensor_flag_param) && !leaf->view_src)
                home.try_emplace(leaf, int(backends.size()) - 1);
    }

    void make_splits(const graph &g) {
        splits.clear();
        for (tensor *n : g.nodes) {
            const int b = home[n];
            if (splits.empty() || splits.back().backend != b) {
                splits.emplace_back();
                splits.back().backend = b;
            }
            splits.back().sub.nodes.push_back(n);
        }
        for (auto &sp : splits) sp.sub.capacity = sp.sub.nodes.size();
    }

    void make_copies() {
        keep.assign(backends.size(), {});
        copy_views.clear();
        for (auto &sp : splits) {
            const int b = sp.backend;
            std::unordered_set<const tensor *> copied;
            for (tensor *n : sp.sub.nodes) {
                for (int j = 0; j < max_src; ++j) {
                    tensor *s = n->src[j];
                    if (!reads(n, s) || j == op_state_source(*n)) continue;  // a write target stays
                    tensor *r = s->view_src ? s->view_src : s;
                    const int p = home_of(r);
                    if (p >= 0 && p != b) keep[size_t(p)].insert(r);
                    if (readable(b, r)) continue;
                    tensor *c = copy_of(r, b);
                    if (copied.insert(r).second) sp.copies.push_back({r, c});
                    tensor *replacement = c;
                    if (s != r) {
                        replacement = view_of_copy(s, c, b);
                        copy_views.push_back(replacement);
                    }
                    sp.subs.push_back({n, j, replacement, s});
                }
            }
        }
    }

    void make_backend_graphs(const graph &g) {
        backend_graphs.assign(backends.size(), graph(0));
        for (tensor *n : g.nodes) backend_graphs[size_t(home[n])].nodes.push_back(n);
        for (tensor *leaf : g.leafs) {
            const int b = home_of(leaf);
            if (b >= 0) backend_graphs[size_t(b)].leafs.push_back(leaf);
        }
        for (const auto &sp : splits) {
            auto &leafs = backend_graphs[size_t(sp.backend)].leafs;
            for (const auto &c : sp.copies)
                if (std::find(leafs.begin(), leafs.end(), c.to) == leafs.end()) leafs.push_back(c.to);
        }
        for (auto &bg : backend_graphs) bg.capacity = bg.size();
    }

    // Forgets where g's planned tensors were placed before, so each backend plans them afresh.
    void forget_placements(const graph &g) {
        auto forget = [&](tensor *t) {
            if (in_our_buffer(t)) {
                t->data = nullptr;
                t->buffer = nullptr;
            }
        };
        for (tensor *t : g.nodes) forget(t);
        for (tensor *t : g.leafs) forget(t);
        for (const auto &sp : splits)
            for (const auto &c : sp.copies) forget(c.to);
        for (tensor *v : copy_views) forget(v);
    }

    std::vector<substitution> all_substitutions() const {
        std::vector<substitution> all;
        for (const auto &sp : splits) all.insert(all.end(), sp.subs.begin(), sp.subs.end());
        return all;
    }

    void drop_stale_copies() {
        if (copy_cache.size() + copy_view_cache.size() <= max_stored_copies) return;
        splits.clear();
        copy_views.clear();
        copy_cache.clear();
        copy_view_cache.clear();
        contexts.clear();
    }

    void prepare(const graph &g) {
        prepared = false;
        drop_stale_copies();
        assign(g);
        make_splits(g);
        make_copies();
        make_backend_graphs(g);
        forget_placements(g);
    }
};

scheduler::scheduler(std::vector<backend *> backends) : impl_(std::make_unique<impl>()) {
    if (backends.empty()) throw error("scheduler: no backends given");
    for (backend *b : backends)
        if (b == nullptr) throw error("scheduler: a backend is null");
    if (!backends.back()->default_buffer_type().is_host())
        throw error(std::string("scheduler: the last backend must be a host (CPU) backend; ") +
                    backends.back()->name() + " is not");
    impl_->backends = std::move(backends);
    for (backend *b : impl_->backends)
        impl_->allocators.push_back(std::make_unique<graph_allocator>(b->default_buffer_type()));
}

scheduler::~scheduler() = default;

void scheduler::reserve(const graph &g) {
    impl_->prepare(g);
    substitution_guard guard(impl_->all_substitutions());
    for (size_t b = 0; b < impl_->backends.size(); ++b)
        impl_->allocators[b]->reserve(impl_->backend_graphs[b], impl_->keep[b]);
}

void scheduler::assign(graph &g) {
    impl_->prepare(g);
    count_placement();
}

void scheduler::count_placement() {
    n_splits_ = int(impl_->splits.size());
    n_copies_ = 0;
    for (const auto &sp : impl_->splits) n_copies_ += int(sp.copies.size());
}

void scheduler::alloc_graph(graph &g) {
    impl &s = *impl_;
    s.prepare(g);
    {
        substitution_guard guard(s.all_substitutions());
        for (size_t b = 0; b < s.backends.size(); ++b)
            s.allocators[b]->alloc_graph(s.backend_graphs[b], s.keep[b]);
    }
    // views follow their sources, wherever those were placed
    auto follow = [](tensor *v) {
        if (v->view_src && v->view_src->data) {
            v->data = static_cast<char *>(v->view_src->data) + v->view_offs;
            v->buffer = v->view_src->buffer;
        }
    };
    for (tensor *n : g.nodes) follow(n);
    for (tensor *v : s.copy_views) follow(v);

    count_placement();
    s.prepared_nodes = g.nodes;
    s.prepared = true;
}

compute_status scheduler::compute(graph &g) {
    impl &s = *impl_;
    // A graph rebuilt in a fresh context may reuse the old tensors' addresses: the same node list
    // is only trusted when its tensors still have their memory.
    bool placed = s.prepared && s.prepared_nodes == g.nodes;
    for (size_t i = 0; placed && i < g.nodes.size(); ++i) placed = g.nodes[i]->data != nullptr;
    if (!placed) alloc_graph(g);
    // Every split is queued on its backend (asynchronously where the backend has a queue): a copy
    // into a split waits for the event of the split that produced its source, so one backend's
    // copies and work overlap another's; the host waits once, at the end.
    const size_t n_backends = s.backends.size();
    std::vector<std::unique_ptr<backend_event>> produced(n_backends);  // each backend's last split
    std::vector<bool> used(n_backends, false);
    std::vector<std::vector<std::byte>> staging;  // host copies, alive until every backend is done
    auto finish = [&](compute_status status) {
        for (size_t b = 0; b < n_backends; ++b) {
            if (!used[b]) continue;
            const compute_status st = s.backends[b]->synchronize();
            if (status == compute_status::ok) status = st;
        }
        return status;
    };
    for (auto &sp : s.splits) {
        backend &runner = *s.backends[size_t(sp.backend)];
        used[size_t(sp.backend)] = true;
        for (const auto &c : sp.copies) {
            if (c.from->data == nullptr)
                throw error("[scheduler] '" + std::string(c.from->name) + "', needed by backend " +
                            runner.name() + ", has no data");
            const size_t n = c.from->nbytes();
            WEFT_ASSERT(c.to->buffer != nullptr && c.to->nbytes() == n);
            const int from = s.home_of(c.from);  // -1: memory of its own (weights, inputs)
            backend_event *ready = from >= 0 && from != sp.backend ? produced[size_t(from)].get() : nullptr;
            if (c.from->buffer == nullptr || c.from->buffer->is_host()) {
                if (ready) runner.wait_event(*ready);
                runner.set_tensor_async(*c.to, c.from->data, 0, n);
                continue;
            }
            if (from >= 0) {  // device to device, without the host, where the backend can
                if (ready) runner.wait_event(*ready);
                if (runner.copy_tensor_async(*s.backends[size_t(from)], *c.from, *c.to)) continue;
            }
            if (ready) ready->synchronize();  // read on the host: the producer must be done
            staging.emplace_back(n);
            c.from->buffer->get_tensor(*c.from, staging.back().data(), 0, n);
            runner.set_tensor_async(*c.to, staging.back().data(), 0, n);
        }
        // the backend reads the split's nodes and their (substituted) sources before this returns
        substitution_guard guard(sp.subs);
        const compute_status status = runner.graph_compute_async(sp.sub, cb_);
        if (status != compute_status::ok) return finish(status);
        produced[size_t(sp.backend)] = runner.record_event();
    }
    return finish(compute_status::ok);
}

backend *scheduler::backend_of(const tensor *node) const {
    const int b = impl_->home_of(node);
    return b < 0 ? nullptr : impl_->backends[size_t(b)];
}

size_t scheduler::compute_buffer_size() const {
    size_t total = 0;
    for (const auto &a : impl_->allocators) total += a->buffer_size();
    return total;
}

int scheduler::grow_count() const {
    int total = 0;
    for (const auto &a : impl_->allocators) total += a->grow_count();
    return total;
}

}  // namespace weft
