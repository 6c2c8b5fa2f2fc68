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
    };

    // One computed node and the wall time it took (all threads, barrier included).
    void add(const tensor &node, double ns);
    // One graph run (the "step" that shares are taken of).
    void add_graph() { ++graphs_; }
    void reset();

    int64_t graphs() const { return graphs_; }
    double total_ns() const;
    // Rows by decreasing time.
    std::vector<row> rows() const;
    // The table: op, type, calls, total ms, ms per step, share, bytes read/written, GB/s, GFLOP/s.
    std::string format(const std::string &title) const;

  private:
    std::map<std::pair<std::string, std::string>, row> rows_;
    int64_t graphs_ = 0;
};

}  // namespace weft
