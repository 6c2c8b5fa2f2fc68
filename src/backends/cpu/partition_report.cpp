// src/backends/cpu/partition_report.cpp — each thread's share of a node, from the partition functions
// the kernels call (partition.h, the products' own in ops_mul_mat.cpp), for the partition report.
#include "backends/cpu/kernels.h"
#include "weft/core/ops.h"

namespace weft::cpu {

namespace {

// Rows of t split by split_range (thread_rows), ne[0] values each.
void rows_work(const tensor &t, int nth, std::span<double> work) {
    for (int ith = 0; ith < nth; ++ith)
        work[size_t(ith)] = double(split_range(t.nrows(), ith, nth).size()) * double(t.ne[0]);
}

}  // namespace

bool node_thread_work(const tensor &node, int nth, std::span<double> work) {
    switch (node.op) {
        case op_kind::mul_mat: {
            tensor *const one[] = {const_cast<tensor *>(&node)};
            mul_mat_thread_work(one, 1, nth, work);
            return true;
        }
        case op_kind::glu:
            // compute_glu: fewer rows than threads (f32 rows) share each row's values out
            if (node.nrows() < nth && node.type == dtype::f32) {
                for (int ith = 0; ith < nth; ++ith)
                    work[size_t(ith)] =
                        double(split_row_values(node.ne[0], ith, nth).size()) * double(node.nrows());
                return true;
            }
            rows_work(node, nth, work);
            return true;
        // the source's rows: copies, stores into a cache, top-k of each row
        case op_kind::cpy:
        case op_kind::cont:
        case op_kind::set_rows:
        case op_kind::top_k:
        case op_kind::argmax:
        case op_kind::sum_rows:
        case op_kind::mean:
            rows_work(*node.src[0], nth, work);
            return true;
        // the result's rows (rows.h, thread_rows of dst)
        case op_kind::get_rows:
        case op_kind::add:
        case op_kind::sub:
        case op_kind::mul:
        case op_kind::div:
        case op_kind::scale:
        case op_kind::rms_norm:
        case op_kind::norm:
        case op_kind::l2_norm:
        case op_kind::rope:
        case op_kind::soft_max:
        case op_kind::silu:
        case op_kind::gelu:
        case op_kind::tanh:
        case op_kind::sigmoid:
        case op_kind::softplus:
        case op_kind::concat:
            rows_work(node, nth, work);
            return true;
        default:
            // attention (its tasks are being reworked), mul_mat_id (its experts depend on the
            // router's choice), add_id, ssm_conv, ssm_scan, ssm_scan_mamba2, gated_delta_net
            return false;
    }
}

}  // namespace weft::cpu
