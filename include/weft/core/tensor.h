// weft/core/tensor.h — the tensor: shape and strides, the op that makes it, its sources and data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "weft/core/type.h"

namespace weft {

constexpr int max_dims = 4;
constexpr int max_src = 10;
constexpr int max_op_params = 16;  // int32 words
constexpr int max_name = 64;

// The closed op set. Tables indexed by op (names, in-place capability, CPU kernels) are sized by
// op_kind::count and static_assert on it, so adding an op without its entries does not compile.
enum class op_kind : int32_t {
    none = 0,  // a leaf: input, weight or constant
    get_rows,  // src0 [n_embd, n_rows, A2, A3] any type, src1 i32 [n, B2, B3] -> f32 [n_embd, n, B2, B3]
    add,       // src0 + src1, src1 broadcast (src1.ne[i] divides src0.ne[i])
    sub,
    mul,
    div,
    scale,     // src0 * p.f[0]
    rms_norm,  // over ne[0]; p.f[0] = eps
    norm,      // mean/variance over ne[0]; p.f[0] = eps
    mul_mat,   // src0 [k, m, A2, A3] (any type), src1 [k, n, B2, B3] f32 -> f32 [m, n, B2, B3]
    rope,      // src0 [head_dim, n_head, n_tokens, 1], src1 i32 [n_tokens], src2 optional f32 freq factors
    soft_max,  // softmax over ne[0] of (src0 * scale + src1 mask (optional, f32 or f16, broadcast over rows))
    silu,
    gelu,  // tanh approximation
    tanh,
    glu,        // p.i[0] = glu_kind; src0 gate, src1 up (same shape): act(gate) * up
    cpy,        // copy src0 into src1 (a view), converting type; result is a view of src1
    cont,       // contiguous copy of src0 (same type)
    set_rows,   // write rows of src1 into src0 (in place) at row indices src2 (i32 or i64); result views src0
    concat,     // src0, src1 joined along p.i[0]
    argmax,     // src0 f32 [n, rows] -> i32 [rows]
    sum_rows,   // src0 [n, ...] -> [1, ...]
    mean,       // src0 [n, ...] -> [1, ...]
    attention,  // softmax(q k^T * scale + mask) v per head, fused; see ops.h
    // mixture of experts
    mul_mat_id,  // src0 experts [k, m, n_expert], src1 f32 [k, 1 or n_used, n_tokens], src2 ids i32 [n_used,
                 // n_tokens]
    top_k,  // src0 f32 [n, rows...] -> i32 [k, rows...]: indices of the k largest, descending; p.i[0] = k
    sigmoid,
    // recurrent (state-space) sequence ops, see ops.h
    ssm_conv,  // src0 x [n_ch, n_tokens], src1 states [d_conv - 1, n_ch, n_seqs], src2 weight [d_conv, n_ch],
               // src3 i32 token -> sequence [n_tokens] -> f32 1-d: y [n_ch, n_tokens], then the new states
    ssm_scan,  // src0 x, src1 dt [n_ch, n_tokens], src2 A [d_state, n_ch], src3 B, src4 C [d_state, n_tok],
               // src5 states [d_state, n_ch, n_seqs], src6 i32 token -> sequence -> f32 1-d: y, new states
    ssm_scan_mamba2,  // Mamba-2's scan over heads and groups; see ops.h
    add_id,           // src0 a [m, n_used, n_tokens] + src1 bias [m, n_expert] column src2 ids[i, t]
    l2_norm,          // x / max(||x||, eps) over ne[0]; p.f[0] = eps
    gated_delta_net,  // Qwen3-Next / Qwen3.5 linear attention (recurrent, chunked for prompts); see ops.h
    softplus,         // ln(1 + e^x) (x itself above 20): the delta net's step sizes (qwen3next, qwen35)
    view,             // no data of its own: view_src + view_offs
    reshape,
    permute,
    transpose,
    count,
};

// swiglu_oai: gpt-oss's clamped variant, p.f[1] = alpha, p.f[2] = limit (see ops.h)
enum class glu_kind : int32_t { swiglu = 0, geglu = 1, swiglu_oai = 2 };

// rope modes, as in the established format
constexpr int32_t rope_mode_normal = 0;  // rotate pairs (x[2i], x[2i+1])
constexpr int32_t rope_mode_neox = 2;    // rotate pairs (x[i], x[i + n_dims/2])

enum tensor_flag : uint32_t {
    tensor_flag_input = 1,   // set by the caller each step; the planner gives it its own memory
    tensor_flag_output = 2,  // kept after the graph runs; the planner never reuses its memory
    tensor_flag_param = 4,   // a weight
};

class backend_buffer;

struct tensor {
    dtype type = dtype::f32;
    backend_buffer *buffer = nullptr;  // where `data` lives (null for metadata-only tensors)

    int64_t ne[max_dims] = {1, 1, 1, 1};  // elements per dim; ne[0] is innermost (contiguous)
    size_t nb[max_dims] = {0, 0, 0, 0};   // byte strides: nb[0] = type size, nb[1] = row size ...

    op_kind op = op_kind::none;
    int32_t op_params[max_op_params] = {};
    uint32_t flags = 0;

    tensor *src[max_src] = {};

    tensor *view_src = nullptr;  // for views: the tensor whose memory this one shares
    size_t view_offs = 0;        // byte offset into view_src's data

    void *data = nullptr;  // null until allocated (op results: until the planner places them)
    char name[max_name] = {};

    void *extra = nullptr;  // backend-private

    // --- shape helpers -------------------------------------------------------------------------
    int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
    int n_dims() const;     // 1..4: index of the last dim > 1, plus one
    size_t nbytes() const;  // bytes spanned by the data (views: as laid out by their strides)
    size_t element_size() const { return type_traits(type).type_size; }
    bool is_contiguous() const;
    bool is_transposed() const { return nb[0] > nb[1]; }
    bool is_view() const { return view_src != nullptr; }

    // --- op parameters -------------------------------------------------------------------------
    int32_t param_i32(int i) const { return op_params[i]; }
    float param_f32(int i) const {
        float f;
        std::memcpy(&f, &op_params[i], sizeof f);
        return f;
    }
    void set_param_i32(int i, int32_t v) { op_params[i] = v; }
    void set_param_f32(int i, float v) { std::memcpy(&op_params[i], &v, sizeof v); }

    // --- naming --------------------------------------------------------------------------------
    tensor *set_name(const std::string &n);
    tensor *format_name(const char *fmt, ...) __attribute__((format(printf, 2, 3)));

    // "[5, 7, 11, 13]" — the form error messages use
    std::string shape_str() const;
};

bool same_shape(const tensor &a, const tensor &b);
// b can be broadcast to a: every b.ne[i] divides a.ne[i]
bool can_repeat(const tensor &b, const tensor &a);

// Reads element (i0, i1, i2, i3) of an f32/f16/bf16/i32 tensor whose data is in host memory;
// throws weft::error "tensor 'x' has not been computed" when data is null. For tests and tools.
float tensor_get_f32(const tensor &t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0);
void tensor_set_f32(tensor &t, float v, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0);

}  // namespace weft
