// weft/core/profile.h — a per-op profile of graph execution: calls, time, bytes and FLOPs per op
// type and weight type. A backend fills it while computing (see cpu_backend::set_profile); tools
// print it (`weft bench --profile`, WEFT_PROFILE=1).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/tensor.h"

namespace weft {

// What one node costs at least: the bytes its sources hold (read), the bytes it writes and its
// arithmetic (a multiply-add counts two).
struct node_cost {
    double bytes_read = 0;
    double bytes_written = 0;
    double flops = 0;
};
node_cost estimate_node_cost(const tensor &node);

// The weight type a node is filed under: the type of its first source for the ops whose first
// source is the stored operand (mul_mat, get_rows), "-" otherwise.
std::string profile_type_of(const tensor &node);

class op_profile {
  public:
    struct row {
        std::string op;
        std::string type;
        int64_t calls = 0;
        double ns = 0;
        double bytes_read = 0;
        double bytes_written = 0;
        double flops = 0;
        // The threads' time at the op: busy_ns of n_threads * ns (thread_ns) was spent computing,
        // the rest waiting at its barrier for the others (or skipping a node one thread computes).
        double busy_ns = 0;
        double thread_ns = 0;
        // The share of the threads' time at the op spent waiting: 0 when all work to its end, 1 - 1/n
        // when one of n threads works alone.
        // (Clamped to [0, 1]: a thread may start a node a little before thread 0, whose wall it is.)
        double serial_fraction() const;
    };

    // One computed node and the wall time it took (all threads, barrier included); busy_ns: the sum
    // of the time each of n_threads threads spent computing it (a negative busy_ns: not measured,
    // taken as n_threads * ns).
    void add(const tensor &node, double ns, double busy_ns = -1, int n_threads = 1);
    // One graph run (the "step" that shares are taken of).
    void add_graph() { ++graphs_; }
    void reset();

    int64_t graphs() const { return graphs_; }
    double total_ns() const;
    // The share of all threads' time spent waiting at barriers (serial_fraction over every op).
    double serial_fraction() const;
    // Rows by decreasing time.
    std::vector<row> rows() const;
    // The table: op, type, calls, total ms, ms per step, share, serial fraction, bytes read/written,
    // GB/s, GFLOP/s.
    std::string format(const std::string &title) const;

  private:
    std::map<std::pair<std::string, std::string>, row> rows_;
    int64_t graphs_ = 0;
};

}  // namespace weft
