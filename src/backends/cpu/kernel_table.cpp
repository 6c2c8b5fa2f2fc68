// src/backends/cpu/kernel_table.cpp — the CPU kernel of every op, in one table sized by op_kind::count.
#include <array>

#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "weft/core/error.h"

namespace weft::cpu {

void compute_params::barrier() const {
    if (pool) pool->barrier(ith);
}

namespace {

static_assert(size_t(op_kind::count) == 38, "op set changed: give the new op a CPU kernel below");

constexpr bool alone = true;  // op_kernel::may_run_alone

// A switch without a default: an op_kind left out is a -Wswitch error under -Werror.
constexpr op_kernel kernel_entry(op_kind op) {
    switch (op) {
        case op_kind::none:
            return {};
        case op_kind::get_rows:
            return {compute_get_rows, supports_get_rows, work_size_get_rows, alone};
        case op_kind::add:
            return {compute_add, supports_binary, work_size_row_scratch, alone};
        case op_kind::sub:
            return {compute_sub, supports_binary, work_size_row_scratch, alone};
        case op_kind::mul:
            return {compute_mul, supports_binary, work_size_row_scratch, alone};
        case op_kind::div:
            return {compute_div, supports_binary, work_size_row_scratch, alone};
        case op_kind::scale:
            return {compute_scale, supports_unary, work_size_row_scratch, alone};
        case op_kind::rms_norm:
            return {compute_rms_norm, supports_unary, work_size_row_scratch, alone};
        case op_kind::norm:
            return {compute_norm, supports_unary, work_size_row_scratch, alone};
        case op_kind::mul_mat:
            return {compute_mul_mat, supports_mul_mat, work_size_mul_mat};
        case op_kind::rope:
            return {compute_rope, supports_rope, work_size_rope, alone};
        case op_kind::soft_max:
            return {compute_soft_max, supports_soft_max, work_size_row_scratch};
        case op_kind::silu:
            return {compute_silu, supports_unary, work_size_row_scratch, alone};
        case op_kind::gelu:
            return {compute_gelu, supports_unary, work_size_row_scratch, alone};
        case op_kind::tanh:
            return {compute_tanh, supports_unary, work_size_row_scratch, alone};
        case op_kind::glu:
            return {compute_glu, supports_glu, work_size_row_scratch, alone};
        case op_kind::cpy:
            return {compute_cpy, supports_cpy, work_size_cpy, alone};
        case op_kind::cont:
            return {compute_cont, supports_cont, work_size_cpy, alone};
        case op_kind::set_rows:
            return {compute_set_rows, supports_set_rows, work_size_set_rows, alone};
        case op_kind::concat:
            return {compute_concat, supports_concat, nullptr};
        case op_kind::argmax:
            return {compute_argmax, supports_argmax, nullptr};
        case op_kind::sum_rows:
            return {compute_sum_rows, supports_sum_rows, nullptr};
        case op_kind::mean:
            return {compute_mean, supports_sum_rows, nullptr};
        case op_kind::attention:
            return {compute_attention, supports_attention, work_size_attention};
        case op_kind::mul_mat_id:
            return {compute_mul_mat_id, supports_mul_mat_id, work_size_mul_mat_id};
        case op_kind::top_k:
            return {compute_top_k, supports_top_k, work_size_top_k};
        case op_kind::sigmoid:
            return {compute_sigmoid, supports_unary, work_size_row_scratch, alone};
        case op_kind::softplus:
            return {compute_softplus, supports_unary, work_size_row_scratch, alone};
        case op_kind::ssm_conv:
            return {compute_ssm_conv, supports_ssm_conv, work_size_ssm_conv};
        case op_kind::ssm_scan:
            return {compute_ssm_scan, supports_ssm_scan, work_size_ssm_scan};
        case op_kind::ssm_scan_mamba2:
            return {compute_ssm_scan_mamba2, supports_ssm_scan_mamba2, work_size_ssm_scan_mamba2};
        case op_kind::add_id:
            return {compute_add_id, supports_add_id, nullptr, alone};
        case op_kind::l2_norm:
            return {compute_l2_norm, supports_unary, work_size_row_scratch, alone};
        case op_kind::gated_delta_net:
            return {compute_gated_delta_net, supports_gated_delta_net, work_size_gated_delta_net};
        // views share their source's memory: nothing to compute
        case op_kind::view:
        case op_kind::reshape:
        case op_kind::permute:
        case op_kind::transpose:
            return {};
        case op_kind::count:
            break;
    }
    return {};
}

constexpr auto kernel_table = [] {
    std::array<op_kernel, size_t(op_kind::count)> table{};
    for (size_t i = 0; i < table.size(); ++i) table[i] = kernel_entry(op_kind(i));
    return table;
}();

}  // namespace

const op_kernel &kernel_of(op_kind op) {
    const auto i = size_t(op);
    WEFT_ASSERT(i < kernel_table.size());
    return kernel_table[i];
}

}  // namespace weft::cpu
