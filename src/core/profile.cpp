// src/core/profile.cpp — node cost estimates and the per-op profile table.
#include "weft/core/profile.h"

#include <algorithm>
#include <cstdio>

#include "weft/core/ops.h"

namespace weft {

node_cost estimate_node_cost(const tensor &node) {
    node_cost c;
    for (const tensor *s : node.src)
        if (s) c.bytes_read += double(s->nbytes());
    c.bytes_written = double(node.nbytes());
    switch (node.op) {
        case op_kind::mul_mat:
            // dst [m, n, B2, B3] = each of m rows of k elements against each of n * B2 * B3 columns
            c.flops = 2.0 * double(node.src[0]->ne[0]) * double(node.nelements());
            break;
        case op_kind::mul_mat_id: {
            // dst [m, n_used, n_tokens]: one product of k per element; of the experts, at most the
            // n_used * n_tokens picked ones are read
            const tensor &experts = *node.src[0];
            c.flops = 2.0 * double(experts.ne[0]) * double(node.nelements());
            const double picked = std::min(double(experts.ne[2]), double(node.ne[1] * node.ne[2]));
            c.bytes_read += (picked / double(experts.ne[2]) - 1.0) * double(experts.nbytes());
            break;
        }
        case op_kind::set_rows:
            // writes src1's rows into src0 (in place): src0 is not read, only src1's rows are written
            c.bytes_read = double(node.src[1]->nbytes()) + double(node.src[2]->nbytes());
            c.bytes_written = double(node.src[1]->nelements()) * double(type_traits(node.type).type_size) /
                              double(type_traits(node.type).block_size);
            c.flops = 0;
            break;
        case op_kind::get_rows:
            // reads only the selected rows
            c.bytes_read =
                double(node.src[1]->nelements()) * double(node.src[0]->nb[1]) + double(node.src[1]->nbytes());
            break;
        case op_kind::attention:
            // every query head against every cell (an upper bound: hidden cells are skipped)
            c.flops = 2.0 * double(node.src[0]->ne[1]) * double(node.src[0]->ne[2]) *
                      double(node.src[1]->ne[1]) * double(node.src[1]->ne[0] + node.src[2]->ne[0]);
            break;
        case op_kind::soft_max:
        case op_kind::rms_norm:
        case op_kind::norm:
        case op_kind::rope:
        case op_kind::silu:
        case op_kind::gelu:
        case op_kind::tanh:
        case op_kind::sigmoid:
        case op_kind::softplus:
        case op_kind::glu:
            c.flops = 5.0 * double(node.nelements());
            break;
        case op_kind::add:
        case op_kind::sub:
        case op_kind::mul:
        case op_kind::div:
        case op_kind::scale:
            c.flops = double(node.nelements());
            break;
        default:
            break;
    }
    return c;
}

std::string profile_type_of(const tensor &node) {
    if ((node.op == op_kind::mul_mat || node.op == op_kind::mul_mat_id || node.op == op_kind::get_rows) &&
        node.src[0])
        return type_name(node.src[0]->type);
    return "-";
}

void op_profile::add(const tensor &node, double ns, double busy_ns, int n_threads) {
    const node_cost c = estimate_node_cost(node);
    row &r = rows_[{op_name(node.op), profile_type_of(node)}];
    if (r.calls == 0) {
        r.op = op_name(node.op);
        r.type = profile_type_of(node);
    }
    ++r.calls;
    r.ns += ns;
    r.thread_ns += double(n_threads) * ns;
    r.busy_ns += busy_ns < 0 ? double(n_threads) * ns : busy_ns;
    r.bytes_read += c.bytes_read;
    r.bytes_written += c.bytes_written;
    r.flops += c.flops;
}

void op_profile::reset() {
    rows_.clear();
    graphs_ = 0;
}

double op_profile::total_ns() const {
    double t = 0;
    for (const auto &[key, r] : rows_) t += r.ns;
    return t;
}

namespace {
double waiting_share(double busy_ns, double thread_ns) {
    return thread_ns > 0 ? std::clamp(1.0 - busy_ns / thread_ns, 0.0, 1.0) : 0.0;
}
}  // namespace

double op_profile::row::serial_fraction() const {
    return waiting_share(busy_ns, thread_ns);
}

double op_profile::serial_fraction() const {
    double busy = 0, threads = 0;
    for (const auto &[key, r] : rows_) {
        busy += r.busy_ns;
        threads += r.thread_ns;
    }
    return waiting_share(busy, threads);
}

std::vector<op_profile::row> op_profile::rows() const {
    std::vector<row> v;
    for (const auto &[key, r] : rows_) v.push_back(r);
    std::sort(v.begin(), v.end(), [](const row &a, const row &b) { return a.ns > b.ns; });
    return v;
}

std::string op_profile::format(const std::string &title) const {
    const double total = total_ns();
    const double steps = double(std::max<int64_t>(graphs_, 1));
    std::string out;
    char line[256];
    std::snprintf(line, sizeof line,
                  "%s: %lld graphs, %.2f ms per graph; threads waiting at barriers %.1f%% of their time\n",
                  title.c_str(), static_cast<long long>(graphs_), total / steps / 1e6,
                  100.0 * serial_fraction());
    out += line;
    out +=
        "| op | type | calls | total ms | ms/graph | share | serial | MB read | MB written | GB/s | GFLOP/s "
        "|\n";
    out += "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const row &r : rows()) {
        const double s = r.ns / 1e9;
        std::snprintf(line, sizeof line,
                      "| %s | %s | %lld | %.2f | %.3f | %.1f%% | %.1f%% | %.1f | %.1f | %.2f | %.2f |\n",
                      r.op.c_str(), r.type.c_str(), static_cast<long long>(r.calls), r.ns / 1e6,
                      r.ns / steps / 1e6, total > 0 ? 100.0 * r.ns / total : 0.0, 100.0 * r.serial_fraction(),
                      r.bytes_read / 1e6, r.bytes_written / 1e6,
                      s > 0 ? (r.bytes_read + r.bytes_written) / s / 1e9 : 0.0,
                      s > 0 ? r.flops / s / 1e9 : 0.0);
        out += line;
    }
    return out;
}

}  // namespace weft
