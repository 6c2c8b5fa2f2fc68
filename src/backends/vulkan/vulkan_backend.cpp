// src/backends/vulkan/vulkan_backend.cpp — the Vulkan backend: which nodes its shaders compute
// (supports_op), and a graph recorded into one command buffer (a dispatch per computing node, a
// barrier between dispatches), submitted with a fence. graph_compute_async returns once submitted;
// one submission is in flight at a time, and copies into device memory wait for it first.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <numbers>
#include <string>
#include <vector>

#include "backends/vulkan/vk_context.h"
#include "weft/core/error.h"
#include "weft/core/ops.h"

namespace weft::vk {

namespace {

std::atomic<bool> disable_subgroups{false};
std::atomic<mul_mat_path> forced_mul_mat_path{mul_mat_path::automatic};

// mul_mm.comp: its tile (rows of a x rows of b) and its shared memory (two 32 x 65 f32 arrays)
constexpr uint64_t mul_mm_tile_m = 64, mul_mm_tile_n = 64;
constexpr size_t mul_mm_shared_bytes = 2 * 32 * 65 * sizeof(float);
// From this many columns of b on, the tiled shader is faster than the vector one (measured on lavapipe
// with a 4-layer q8_0 model: 1.2x at 8 columns, 4x at 32; slower at 2 and 4, where most of a tile idles).
constexpr int64_t mul_mm_min_cols = 8;

bool is_float(dtype t) {
    return t == dtype::f32 || t == dtype::f16;
}

uint32_t float_code(dtype t) {
    return t == dtype::f32 ? 0u : 1u;
}

// The types of a KV cache the attention reads and set_rows writes, and their code in the shaders.
bool is_kv_type(dtype t) {
    return is_float(t) || t == dtype::q8_0 || t == dtype::q4_0;
}

uint32_t kv_code(dtype t) {
    return t == dtype::q8_0 ? 2u : t == dtype::q4_0 ? 3u : float_code(t);
}

// The weight types of mul_mat and get_rows, and their shader suffix.
const char *weight_suffix(dtype t) {
    switch (t) {
        case dtype::f32:
            return "f32";
        case dtype::f16:
            return "f16";
        case dtype::q8_0:
            return "q8_0";
        case dtype::q4_0:
            return "q4_0";
        case dtype::q4_k:
            return "q4_k";
        case dtype::q6_k:
            return "q6_k";
        default:
            return nullptr;
    }
}

bool rows_contiguous(const tensor &t) {
    return t.nb[0] == type_traits(t.type).type_size;
}

uint32_t u32(int64_t v) {
    return uint32_t(v);
}

uint32_t u32(size_t v) {
    return uint32_t(v);
}

// Push constants, appended in the order the shader declares them.
struct push_constants {
    uint32_t words[push_bytes / 4] = {};
    uint32_t n = 0;
    push_constants &u(uint32_t v) {
        WEFT_ASSERT(n < push_bytes / 4);
        words[n++] = v;
        return *this;
    }
    push_constants &f(float v) {
        uint32_t w;
        std::memcpy(&w, &v, sizeof w);
        return u(w);
    }
    push_constants &ne(const tensor &t) {
        for (int i = 0; i < 4; ++i) u(u32(t.ne[i]));
        return *this;
    }
    push_constants &nb(const tensor &t, int from = 0) {
        for (int i = from; i < 4; ++i) u(u32(t.nb[i]));
        return *this;
    }
};

// The submission state shared with events: generation numbers of submissions, the fence of the one in
// flight.
struct queue_state {
    std::mutex mutex;
    VkDevice dev = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    uint64_t submitted = 0, completed = 0;
    compute_status status = compute_status::ok;

    // Blocks until submission `gen` is done.
    void wait(uint64_t gen) {
        std::lock_guard<std::mutex> lock(mutex);
        if (completed >= gen || submitted == completed) return;
        const VkResult r = fn().vkWaitForFences(dev, 1, &fence, VK_TRUE, UINT64_MAX);
        if (r != VK_SUCCESS && status == compute_status::ok) status = compute_status::failed;
        completed = submitted;
    }
};

class vk_event final : public backend_event {
  public:
    vk_event(std::shared_ptr<queue_state> q, uint64_t gen) : q_(std::move(q)), gen_(gen) {}
    void synchronize() override { q_->wait(gen_); }

  private:
    std::shared_ptr<queue_state> q_;
    uint64_t gen_;
};

class vk_backend final : public backend {
  public:
    explicit vk_backend(device_context &ctx) : ctx_(ctx), q_(std::make_shared<queue_state>()) {
        const functions &f = fn();
        VkCommandPoolCreateInfo cinfo{};
        cinfo.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
        cinfo.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
        cinfo.queueFamilyIndex = ctx_.queue_family;
        check(f.vkCreateCommandPool(ctx_.dev, &cinfo, nullptr, &pool_), "vkCreateCommandPool");
        VkCommandBufferAllocateInfo ainfo{};
        ainfo.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
        ainfo.commandPool = pool_;
        ainfo.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ainfo.commandBufferCount = 1;
        check(f.vkAllocateCommandBuffers(ctx_.dev, &ainfo, &cmd_), "vkAllocateCommandBuffers");
        VkFenceCreateInfo finfo{};
        finfo.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
        q_->dev = ctx_.dev;
        check(f.vkCreateFence(ctx_.dev, &finfo, nullptr, &q_->fence), "vkCreateFence");
    }

    ~vk_backend() override {
        q_->wait(q_->submitted);
        const functions &f = fn();
        if (desc_pool_) f.vkDestroyDescriptorPool(ctx_.dev, desc_pool_, nullptr);
        f.vkDestroyFence(ctx_.dev, q_->fence, nullptr);
        f.vkDestroyCommandPool(ctx_.dev, pool_, nullptr);
    }

    const char *name() const override { return ctx_.name.c_str(); }
    buffer_type &default_buffer_type() override { return ctx_.buffer_type(); }
    bool supports_buffer_type(const buffer_type &bt) const override { return &bt == &ctx_.buffer_type(); }
    bool supports_op(const tensor &node) const override;
    void set_abort_callback(std::function<bool()> cb) override { abort_ = std::move(cb); }

    compute_status graph_compute(graph &g, const eval_callback &cb) override {
        const compute_status s = graph_compute_async(g, cb);
        const compute_status done = synchronize();
        return s != compute_status::ok ? s : done;
    }

    compute_status graph_compute_async(graph &g, const eval_callback &cb) override {
        if (abort_ && abort_()) return compute_status::aborted;
        wait_idle();
        if (!cb) {
            submit_nodes(g, 0, g.nodes.size());
            return compute_status::ok;
        }
        // with an observer: run up to (and including) each node it wants to see, wait, show it
        size_t begin = 0;
        for (size_t i = 0; i < g.nodes.size(); ++i) {
            const bool observe = cb(g.nodes[i], true);
            if (!observe && i + 1 < g.nodes.size()) continue;
            submit_nodes(g, begin, i + 1);
            wait_idle();
            if (q_->status != compute_status::ok) return q_->status;
            if (observe && !cb(g.nodes[i], false)) return compute_status::aborted;
            begin = i + 1;
        }
        return compute_status::ok;
    }

    compute_status synchronize() override {
        wait_idle();
        const compute_status s = q_->status;
        q_->status = compute_status::ok;
        return s;
    }

    std::unique_ptr<backend_event> record_event() override {
        return std::make_unique<vk_event>(q_, q_->submitted);
    }

    void set_tensor_async(tensor &t, const void *src, size_t offset, size_t n) override {
        wait_idle();  // the memory may still be read by the graph in flight
        WEFT_ASSERT(t.buffer != nullptr);
        t.buffer->set_tensor(t, src, offset, n);
    }

    void get_tensor_async(const tensor &t, void *dst, size_t offset, size_t n) override {
        wait_idle();
        WEFT_ASSERT(t.buffer != nullptr);
        t.buffer->get_tensor(t, dst, offset, n);
    }

    // Within this device: a copy command on the queue (after the producer's work, which the caller
    // waited for).
    bool copy_tensor_async(backend &from, const tensor &src, tensor &dst) override {
        (void)from;
        const buffer_type &own = ctx_.buffer_type();
        if (!src.buffer || !dst.buffer || &src.buffer->type() != &own || &dst.buffer->type() != &own)
            return false;
        if (!src.is_contiguous() || !dst.is_contiguous() || src.nbytes() != dst.nbytes()) return false;
        if (src.nbytes() == 0) return true;
        wait_idle();  // the graph in flight may still read dst
        auto offset = [](const tensor &t) {
            return VkDeviceSize(static_cast<const char *>(t.data) -
                                static_cast<const char *>(t.buffer->base()));
        };
        const VkBufferCopy region{offset(src), offset(dst), VkDeviceSize(src.nbytes())};
        ctx_.submit_and_wait([&](VkCommandBuffer cmd) {
            VkMemoryBarrier mb{};  // earlier shaders' and copies' writes, before the copy reads and writes
            mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
            mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
            mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
            fn().vkCmdPipelineBarrier(cmd,
                                      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                      VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
            fn().vkCmdCopyBuffer(cmd, buffer_of(*src.buffer).buffer, buffer_of(*dst.buffer).buffer, 1,
                                 &region);
        });
        return true;
    }

  private:
    struct bound {
        VkDescriptorBufferInfo info;
        uint32_t rem;  // bytes from the binding's start to the tensor
    };

    void wait_idle() { q_->wait(q_->submitted); }

    bound bind(const tensor &t) const {
        if (t.data == nullptr || t.buffer == nullptr)
            throw error("[vulkan] tensor '" + std::string(t.name) + "' has no memory");
        if (&t.buffer->type() != &ctx_.buffer_type())
            throw error("[vulkan] tensor '" + std::string(t.name) + "' is not in " + ctx_.name + "'s memory");
        const buffer_ref b = buffer_of(*t.buffer);
        const size_t off =
            size_t(static_cast<const char *>(t.data) - static_cast<const char *>(t.buffer->base()));
        const size_t start = off / ctx_.min_offset_alignment * ctx_.min_offset_alignment;
        const size_t range = std::min(b.size - start, ctx_.max_range);
        if (off - start + t.nbytes() > range)
            throw error("[vulkan] tensor '" + std::string(t.name) + "' is larger than a binding of " +
                        ctx_.name);
        return {{b.buffer, VkDeviceSize(start), VkDeviceSize(range)}, uint32_t(off - start)};
    }

    // Binds the tensors (bindings 0, 1 ...), records the shader's dispatch of `groups` workgroups (a
    // 2-D grid) and a barrier after it. `make_pc` gets the bindings' offsets.
    template <class MakePc>
    void dispatch(const std::string &shader, std::initializer_list<const tensor *> tensors, uint64_t groups,
                  MakePc make_pc) {
        if (groups == 0) return;
        std::vector<bound> b;
        for (const tensor *t : tensors) b.push_back(bind(*t));
        push_constants pc;
        make_pc(pc, b);
        const functions &f = fn();
        VkDescriptorSetAllocateInfo ainfo{};
        ainfo.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
        ainfo.descriptorPool = desc_pool_;
        ainfo.descriptorSetCount = 1;
        ainfo.pSetLayouts = &ctx_.set_layout;
        VkDescriptorSet set = VK_NULL_HANDLE;
        check(f.vkAllocateDescriptorSets(ctx_.dev, &ainfo, &set), "vkAllocateDescriptorSets");
        VkDescriptorBufferInfo infos[max_bindings];
        VkWriteDescriptorSet writes[max_bindings]{};
        for (uint32_t i = 0; i < max_bindings; ++i) {
            infos[i] = b[std::min<size_t>(i, b.size() - 1)].info;  // unused bindings repeat the last
            writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
            writes[i].dstSet = set;
            writes[i].dstBinding = i;
            writes[i].descriptorCount = 1;
            writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            writes[i].pBufferInfo = &infos[i];
        }
        f.vkUpdateDescriptorSets(ctx_.dev, max_bindings, writes, 0, nullptr);
        f.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, ctx_.pipeline(shader));
        f.vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, ctx_.pipeline_layout, 0, 1, &set, 0,
                                  nullptr);
        f.vkCmdPushConstants(cmd_, ctx_.pipeline_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pc.n * 4, pc.words);
        const uint64_t x = std::min<uint64_t>(groups, 65535), y = (groups + x - 1) / x;
        WEFT_ASSERT(y <= 65535);
        f.vkCmdDispatch(cmd_, uint32_t(x), uint32_t(y), 1);
        barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    }

    void barrier(VkPipelineStageFlags src_stage, VkAccessFlags src, VkPipelineStageFlags dst_stage,
                 VkAccessFlags dst) {
        VkMemoryBarrier mb{};
        mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
        mb.srcAccessMask = src;
        mb.dstAccessMask = dst;
        fn().vkCmdPipelineBarrier(cmd_, src_stage, dst_stage, 0, 1, &mb, 0, nullptr, 0, nullptr);
    }

    static bool computes(const tensor &n) { return !op_is_view(n.op) && n.op != op_kind::none; }

    void ensure_descriptor_pool(size_t sets) {
        const functions &f = fn();
        if (sets > pool_sets_) {
            if (desc_pool_) f.vkDestroyDescriptorPool(ctx_.dev, desc_pool_, nullptr);
            desc_pool_ = VK_NULL_HANDLE;
            pool_sets_ = std::max<size_t>(sets, 2 * pool_sets_);
            VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, uint32_t(pool_sets_ * max_bindings)};
            VkDescriptorPoolCreateInfo info{};
            info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
            info.maxSets = uint32_t(pool_sets_);
            info.poolSizeCount = 1;
            info.pPoolSizes = &size;
            check(f.vkCreateDescriptorPool(ctx_.dev, &info, nullptr, &desc_pool_), "vkCreateDescriptorPool");
        } else {
            check(f.vkResetDescriptorPool(ctx_.dev, desc_pool_, 0), "vkResetDescriptorPool");
        }
    }

    // Records nodes [begin, end) of g and submits them (the previous submission is done).
    void submit_nodes(graph &g, size_t begin, size_t end) {
        size_t n_compute = 0;
        for (size_t i = begin; i < end; ++i) n_compute += computes(*g.nodes[i]);
        if (n_compute == 0) return;
        const functions &f = fn();
        ensure_descriptor_pool(n_compute);
        check(f.vkResetCommandBuffer(cmd_, 0), "vkResetCommandBuffer");
        VkCommandBufferBeginInfo binfo{};
        binfo.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
        binfo.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        check(f.vkBeginCommandBuffer(cmd_, &binfo), "vkBeginCommandBuffer");
        // earlier work on the queue (copies, other backends' graphs) and host writes come first
        barrier(VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT |
                    VK_PIPELINE_STAGE_HOST_BIT,
                VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT,
                VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
        try {
            for (size_t i = begin; i < end; ++i)
                if (computes(*g.nodes[i])) record(*g.nodes[i]);
        } catch (...) {
            f.vkEndCommandBuffer(cmd_);
            throw;
        }
        barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT);
        check(f.vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
        check(f.vkResetFences(ctx_.dev, 1, &q_->fence), "vkResetFences");
        VkSubmitInfo sinfo{};
        sinfo.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
        sinfo.commandBufferCount = 1;
        sinfo.pCommandBuffers = &cmd_;
        const VkResult r = ctx_.submit(sinfo, q_->fence);
        if (r != VK_SUCCESS) {
            q_->status = compute_status::failed;
            return;
        }
        std::lock_guard<std::mutex> lock(q_->mutex);
        ++q_->submitted;
    }

    void record(tensor &node);
    void record_binary(tensor &node, uint32_t op);
    void record_unary(tensor &node, uint32_t op, float param);
    void record_glu(tensor &node);
    void record_norm(tensor &node, uint32_t mode);
    void record_soft_max(tensor &node);
    void record_rope(tensor &node);
    void record_get_rows(tensor &node);
    void record_mul_mat(tensor &node);
    void record_copy(const tensor &src, tensor &dst);
    void record_set_rows(tensor &node);
    void record_attention(tensor &node);

    device_context &ctx_;
    std::shared_ptr<queue_state> q_;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    VkCommandBuffer cmd_ = VK_NULL_HANDLE;
    VkDescriptorPool desc_pool_ = VK_NULL_HANDLE;
    size_t pool_sets_ = 0;
    std::function<bool()> abort_;
};

uint64_t ceil_div(uint64_t a, uint64_t b) {
    return (a + b - 1) / b;
}

// --- support -------------------------------------------------------------------------------------

bool vk_backend::supports_op(const tensor &node) const {
    if (op_is_view(node.op)) return true;
    // every tensor the node reads or writes fits one binding and 32-bit indexing
    auto fits = [&](const tensor *t) {
        return t == nullptr || (t->nbytes() + ctx_.min_offset_alignment <= ctx_.max_range &&
                                t->nelements() < (int64_t(1) << 31));
    };
    if (!fits(&node)) return false;
    for (const tensor *s : node.src)
        if (!fits(s)) return false;
    const tensor *a = node.src[0], *b = node.src[1];
    switch (node.op) {
        case op_kind::add:
        case op_kind::sub:
        case op_kind::mul:
        case op_kind::div:
            return a && b && is_float(a->type) && is_float(b->type) && node.type == dtype::f32 &&
                   same_shape(*a, node) && can_repeat(*b, *a);
        case op_kind::scale:
        case op_kind::silu:
        case op_kind::gelu:
        case op_kind::tanh:
        case op_kind::sigmoid:
        case op_kind::rms_norm:
        case op_kind::norm:
            return a && is_float(a->type) && node.type == dtype::f32 && same_shape(*a, node);
        case op_kind::glu: {
            const int32_t kind = node.param_i32(0);
            return a && b && is_float(a->type) && is_float(b->type) && node.type == dtype::f32 &&
                   same_shape(*a, node) && same_shape(*b, node) &&
                   (kind == int32_t(glu_kind::swiglu) || kind == int32_t(glu_kind::geglu));
        }
        case op_kind::soft_max:
            if (!a || !is_float(a->type) || node.type != dtype::f32 || !same_shape(*a, node)) return false;
            return !b || (is_float(b->type) && rows_contiguous(*b) && b->ne[0] >= a->ne[0] &&
                          a->ne[2] % b->ne[2] == 0 && a->ne[3] % b->ne[3] == 0);
        case op_kind::rope: {
            const tensor *pos = node.src[1], *factors = node.src[2];
            if (!a || !pos || !is_float(a->type) || node.type != dtype::f32 || !same_shape(*a, node))
                return false;
            const rope_params rp = rope_params_of(node);
            if (rp.mode != rope_mode_normal && rp.mode != rope_mode_neox) return false;
            if (rp.n_dims <= 0 || rp.n_dims % 2 != 0 || rp.n_dims > a->ne[0]) return false;
            if (pos->type != dtype::i32 || !rows_contiguous(*pos) || pos->ne[0] < a->ne[2]) return false;
            return !factors || (factors->type == dtype::f32 && factors->is_contiguous() &&
                                factors->ne[0] >= rp.n_dims / 2);
        }
        case op_kind::get_rows: {
            const tensor *ids = b;
            if (!a || !ids || !weight_suffix(a->type) || !rows_contiguous(*a)) return false;
            if (ids->type != dtype::i32 && ids->type != dtype::i64) return false;
            return node.type == dtype::f32 && rows_contiguous(node) && node.ne[0] == a->ne[0] &&
                   node.ne[1] == ids->ne[0] && node.ne[2] == ids->ne[1] && node.ne[3] == ids->ne[2] &&
                   ids->ne[3] == 1 && node.ne[2] % a->ne[2] == 0 && node.ne[3] % a->ne[3] == 0;
        }
        case op_kind::mul_mat:
            return a && b && weight_suffix(a->type) && rows_contiguous(*a) && b->type == dtype::f32 &&
                   rows_contiguous(*b) && node.type == dtype::f32 && rows_contiguous(node) &&
                   b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0;
        case op_kind::cpy:
        case op_kind::cont: {
            const tensor &dst = node.op == op_kind::cpy && b ? *b : node;
            return a && is_float(a->type) && is_float(dst.type) && a->nelements() == dst.nelements();
        }
        case op_kind::set_rows: {
            const tensor *dst = a, *src = b, *ids = node.src[2];
            if (!dst || !src || !ids || (ids->type != dtype::i32 && ids->type != dtype::i64)) return false;
            const bool blocks = dst->type == dtype::q8_0 || dst->type == dtype::q4_0;
            if (blocks && (src->ne[0] % 32 != 0 || !rows_contiguous(*dst))) return false;
            return is_float(src->type) && (is_float(dst->type) || blocks) && src->ne[0] == dst->ne[0] &&
                   ids->ne[0] == src->ne[1] && src->ne[2] == dst->ne[2] && src->ne[3] == dst->ne[3] &&
                   src->ne[2] % ids->ne[1] == 0 && src->ne[3] % ids->ne[2] == 0 && ids->ne[3] == 1 &&
                   ids->nb[0] == type_traits(ids->type).type_size;
        }
        case op_kind::attention: {
            const tensor *q = a, *k = b, *v = node.src[2], *mask = node.src[3];
            // no shader adds attention sinks (gpt-oss): such a node runs on the CPU
            if (node.src[5] != nullptr) return false;
            return q && k && v && mask && node.type == dtype::f32 && node.is_contiguous() &&
                   q->type == dtype::f32 && rows_contiguous(*q) && is_kv_type(k->type) &&
                   is_kv_type(v->type) && rows_contiguous(*k) && rows_contiguous(*v) &&
                   mask->type == dtype::f32 && rows_contiguous(*mask) && k->ne[0] <= 256 && v->ne[0] <= 256 &&
                   k->ne[2] > 0 && q->ne[2] % k->ne[2] == 0;
        }
        default:
            return false;
    }
}

// --- recording -----------------------------------------------------------------------------------

void vk_backend::record(tensor &node) {
    switch (node.op) {
        case op_kind::add:
            return record_binary(node, 0);
        case op_kind::sub:
            return record_binary(node, 1);
        case op_kind::mul:
            return record_binary(node, 2);
        case op_kind::div:
            return record_binary(node, 3);
        case op_kind::scale:
            return record_unary(node, 0, node.param_f32(0));
        case op_kind::silu:
            return record_unary(node, 1, 0.0f);
        case op_kind::gelu:
            return record_unary(node, 2, 0.0f);
        case op_kind::tanh:
            return record_unary(node, 3, 0.0f);
        case op_kind::sigmoid:
            return record_unary(node, 4, 0.0f);
        case op_kind::glu:
            return record_glu(node);
        case op_kind::rms_norm:
            return record_norm(node, 0);
        case op_kind::norm:
            return record_norm(node, 1);
        case op_kind::soft_max:
            return record_soft_max(node);
        case op_kind::rope:
            return record_rope(node);
        case op_kind::get_rows:
            return record_get_rows(node);
        case op_kind::mul_mat:
            return record_mul_mat(node);
        case op_kind::cpy:
            return record_copy(*node.src[0], node.src[1] ? *node.src[1] : node);
        case op_kind::cont:
            return record_copy(*node.src[0], node);
        case op_kind::set_rows:
            return record_set_rows(node);
        case op_kind::attention:
            return record_attention(node);
        default:
            throw error("[vulkan] " + ctx_.name + " cannot compute node '" + std::string(node.name) + "' (" +
                        op_name(node.op) + ")");
    }
}

void vk_backend::record_binary(tensor &node, uint32_t op) {
    const tensor &a = *node.src[0], &b = *node.src[1];
    dispatch("binary", {&a, &b, &node}, ceil_div(uint64_t(node.nelements()), 256),
             [&](push_constants &pc, const std::vector<bound> &o) {
                 pc.ne(node).nb(a).ne(b).nb(b).nb(node);
                 pc.u(o[0].rem).u(o[1].rem).u(o[2].rem).u(op).u(float_code(a.type)).u(float_code(b.type));
             });
}

void vk_backend::record_unary(tensor &node, uint32_t op, float param) {
    const tensor &a = *node.src[0];
    dispatch("unary", {&a, &node}, ceil_div(uint64_t(node.nelements()), 256),
             [&](push_constants &pc, const std::vector<bound> &o) {
                 pc.ne(node).nb(a).nb(node).u(o[0].rem).u(o[1].rem).u(op).u(float_code(a.type)).f(param);
             });
}

void vk_backend::record_glu(tensor &node) {
    const tensor &g = *node.src[0], &up = *node.src[1];
    dispatch("glu", {&g, &up, &node}, ceil_div(uint64_t(node.nelements()), 256),
             [&](push_constants &pc, const std::vector<bound> &o) {
                 pc.ne(node).nb(g).nb(up).nb(node).u(o[0].rem).u(o[1].rem).u(o[2].rem);
                 pc.u(uint32_t(node.param_i32(0))).u(float_code(g.type)).u(float_code(up.type));
             });
}

void vk_backend::record_norm(tensor &node, uint32_t mode) {
    const tensor &a = *node.src[0];
    dispatch("norm", {&a, &node}, uint64_t(node.nrows()),
             [&](push_constants &pc, const std::vector<bound> &o) {
                 pc.ne(node)
                     .nb(a)
                     .nb(node)
                     .u(o[0].rem)
                     .u(o[1].rem)
                     .u(mode)
                     .u(float_code(a.type))
                     .f(node.param_f32(0));
             });
}

void vk_backend::record_soft_max(tensor &node) {
    const tensor &a = *node.src[0];
    const tensor *mask = node.src[1];
    dispatch("soft_max", {&a, mask ? mask : &a, &node}, uint64_t(node.nrows()),
             [&](push_constants &pc, const std::vector<bound> &o) {
                 pc.ne(node).nb(a).nb(node);
                 if (mask)
                     pc.u(u32(mask->ne[1])).u(u32(mask->ne[2])).u(u32(mask->ne[3])).nb(*mask, 1);
                 else
                     pc.u(1).u(1).u(1).u(0).u(0).u(0);
                 pc.u(o[0].rem).u(o[1].rem).u(o[2].rem).u(float_code(a.type));
                 pc.u(mask ? float_code(mask->type) : 2u).f(node.param_f32(0));
             });
}

void vk_backend::record_rope(tensor &node) {
    const tensor &a = *node.src[0], &pos = *node.src[1];
    const tensor *factors = node.src[2];
    const rope_params rp = rope_params_of(node);
    // the YaRN ramp's range and the magnitude scale, as the CPU computes them (ops_rope.cpp)
    auto corr_dim = [&](float n_rot) {
        return float(rp.n_dims) *
               std::log(float(rp.n_ctx_orig) / (n_rot * 2.0f * std::numbers::pi_v<float>)) /
               (2.0f * std::log(rp.freq_base));
    };
    const float corr0 = std::max(0.0f, std::floor(corr_dim(rp.beta_fast)));
    const float corr1 = std::min(float(rp.n_dims - 1), std::ceil(corr_dim(rp.beta_slow)));
    float mscale = rp.attn_factor;
    if (rp.ext_factor != 0.0f) mscale *= std::fma(0.1f, std::log(1.0f / rp.freq_scale), 1.0f);
    const float theta_scale = std::pow(rp.freq_base, -2.0f / float(rp.n_dims));
    const uint64_t per_row = uint64_t(node.ne[0] - rp.n_dims / 2);
    dispatch("rope", {&a, &pos, factors ? factors : &pos, &node},
             ceil_div(per_row * uint64_t(node.nrows()), 256),
             [&](push_constants &pc, const std::vector<bound> &o) {
                 pc.ne(node).nb(a).nb(node).u(o[0].rem).u(o[1].rem).u(o[2].rem).u(o[3].rem);
                 pc.u(float_code(a.type)).u(uint32_t(rp.n_dims)).u(rp.mode == rope_mode_neox ? 1 : 0);
                 pc.u(factors ? 1 : 0)
                     .f(rp.freq_scale)
                     .f(rp.ext_factor)
                     .f(mscale)
                     .f(corr0)
                     .f(corr1)
                     .f(theta_scale);
             });
}

void vk_backend::record_get_rows(tensor &node) {
    const tensor &a = *node.src[0], &ids = *node.src[1];
    const uint64_t units = ceil_div(uint64_t(node.ne[0]), 32);
    dispatch(std::string("get_rows_") + weight_suffix(a.type), {&a, &ids, &node},
             ceil_div(units * uint64_t(node.nrows()), 64),
             [&](push_constants &pc, const std::vector<bound> &o) {
                 pc.ne(node).u(u32(a.ne[1])).u(u32(a.ne[2])).u(u32(a.ne[3])).nb(a, 1);
                 pc.u(u32(ids.nb[0])).u(u32(ids.nb[1])).u(u32(ids.nb[2]));
                 pc.u(u32(node.nb[1] / 4)).u(u32(node.nb[2] / 4)).u(u32(node.nb[3] / 4));
                 pc.u(o[0].rem).u(o[1].rem).u(o[2].rem / 4).u(ids.type == dtype::i64 ? 1 : 0);
             });
}

void vk_backend::record_mul_mat(tensor &node) {
    const tensor &a = *node.src[0], &b = *node.src[1];
    const mul_mat_path forced = forced_mul_mat_path.load();
    const bool tiled =
        ctx_.max_shared >= mul_mm_shared_bytes &&
        (forced == mul_mat_path::automatic ? b.ne[1] >= mul_mm_min_cols : forced == mul_mat_path::tiled);
    const bool subgroups = ctx_.subgroup_arithmetic && !disable_subgroups.load();
    const uint64_t batches = uint64_t(b.ne[2] * b.ne[3]);
    const std::string shader = std::string(tiled       ? "mul_mm_"
                                           : subgroups ? "mul_mat_sg_"
                                                       : "mul_mat_") +
                               weight_suffix(a.type);
    // mul_mm: a workgroup per tile of 64 x 64 values of d; mul_mat: per row of a and 8 columns of b
    const uint64_t groups =
        tiled ? ceil_div(uint64_t(a.ne[1]), mul_mm_tile_m) * ceil_div(uint64_t(b.ne[1]), mul_mm_tile_n)
              : uint64_t(a.ne[1]) * ceil_div(uint64_t(b.ne[1]), 8);
    dispatch(shader, {&a, &b, &node}, groups * batches, [&](push_constants &pc, const std::vector<bound> &o) {
        pc.u(u32(a.ne[0])).u(u32(a.ne[1])).u(u32(b.ne[1])).u(u32(b.ne[2])).u(u32(b.ne[3]));
        pc.u(u32(b.ne[2] / a.ne[2])).u(u32(b.ne[3] / a.ne[3])).nb(a, 1);
        pc.u(u32(b.nb[1] / 4)).u(u32(b.nb[2] / 4)).u(u32(b.nb[3] / 4));
        pc.u(u32(node.nb[1] / 4)).u(u32(node.nb[2] / 4)).u(u32(node.nb[3] / 4));
        pc.u(o[0].rem).u(o[1].rem / 4).u(o[2].rem / 4);
    });
}

void vk_backend::record_copy(const tensor &src, tensor &dst) {
    dispatch("cpy", {&src, &dst}, ceil_div(uint64_t(src.nelements()), 256),
             [&](push_constants &pc, const std::vector<bound> &o) {
                 pc.ne(src).nb(src).ne(dst).nb(dst).u(o[0].rem).u(o[1].rem);
                 pc.u(float_code(src.type)).u(float_code(dst.type));
             });
}

void vk_backend::record_set_rows(tensor &node) {
    tensor &dst = *node.src[0];
    const tensor &src = *node.src[1], &ids = *node.src[2];
    // a quantized destination: an invocation per block of 32 values, 64 a workgroup
    const bool blocks = !is_float(dst.type);
    const std::string shader = blocks ? std::string("set_rows_quant_") + weight_suffix(dst.type) : "set_rows";
    dispatch(shader, {&src, &ids, &dst}, ceil_div(uint64_t(src.nelements()), blocks ? 32 * 64 : 256),
             [&](push_constants &pc, const std::vector<bound> &o) {
                 pc.ne(src).nb(src).u(u32(ids.ne[1])).u(u32(ids.ne[2]));
                 pc.u(u32(ids.nb[0])).u(u32(ids.nb[1])).u(u32(ids.nb[2])).nb(dst).u(u32(dst.ne[1]));
                 pc.u(o[0].rem).u(o[1].rem).u(o[2].rem).u(float_code(src.type)).u(float_code(dst.type));
                 pc.u(ids.type == dtype::i64 ? 1 : 0);
             });
}

void vk_backend::record_attention(tensor &node) {
    const tensor &q = *node.src[0], &k = *node.src[1], &v = *node.src[2], &mask = *node.src[3];
    dispatch("attention", {&q, &k, &v, &mask, &node}, uint64_t(q.ne[1] * q.ne[2]),
             [&](push_constants &pc, const std::vector<bound> &o) {
                 pc.u(u32(k.ne[0])).u(u32(v.ne[0])).u(u32(k.ne[1])).u(u32(q.ne[1])).u(u32(q.ne[2]));
                 pc.u(u32(q.ne[2] / k.ne[2])).u(u32(q.nb[1])).u(u32(q.nb[2])).u(u32(k.nb[1])).u(u32(k.nb[2]));
                 pc.u(u32(v.nb[1])).u(u32(v.nb[2])).u(u32(mask.nb[1]));
                 pc.u(o[0].rem).u(o[1].rem).u(o[2].rem).u(o[3].rem).u(o[4].rem / 4);
                 pc.u(kv_code(k.type)).u(kv_code(v.type)).f(node.param_f32(0)).f(node.param_f32(1));
             });
}

}  // namespace

void set_disable_subgroups(bool on) {
    disable_subgroups.store(on);
}

void set_mul_mat_path(mul_mat_path path) {
    forced_mul_mat_path.store(path);
}

std::unique_ptr<backend> make_vulkan_backend(device_context &ctx) {
    return std::make_unique<vk_backend>(ctx);
}

}  // namespace weft::vk
