// src/backends/cpu/partition_report.cpp — each thread's share of a node, from the partition functions
// the kernels call (partition.h, the products' own in ops_mul_mat.cpp), for the partition report.
#include "backends/cpu/kernels.h"
#include "backends/cpu/ssm_conv.h"
#include "weft/core/ops.h"

namespace weft::cpu {

namespace {

// Rows of t split by split_range (thread_rows), ne[0] values each.
void rows_work(const tensor &t, int nth, std::span<double> work) {
    for (int ith = 0; ith < nth; ++ith)
        work[size_t(ith)] = double(split_range(t.nrows(), ith, nth).size()) * double(t.ne[0]);
}

// n equal units (channels, heads) split by split_range.
void units_work(int64_t n, int nth, std::span<double> work) {
    for (int ith = 0; ith < nth; ++ith) work[size_t(ith)] = double(split_range(n, ith, nth).size());
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
        // the recurrent ops: whole channels or heads per thread (a head's state is one thread's; the
        // delta net's heads also in pieces of their value columns, partition.h)
        case op_kind::ssm_conv:  // blocks of ssm_conv_lanes channels of x
            for (int ith = 0; ith < nth; ++ith) {
                const int64_t n_ch = node.src[0]->ne[0];
                const index_range blocks =
                    split_range((n_ch + ssm_conv_lanes - 1) / ssm_conv_lanes, ith, nth);
                work[size_t(ith)] = double(std::min(n_ch, blocks.end * ssm_conv_lanes) -
                                           std::min(n_ch, blocks.begin * ssm_conv_lanes));
            }
            return true;
        case op_kind::ssm_scan:  // channels of x
            units_work(node.src[0]->ne[0], nth, work);
            return true;
        case op_kind::ssm_scan_mamba2:  // heads (of dt)
            units_work(node.src[1]->ne[0], nth, work);
            return true;
        case op_kind::gated_delta_net: {  // value columns and pieces of heads (of g), as the kernel plans
                                          // them
            const int64_t n_head = node.src[3]->ne[0], d_v = node.src[2]->ne[0] / n_head;
            const delta_net_plan plan = plan_delta_net(n_head, d_v, nth);
            for (int ith = 0; ith < nth; ++ith)
                work[size_t(ith)] = double(delta_net_thread_work(plan, n_head, d_v, ith, nth));
            return true;
        }
        default:
            // attention (its tasks are being reworked), mul_mat_id (its experts depend on the
            // router's choice), add_id
            return false;
    }
}

}  // namespace weft::cpu
