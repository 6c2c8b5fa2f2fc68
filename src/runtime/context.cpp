// src/runtime/context.cpp — inference_context: validation, ubatches, KV slots, graph reuse, compute.
#include "weft/runtime/context.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "runtime/pipeline_protocol.h"
#include "runtime/recurrent_memory.h"
#include "weft/backends/cpu.h"
#include "weft/backends/vulkan.h"
#include "weft/core/allocator.h"
#include "weft/core/context.h"
#include "weft/core/ops.h"
#include "weft/core/profile.h"
#include "weft/core/scheduler.h"
#include "weft/runtime/kv_cache.h"
#include "weft/runtime/memory.h"

namespace weft {

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

void write_input(tensor *t, const void *src, size_t n) {
    WEFT_ASSERT(t && t->data && n == t->nbytes());
    if (t->buffer && !t->buffer->is_host())
        t->buffer->set_tensor(*t, src, 0, n);
    else
        std::memcpy(t->data, src, n);
}

void read_output(const tensor *t, void *dst, size_t offset, size_t n) {
    WEFT_ASSERT(t && t->data && offset + n <= t->nbytes());
    if (t->buffer && !t->buffer->is_host())
        t->buffer->get_tensor(*t, dst, offset, n);
    else
        std::memcpy(dst, static_cast<const uint8_t *>(t->data) + offset, n);
}

// Whether backend b stores rows of K and V of these types (set_rows) and attends over them: then an
// offloaded block's cache may live in its memory.
bool device_holds_cache(const backend &b, const model_hparams &hp, dtype type_k, dtype type_v) {
    context ctx(context_params{context_overhead(16), true});
    const int64_t head_k = hp.n_embd_head_k, head_v = hp.n_embd_head_v,
                  n_head_kv = std::max<int64_t>(1, hp.n_head_kv(0));
    const int64_t n_head = std::max<int64_t>(1, hp.n_head(0)), cells = 256;
    tensor *k = ctx.new_tensor(type_k, {head_k * n_head_kv, cells});
    tensor *v = ctx.new_tensor(type_v, {head_v * n_head_kv, cells});
    tensor *ids = ctx.new_tensor(dtype::i32, {1});
    tensor *k_row = ctx.new_tensor(dtype::f32, {head_k * n_head_kv, 1});
    tensor *v_row = ctx.new_tensor(dtype::f32, {head_v * n_head_kv, 1});
    tensor *q = ctx.new_tensor(dtype::f32, {head_k, 1, n_head});
    tensor *mask = ctx.new_tensor(dtype::f32, {cells, 1});
    tensor *kv = view_3d(ctx, k, head_k, cells, n_head_kv, k->nb[1], row_size(type_k, head_k), 0);
    tensor *vv = view_3d(ctx, v, head_v, cells, n_head_kv, v->nb[1], row_size(type_v, head_v), 0);
    return b.supports_op(*set_rows(ctx, k, k_row, ids)) && b.supports_op(*set_rows(ctx, v, v_row, ids)) &&
           b.supports_op(*attention(ctx, q, kv, vv, mask, 1.0f));
}

// The KV cells a graph attends over are padded to a multiple of this, so consecutive decode steps
// have the same shape and reuse one graph.
constexpr uint32_t n_kv_pad = 256;

// The distinct sequences of a ubatch's tokens in the order they first appear: the states a recurrent
// model's ubatch advances.
std::vector<seq_id> ubatch_sequences(std::span<const std::vector<seq_id>> seqs) {
    std::vector<seq_id> out;
    for (const auto &s : seqs)
        if (std::find(out.begin(), out.end(), s.front()) == out.end()) out.push_back(s.front());
    return out;
}

// The sequences a batch names (sequence 0 when it names none), valid or not yet checked.
std::vector<seq_id> batch_sequences(const batch &b, uint32_t n_seq_max) {
    std::vector<seq_id> out;
    if (b.seq_ids.empty()) out.push_back(0);
    for (const auto &ids : b.seq_ids)
        for (seq_id s : ids)
            if (s >= 0 && uint32_t(s) < n_seq_max && std::find(out.begin(), out.end(), s) == out.end())
                out.push_back(s);
    return out;
}

}  // namespace

// A batch after validation, every per-token field present.
struct inference_context::filled_batch {
    int32_t n = 0;
    const token *tokens = nullptr;  // or
    const float *embd = nullptr;
    std::vector<llm_pos> pos;
    std::vector<std::vector<seq_id>> seqs;
    std::vector<int8_t> output;
};

// One recorded graph with its arena; kept for reuse while the shape stays the same.
struct inference_context::built_graph {
    std::unique_ptr<context> ctx;
    graph g;
    graph_inputs in;
    graph_shape shape;
    bool valid = false;

    explicit built_graph(size_t capacity) : g(capacity) {}
};

// The graph that rotates the cached keys of n_cells moved cells (model::build_k_shift).
struct inference_context::shift_graph {
    std::unique_ptr<context> ctx;
    graph g;
    k_shift_inputs in;

    shift_graph(const inference_context &c, int64_t n_cells) : g(c.graph_capacity()) {
        context_params cp;
        cp.mem_size = context_overhead(size_t(c.model_.hparams().n_layer) * 12 + 16);
        cp.no_alloc = true;
        ctx = std::make_unique<context>(cp);
        in = c.model_.build_k_shift(*ctx, g, c.kv_->layers(), n_cells);
    }
};

struct inference_context::runtime_state {
    std::unique_ptr<backend> compute;  // the device's backend
    std::unique_ptr<backend> offload;  // the model's offload device's (model::offload_device), if any
    std::unique_ptr<scheduler> sched;
    std::unique_ptr<built_graph> current;
    std::unique_ptr<op_profile> env_profile;  // WEFT_PROFILE=1: printed at destruction
};

std::vector<device *> available_devices() {
    register_cpu_device();
    register_vulkan_devices();  // none without a loader or a device (vulkan_status says why)
    return devices();
}

device &select_device(const std::string &name) {
    // The default (the CPU) and a device already registered need no probe of the GPUs: loading a
    // Vulkan driver (lavapipe brings LLVM) costs a tenth of a second of every command's start.
    register_cpu_device();
    if (!name.empty()) {
        if (device *d = find_device(name)) return *d;
        available_devices();
        return device_by_name(name);
    }
    const std::vector<device *> all = devices();
    for (device *d : all)  // the default: the first host device (the CPU; GPUs take offloaded blocks)
        if (d->default_buffer_type().is_host()) return *d;
    return *all.front();
}

inference_context::inference_context(const weft::model &m, const inference_params &params)
    : model_(m), params_(params), state_(std::make_unique<runtime_state>()) {
    if (m.vocab_only())
        throw error(m.path() + ": the model was loaded vocabulary-only; it has no weights to run");
    const model_hparams &hp = m.hparams();
    if (params_.n_ctx == 0) params_.n_ctx = uint32_t(hp.n_ctx_train);
    if (params_.n_batch == 0) params_.n_batch = params_.n_ctx;
    if (params_.n_ubatch == 0) params_.n_ubatch = params_.n_batch;
    params_.n_ubatch = std::min(params_.n_ubatch, params_.n_batch);
    params_.n_ubatch = std::min(params_.n_ubatch, params_.n_ctx);
    if (params_.n_threads <= 0)
        params_.n_threads = int32_t(std::max(1u, std::thread::hardware_concurrency()));
    if (params_.n_threads_batch <= 0) params_.n_threads_batch = params_.n_threads;

    device_ = &select_device(params_.device);
    state_->compute = device_->make_backend(params_.n_threads);
    // offloaded blocks compute on their device; the scheduler hands it every node it supports whose
    // weights are there and gives the rest (and what the device lacks) to this context's device
    if (weft::device *offload = m.offload_device()) {
        if (!device_->default_buffer_type().is_host())
            throw error(std::string("a model offloaded to ") + offload->name() +
                        " computes the rest on the host: the context's device must be a host device, not " +
                        device_->name());
        state_->offload = offload->make_backend(params_.n_threads);
    }
    // An encoder's K and V stay f32, as the reference keeps them (it has no cache for them).
    const dtype type_k = hp.encoder ? dtype::f32 : params_.type_k;
    const dtype type_v = hp.encoder ? dtype::f32 : params_.type_v;
    // the memory the model's layers need: a KV cache, per-sequence states (n_ctx then bounds the
    // positions they hold together), or both
    memory_params mp;
    mp.n_ctx = params_.n_ctx;
    mp.n_seq_max = params_.n_seq_max;
    mp.type_k = type_k;
    mp.type_v = type_v;
    mp.dev = device_;
    // offloaded blocks keep their cache on the device when it writes and reads the cache's types
    // (else the host holds it and computes their attention)
    mp.offload_kv = state_->offload && device_holds_cache(*state_->offload, hp, type_k, type_v);
    memory_ = make_sequence_memory(m, mp);
    kv_ = memory_->attention();
    rs_ = memory_->recurrent();

    const std::vector<backend *> backends = compute_backends();
    const char *env = std::getenv("WEFT_PROFILE");
    if (env && *env && std::string(env) != "0") state_->env_profile = std::make_unique<op_profile>();
    for (backend *b : backends) {
        if (params_.abort_callback) b->set_abort_callback(params_.abort_callback);
        if (state_->env_profile) b->set_profile(state_->env_profile.get());
    }
    state_->sched = std::make_unique<scheduler>(backends);
    if (params_.cb_eval) state_->sched->set_eval_callback(params_.cb_eval);

    // Worst cases over every cell: a full ubatch with every row producing logits, the same with
    // one row (its output selection changes the plan), and a single token. The buffer takes the
    // largest, so decoding never grows it.
    // every adapter in the graph, whatever its scale now (one at 0 is left out), so a later scale
    // does not grow the buffer either
    const std::vector<lora_use> loras = params_.loras;
    for (lora_use &u : params_.loras) u.scale = 1.0f;
    const int64_t n_ub = params_.n_ubatch;
    for (const auto &[n_tokens, n_outputs] :
         {std::pair{n_ub, n_ub}, std::pair{n_ub, int64_t(1)}, std::pair{int64_t(1), int64_t(1)}}) {
        built_graph worst(graph_capacity());
        graph_shape shape;
        shape.n_tokens = n_tokens;
        shape.n_outputs = n_outputs;
        shape.n_kv = kv_ ? params_.n_ctx : 0;
        shape.n_seqs = rs_ ? std::min<int64_t>(n_tokens, params_.n_seq_max) : 0;
        build_graph(worst, shape);
        state_->sched->reserve(worst.g);
    }
    params_.loras = loras;
    // and re-rotating the keys of every cell, so a context shift does not grow it either
    if (can_shift()) {
        shift_graph worst(*this, params_.n_ctx);
        state_->sched->reserve(worst.g);
    }
    // the other ranks make their stage's context with the same parameters
    forward(pipeline_protocol::command::open, params_.n_ctx, params_.n_batch, params_.n_ubatch,
            params_.n_seq_max, params_.n_threads, params_.n_threads_batch, int32_t(params_.type_k),
            int32_t(params_.type_v));
}

inference_context::~inference_context() {
    forward(pipeline_protocol::command::close);
    if (state_ && state_->env_profile && state_->env_profile->graphs() > 0)
        std::fprintf(stderr, "%s", state_->env_profile->format("weft profile (WEFT_PROFILE)").c_str());
}

void inference_context::set_profile(op_profile *profile) {
    for (backend *b : {state_->compute.get(), state_->offload.get()})
        if (b) b->set_profile(profile ? profile : state_->env_profile.get());
}

void inference_context::set_lora_scales(std::span<const float> scales) {
    if (scales.size() != params_.loras.size())
        throw error("set_lora_scales: " + std::to_string(scales.size()) + " scales for " +
                    std::to_string(params_.loras.size()) + " adapters");
    for (size_t i = 0; i < scales.size(); ++i)
        if (!std::isfinite(scales[i]))
            throw error("set_lora_scales: adapter " + std::to_string(i) + ": not a number");
    // the scales are a graph input; which adapters apply (scale 0: none of their products) is the
    // graph's shape
    bool reshaped = false;
    for (size_t i = 0; i < scales.size(); ++i) {
        reshaped = reshaped || (params_.loras[i].scale == 0.0f) != (scales[i] == 0.0f);
        params_.loras[i].scale = scales[i];
    }
    if (reshaped && state_->current) state_->current->valid = false;  // the next decode builds its graph
}

std::vector<float> inference_context::lora_scales() const {
    std::vector<float> out;
    for (const lora_use &u : params_.loras) out.push_back(u.scale);
    return out;
}

size_t inference_context::graph_tensor_budget() const {
    size_t n = model_.graph_tensor_budget();
    for (const lora_use &u : params_.loras)  // two products, a scale, a view, a mul and an add
        if (u.adapter) n += 6 * u.adapter->pairs().size() + 1;
    return n;
}

size_t inference_context::graph_capacity() const {
    return std::max<size_t>(default_graph_size, graph_tensor_budget());
}

uint32_t inference_context::n_ctx() const {
    return kv_ ? kv_->size() : params_.n_ctx;
}
int32_t inference_context::n_vocab() const {
    return int32_t(model_.hparams().n_vocab);
}

void inference_context::set_n_threads(int32_t n_threads, int32_t n_threads_batch) {
    params_.n_threads = std::max(1, n_threads);
    params_.n_threads_batch = std::max(1, n_threads_batch);
}

void inference_context::build_graph(built_graph &bg, const graph_shape &shape) const {
    context_params cp;
    cp.mem_size = context_overhead(graph_tensor_budget());
    cp.no_alloc = true;
    bg.ctx = std::make_unique<context>(cp);
    bg.g.clear();
    bg.shape = shape;
    graph_build_params p;
    p.shape = shape;
    if (kv_) p.kv = kv_->layers();
    if (rs_) p.recurrent = rs_->layers();
    p.loras = params_.loras;
    bg.in = model_.build_graph(*bg.ctx, bg.g, p);
    bg.valid = true;
}

bool inference_context::validate_and_fill(const batch &b, filled_batch &fb) {
    const model_hparams &hp = model_.hparams();
    auto fail = [&](const std::string &what) {
        last_error_ = "invalid batch: " + what;
        return false;
    };
    const int32_t n = b.n_tokens();
    if (!b.tokens.empty() && !b.embd.empty()) return fail("both tokens and embeddings are given");
    if (n <= 0) return fail("no tokens");
    if (uint32_t(n) > params_.n_batch)
        return fail(std::to_string(n) + " tokens exceed n_batch " + std::to_string(params_.n_batch));
    if (!b.embd.empty() && b.embd.size() != size_t(n) * size_t(hp.n_embd))
        return fail("embeddings hold " + std::to_string(b.embd.size()) + " floats, expected " +
                    std::to_string(n) + " x n_embd " + std::to_string(hp.n_embd));
    auto check_size = [&](size_t sz, const char *field) {
        return sz == 0 || sz == size_t(n) ? true
                                          : fail(std::string(field) + " has " + std::to_string(sz) +
                                                 " entries for " + std::to_string(n) + " tokens");
    };
    if (!check_size(b.pos.size(), "pos") || !check_size(b.seq_ids.size(), "seq_ids") ||
        !check_size(b.output.size(), "output"))
        return false;

    fb.n = n;
    fb.tokens = b.tokens.empty() ? nullptr : b.tokens.data();
    fb.embd = b.embd.empty() ? nullptr : b.embd.data();
    for (int32_t i = 0; fb.tokens && i < n; ++i)
        if (fb.tokens[i] < 0 || fb.tokens[i] >= hp.n_vocab)
            return fail("token " + std::to_string(i) + " has id " + std::to_string(fb.tokens[i]) +
                        ", outside the vocabulary [0, " + std::to_string(hp.n_vocab) + ")");

    fb.seqs.assign(size_t(n), std::vector<seq_id>{0});
    if (!b.seq_ids.empty()) {
        for (int32_t i = 0; i < n; ++i) {
            const auto &s = b.seq_ids[size_t(i)];
            if (s.empty()) return fail("token " + std::to_string(i) + " belongs to no sequence");
            for (seq_id id : s)
                if (id < 0 || uint32_t(id) >= params_.n_seq_max)
                    return fail("token " + std::to_string(i) + " has sequence id " + std::to_string(id) +
                                ", outside [0, n_seq_max " + std::to_string(params_.n_seq_max) + ")");
            if (rs_ && s.size() != 1)
                return fail("token " + std::to_string(i) + " belongs to " + std::to_string(s.size()) +
                            " sequences; a recurrent model's token advances one sequence's state");
            fb.seqs[size_t(i)] = s;
        }
    }

    // Positions: each sequence continues after what the cache holds and never goes backwards.
    std::vector<llm_pos> last = memory_->seq_pos_max_all();
    fb.pos.resize(size_t(n));
    for (int32_t i = 0; i < n; ++i) {
        const auto &s = fb.seqs[size_t(i)];
        llm_pos p;
        if (b.pos.empty()) {
            p = last[size_t(s.front())] + 1;
        } else {
            p = b.pos[size_t(i)];
            if (p < 0)
                return fail("token " + std::to_string(i) + " has negative position " + std::to_string(p));
        }
        for (seq_id id : s)
            if (p <= last[size_t(id)])
                return fail("token " + std::to_string(i) + " of sequence " + std::to_string(id) +
                            " has position " + std::to_string(p) +
                            ", not after the sequence's last position " + std::to_string(last[size_t(id)]));
        for (seq_id id : s) last[size_t(id)] = p;
        fb.pos[size_t(i)] = p;
    }

    if (b.output.empty()) {
        fb.output.assign(size_t(n), 0);
        fb.output.back() = 1;
    } else {
        fb.output = b.output;
    }
    return true;
}

void inference_context::set_inputs(built_graph &bg, const filled_batch &fb, int32_t begin, int32_t n,
                                   std::span<const uint32_t> cells, std::span<const int32_t> out_local) {
    const graph_inputs &in = bg.in;
    if (in.tokens) write_input(in.tokens, fb.tokens + begin, size_t(n) * sizeof(token));
    if (in.embd)
        write_input(in.embd, fb.embd + size_t(begin) * size_t(model_.hparams().n_embd),
                    size_t(n) * size_t(model_.hparams().n_embd) * sizeof(float));
    if (in.pos) write_input(in.pos, fb.pos.data() + begin, size_t(n) * sizeof(llm_pos));
    if (in.kv_idxs) {
        std::vector<int64_t> idx(cells.begin(), cells.end());
        write_input(in.kv_idxs, idx.data(), idx.size() * sizeof(int64_t));
    }
    // the causal mask, and the sliding-window one when the graph has sliding-window layers
    for (tensor *mask_input : {in.kq_mask, in.kq_mask_swa}) {
        if (!mask_input) continue;
        const uint32_t n_kv = uint32_t(bg.shape.n_kv);
        std::vector<float> mask(size_t(n_kv) * size_t(n));
        kv_->fill_mask(mask.data(), n_kv, std::span<const llm_pos>(fb.pos).subspan(size_t(begin), size_t(n)),
                       std::span<const std::vector<seq_id>>(fb.seqs).subspan(size_t(begin), size_t(n)),
                       mask_input == in.kq_mask_swa ? model_.hparams().n_swa : 0,
                       model_.hparams().causal_attn, model_.hparams().swa_type);
        write_input(mask_input, mask.data(), mask.size() * sizeof(float));
    }
    if (in.kv_pos) {
        std::vector<int32_t> positions(size_t(bg.shape.n_kv));
        for (size_t c = 0; c < positions.size(); ++c)
            positions[c] = kv_->cells()[c].empty() ? -1 : int32_t(kv_->cells()[c].pos);
        write_input(in.kv_pos, positions.data(), positions.size() * sizeof(int32_t));
    }
    if (in.attn_scale) {  // each token's attention temperature (llama4, mistral3)
        std::vector<float> scales(static_cast<size_t>(n));
        for (int32_t i = 0; i < n; ++i)
            scales[size_t(i)] = model_.hparams().attn_temperature(fb.pos[size_t(begin + i)]);
        write_input(in.attn_scale, scales.data(), scales.size() * sizeof(float));
    }
    if (in.out_ids) write_input(in.out_ids, out_local.data(), out_local.size() * sizeof(int32_t));
    if (in.lora_scales) {
        const std::vector<float> scales = lora_scales();
        write_input(in.lora_scales, scales.data(), scales.size() * sizeof(float));
    }
    if (in.rs_token_seq) {  // each sequence's current state row and its spare (recurrent_memory.h)
        const auto seqs = std::span<const std::vector<seq_id>>(fb.seqs).subspan(size_t(begin), size_t(n));
        const std::vector<seq_id> useqs = ubatch_sequences(seqs);
        std::vector<int32_t> token_seq, read, written, pairs;
        for (const auto &s : seqs)
            token_seq.push_back(int32_t(std::find(useqs.begin(), useqs.end(), s.front()) - useqs.begin()));
        rs_->ubatch_columns(useqs, read, written, pairs);
        write_input(in.rs_token_seq, token_seq.data(), token_seq.size() * sizeof(int32_t));
        for (const auto &[t, v] :
             {std::pair{in.rs_slots, &read}, {in.rs_slots_out, &written}, {in.rs_columns, &pairs}})
            if (t) write_input(t, v->data(), v->size() * sizeof(int32_t));
    }
}

compute_status inference_context::apply_kv_shift() {
    if (!kv_) return compute_status::ok;  // a recurrent state has no positions to move
    const std::vector<uint32_t> moved = kv_->shifted_cells();
    if (moved.empty()) {
        kv_->clear_shift();  // moved cells may have been removed since
        return compute_status::ok;
    }
    shift_graph sg(*this, int64_t(moved.size()));
    std::vector<int32_t> cells(moved.begin(), moved.end()), deltas;
    for (uint32_t c : moved) deltas.push_back(kv_->cells()[c].delta);
    state_->sched->alloc_graph(sg.g);
    write_input(sg.in.cells, cells.data(), cells.size() * sizeof(int32_t));
    write_input(sg.in.deltas, deltas.data(), deltas.size() * sizeof(int32_t));
    set_compute_threads(params_.n_threads_batch);
    // the decode graph's memory was handed to this one: it is placed again before its next use
    if (state_->current) state_->current->valid = false;
    const compute_status st = state_->sched->compute(sg.g);
    if (st == compute_status::ok) {
        kv_->clear_shift();
        ++perf_.n_k_shifts;
    }
    return st;
}

void inference_context::kv_update() {
    const compute_status st = apply_kv_shift();
    if (st == compute_status::aborted)
        throw error("re-rotating the cached keys was aborted by the abort callback");
    if (st != compute_status::ok) throw error("re-rotating the cached keys failed");
    forward(pipeline_protocol::command::update);
}

template <class Command, class... Args>
void inference_context::forward(Command c, const Args &...args) const {
    if (drives_pipeline()) send_command(pipeline_protocol::command_message(c, args...));
}

bool inference_context::drives_pipeline() const {
    return params_.pipeline && params_.pipeline->rank() == 0 && params_.pipeline->n_ranks() > 1;
}

void inference_context::send_command(const std::vector<uint8_t> &command_and_args) const {
    for (int r = 1; r < params_.pipeline->n_ranks(); ++r)
        params_.pipeline->send(r, pipeline_protocol::tag_command, command_and_args);
}

void inference_context::pass_on(int32_t status, std::span<const float> hidden) {
    owes_hidden_ = false;
    pipeline_link *link = params_.pipeline;
    if (!link || model_.last_stage()) return;
    pipeline_protocol::message_writer w;
    w.value(status).array(hidden);
    link->send(link->rank() + 1, pipeline_protocol::tag_hidden, w.bytes);
}

int inference_context::exchange_result(int rc) {
    using namespace pipeline_protocol;
    pipeline_link *link = params_.pipeline;
    if (!link || link->n_ranks() == 1) return rc;
    if (owes_hidden_) pass_on(decode_failed);  // an exception left a ubatch half done
    if (model_.last_stage()) {
        message_writer w;
        w.value(int32_t(rc))
            .array(std::span<const char>(last_error_))
            .array(std::span<const float>(rc == decode_ok ? logits_ : std::vector<float>{}));
        link->send(0, tag_result, w.bytes);
        return rc;
    }
    if (link->rank() != 0) return rc;
    const std::vector<uint8_t> msg = link->recv(link->n_ranks() - 1, tag_result);
    message_reader r(msg);
    const auto last_rc = r.value<int32_t>();
    const std::vector<char> text = r.array<char>();
    std::vector<float> logits = r.array<float>();
    if (rc != decode_ok) return rc;
    if (last_rc != decode_ok) {
        last_error_ =
            "rank " + std::to_string(link->n_ranks() - 1) + ": " + std::string(text.begin(), text.end());
        return last_rc;
    }
    if (logits.size() != logits_.size()) {
        last_error_ = "the last pipeline rank sent " + std::to_string(logits.size()) + " logits, expected " +
                      std::to_string(logits_.size());
        return decode_failed;
    }
    logits_ = std::move(logits);
    return decode_ok;
}

int inference_context::decode(const batch &b) {
    last_error_.clear();
    const bool follows = params_.pipeline && params_.pipeline->rank() > 0;
    try {
        if (apply_kv_shift() != compute_status::ok) {
            last_error_ = "re-rotating the cached keys after a position move failed or was aborted";
            // a rank > 0 has no abort callback: its failure is not rank 0's, and the ranks would part
            if (follows) throw error(last_error_);
            return decode_failed;
        }
    } catch (const std::exception &e) {
        if (follows) throw;
        last_error_ = std::string("re-rotating the cached keys: ") + e.what();
        return decode_failed;
    }
    // The other ranks follow once the keys are in place here (a shift aborted on rank 0 stays
    // pending on every rank, to be done by the next decode).
    if (drives_pipeline()) {
        std::vector<uint8_t> msg = pipeline_protocol::command_message(pipeline_protocol::command::decode);
        const std::vector<uint8_t> bytes = pipeline_protocol::encode_batch(b);
        msg.insert(msg.end(), bytes.begin(), bytes.end());
        send_command(msg);
    }
    // A batch that fails part way leaves the memory as it was before the call (the KV cells it
    // assigned emptied again, the states of its sequences, which the graphs overwrite as they go,
    // restored).
    memory_->begin(batch_sequences(b, params_.n_seq_max));
    int rc;
    try {
        rc = decode_impl(b);
    } catch (const std::exception &e) {
        last_error_ = e.what();
        if (state_->current) state_->current->valid = false;
        rc = decode_failed;
    }
    try {
        rc = exchange_result(rc);
    } catch (const std::exception &e) {
        last_error_ = std::string("pipeline: ") + e.what();
        rc = decode_failed;
    }
    if (rc == decode_aborted || rc == decode_failed) {
        memory_->rollback();
        output_batch_index_.clear();
        batch_output_row_.clear();
        logits_.clear();
    }
    return rc;
}

int inference_context::decode_impl(const batch &b) {
    const auto t0 = clock_type::now();
    filled_batch fb;
    if (!validate_and_fill(b, fb)) return decode_invalid;
    const int32_t n = fb.n;

    // Room for every ubatch first: a batch that does not fit changes nothing.
    const std::span<const std::vector<seq_id>> seqs(fb.seqs);
    sequence_memory::room room;
    if (!memory_->find_room(seqs, room, last_error_)) return decode_no_kv_space;
    if (room.compacted) ++perf_.n_defrags;

    // An encoder's tokens see the whole sequence: all of them in one ubatch.
    if (!model_.hparams().causal_attn && n > int32_t(params_.n_ubatch)) {
        last_error_ = "the batch has " + std::to_string(n) +
                      " tokens; this model attends both ways, so they must fit in one ubatch (" +
                      std::to_string(params_.n_ubatch) + ")";
        return decode_invalid;
    }

    // Output rows in batch order (n_vocab logits, or an encoder's n_embd hidden states).
    const int32_t n_vocab = int32_t(model_.hparams().n_output());
    output_batch_index_.clear();
    batch_output_row_.assign(size_t(n), -1);
    for (int32_t i = 0; i < n; ++i)
        if (fb.output[size_t(i)]) {
            batch_output_row_[size_t(i)] = int32_t(output_batch_index_.size());
            output_batch_index_.push_back(i);
        }
    logits_.resize(output_batch_index_.size() * size_t(n_vocab));

    const int32_t n_ubatch = int32_t(params_.n_ubatch);
    for (int32_t begin = 0; begin < n; begin += n_ubatch) {
        const int32_t nu = std::min(n_ubatch, n - begin);
        const std::span<const uint32_t> cells =
            kv_ ? std::span<const uint32_t>(room.cells.data() + begin, size_t(nu))
                : std::span<const uint32_t>();
        for (int32_t t = begin; t < begin + nu; ++t)
            memory_->apply(room, size_t(t), fb.pos[size_t(t)], fb.seqs[size_t(t)]);

        std::vector<int32_t> out_local;
        for (int32_t t = 0; t < nu; ++t)
            if (fb.output[size_t(begin + t)]) out_local.push_back(t);
        const size_t n_wanted = out_local.size();
        if (out_local.empty()) out_local.push_back(nu - 1);  // a graph computes at least one row

        graph_shape shape;
        shape.n_tokens = nu;
        shape.n_outputs = int64_t(out_local.size());
        shape.n_kv = kv_ ? kv_->n_kv_for_graph(n_kv_pad) : 0;
        shape.embd_input = fb.embd != nullptr;
        if (rs_) shape.n_seqs = int64_t(ubatch_sequences(seqs.subspan(size_t(begin), size_t(nu))).size());

        std::unique_ptr<built_graph> &cur = state_->current;
        if (cur && cur->valid && cur->shape == shape) {
            ++perf_.n_graph_reuses;
        } else {
            const auto t_build = std::chrono::steady_clock::now();
            if (!cur) cur = std::make_unique<built_graph>(graph_capacity());
            build_graph(*cur, shape);
            state_->sched->alloc_graph(cur->g);
            ++perf_.n_graph_builds;
            perf_.t_graph_build_ms +=
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_build).count();
        }
        // A later pipeline stage starts from the previous rank's hidden states of this ubatch.
        const size_t n_hidden = size_t(nu) * size_t(model_.hparams().n_embd);
        std::vector<float> hidden;
        if (!model_.first_stage()) {
            pipeline_link &link = *params_.pipeline;
            const std::vector<uint8_t> msg = link.recv(link.rank() - 1, pipeline_protocol::tag_hidden);
            pipeline_protocol::message_reader r(msg);
            const auto status = r.value<int32_t>();
            if (status != decode_ok) {
                pass_on(status);
                last_error_ = "rank " + std::to_string(link.rank() - 1) + " stopped the batch";
                return status;
            }
            hidden = r.array<float>();
            if (hidden.size() != n_hidden) {
                pass_on(decode_failed);
                last_error_ = "rank " + std::to_string(link.rank() - 1) + " sent " +
                              std::to_string(hidden.size()) + " hidden values, expected " +
                              std::to_string(n_hidden);
                return decode_failed;
            }
        }
        owes_hidden_ = !model_.last_stage();
        const std::vector<seq_id> ubatch_seqs =
            rs_ ? ubatch_sequences(seqs.subspan(size_t(begin), size_t(nu))) : std::vector<seq_id>();
        if (rs_) rs_->prepare(ubatch_seqs);
        set_inputs(*cur, fb, begin, nu, cells, out_local);
        if (cur->in.hidden) write_input(cur->in.hidden, hidden.data(), n_hidden * sizeof(float));
        set_compute_threads(nu > 1 ? params_.n_threads_batch : params_.n_threads);

        const compute_status st = state_->sched->compute(cur->g);
        if (st != compute_status::ok) {
            const int rc = st == compute_status::aborted ? decode_aborted : decode_failed;
            pass_on(rc);
            last_error_ =
                rc == decode_aborted ? "decode aborted by the abort callback" : "graph computation failed";
            return rc;
        }
        if (rs_) rs_->commit(ubatch_seqs);  // the new states, written into the spare rows, are current
        if (!model_.last_stage()) {  // the next rank goes on with this ubatch while this one takes the next
            hidden.resize(n_hidden);
            read_output(cur->in.logits, hidden.data(), 0, n_hidden * sizeof(float));
            pass_on(decode_ok, hidden);
            continue;
        }

        // Copy out the rows that were asked for (batch order within the ubatch).
        const size_t row_bytes = size_t(n_vocab) * sizeof(float);
        for (size_t r = 0; r < n_wanted; ++r) {
            const int32_t row = batch_output_row_[size_t(begin + out_local[r])];
            read_output(cur->in.logits, logits_.data() + size_t(row) * size_t(n_vocab), r * row_bytes,
                        row_bytes);
        }
    }

    const double ms = ms_since(t0);
    if (n > 1) {
        perf_.t_p_eval_ms += ms;
        perf_.n_p_eval += n;
    } else {
        perf_.t_eval_ms += ms;
        perf_.n_eval += n;
    }
    return decode_ok;
}

const float *inference_context::get_logits_ith(int32_t i) const {
    const int32_t n_out = n_outputs();
    if (i < 0) {
        const int32_t j = n_out + i;
        if (j < 0)
            throw error("get_logits_ith(" + std::to_string(i) + "): the last decode produced " +
                        std::to_string(n_out) + " rows of logits");
        return logits_.data() + size_t(j) * size_t(model_.hparams().n_output());
    }
    if (size_t(i) >= batch_output_row_.size())
        throw error("get_logits_ith(" + std::to_string(i) + "): the last batch had " +
                    std::to_string(batch_output_row_.size()) + " tokens");
    const int32_t row = batch_output_row_[size_t(i)];
    if (row < 0) throw error("get_logits_ith(" + std::to_string(i) + "): that token did not ask for logits");
    return logits_.data() + size_t(row) * size_t(model_.hparams().n_output());
}

bool inference_context::kv_seq_rm(seq_id s, llm_pos p0, llm_pos p1) {
    const bool removed = memory_->seq_rm(s, p0, p1);
    forward(pipeline_protocol::command::seq_rm, s, p0, p1);
    return removed;
}
void inference_context::kv_seq_cp(seq_id src, seq_id dst, llm_pos p0, llm_pos p1) {
    memory_->seq_cp(src, dst, p0, p1);
    forward(pipeline_protocol::command::seq_cp, src, dst, p0, p1);
}
void inference_context::kv_seq_keep(seq_id s) {
    memory_->seq_keep(s);
    forward(pipeline_protocol::command::seq_keep, s);
}
llm_pos inference_context::kv_seq_pos_max(seq_id s) const {
    return memory_->seq_pos_max(s);
}
llm_pos inference_context::kv_seq_pos_min(seq_id s) const {
    return memory_->seq_pos_min(s);
}
bool inference_context::can_shift() const {
    return memory_->cannot_shift_reason().empty();
}

std::string inference_context::cannot_shift_reason() const {
    return memory_->cannot_shift_reason();
}

void inference_context::kv_seq_add(seq_id s, llm_pos p0, llm_pos p1, llm_pos delta) {
    if (delta == 0) return;
    if (!can_shift()) throw error("kv_seq_add: " + cannot_shift_reason());
    memory_->seq_add(s, p0, p1, delta);
    forward(pipeline_protocol::command::seq_add, s, p0, p1, delta);
}

void inference_context::kv_seq_div(seq_id s, llm_pos p0, llm_pos p1, int d) {
    if (d < 1) throw error("kv_seq_div: the divisor is " + std::to_string(d) + ", must be at least 1");
    if (d == 1) return;
    if (!can_shift()) throw error("kv_seq_div: " + cannot_shift_reason());
    memory_->seq_div(s, p0, p1, d);
    forward(pipeline_protocol::command::seq_div, s, p0, p1, int32_t(d));
}

uint32_t inference_context::kv_defrag() {
    const uint32_t moved = kv_ ? kv_->defrag() : 0;
    if (moved > 0) ++perf_.n_defrags;
    forward(pipeline_protocol::command::defrag);
    return moved;
}

void inference_context::kv_clear() {
    memory_->clear();
    forward(pipeline_protocol::command::clear);
}
uint32_t inference_context::kv_used_cells() const {
    return memory_->used();
}
size_t inference_context::kv_bytes() const {
    return memory_->total_bytes();
}
const kv_cache &inference_context::kv() const {
    if (!kv_)
        throw error(model_.arch_name() +
                    " is a recurrent model: it keeps per-sequence states, not a KV cache");
    return *kv_;
}
size_t inference_context::compute_buffer_bytes() const {
    return state_->sched->compute_buffer_size();
}
int inference_context::compute_grow_count() const {
    return state_->sched->grow_count();
}

void inference_context::visit_step_graph(int32_t n_tokens,
                                         const std::function<void(const graph &)> &fn) const {
    if (n_tokens <= 0 || uint32_t(n_tokens) > n_ctx())
        throw error("graph of " + std::to_string(n_tokens) + " tokens: must be in [1, n_ctx " +
                    std::to_string(n_ctx()) + "]");
    built_graph bg(graph_capacity());
    graph_shape shape;
    shape.n_tokens = n_tokens;
    shape.n_outputs = 1;
    shape.n_kv =
        kv_ ? std::min<int64_t>(kv_->size(), (int64_t(n_tokens) + n_kv_pad - 1) / n_kv_pad * n_kv_pad) : 0;
    shape.n_seqs = rs_ ? 1 : 0;
    build_graph(bg, shape);
    fn(bg.g);
}

void inference_context::set_compute_threads(int n) {
    for (backend *b : compute_backends()) b->set_n_threads(n);
}

std::vector<backend *> inference_context::compute_backends() const {
    std::vector<backend *> out;
    if (state_->offload) out.push_back(state_->offload.get());
    out.push_back(state_->compute.get());
    return out;
}

inference_context::graph_report inference_context::describe_graph(int32_t n_tokens, std::ostream *dot) const {
    graph_report r;
    visit_step_graph(n_tokens, [&](const graph &g) {
        r.n_nodes = g.nodes.size();
        r.n_leafs = g.leafs.size();
        for (const auto &[op, count] : graph_op_counts(g)) r.ops.emplace_back(op_name(op), count);
        r.planned_bytes =
            graph_allocator::make_plan(g, device_->default_buffer_type().alignment()).peak_bytes;
        scheduler placement(compute_backends());
        placement.assign(const_cast<graph &>(g));
        for (const tensor *n : g.nodes) r.node_backends.emplace_back(placement.backend_of(n)->name());
        r.n_splits = placement.n_splits();
        r.n_copies = placement.n_copies();
        if (dot) graph_dump_dot(g, *dot);
    });
    return r;
}

}  // namespace weft
