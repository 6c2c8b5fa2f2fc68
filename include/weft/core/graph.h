// weft/core/graph.h — the compute graph: topologically ordered nodes and leafs, expanded lazily.
#pragma once

#include <cstddef>
#include <functional>
#include <ostream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "weft/core/tensor.h"

namespace weft {

constexpr size_t default_graph_size = 8192;

struct graph {
    explicit graph(size_t capacity = default_graph_size) : capacity(capacity) {}

    size_t capacity;              // nodes + leafs; exceeding it throws weft::error
    std::vector<tensor *> nodes;  // tensors with an op, after all their sources
    std::vector<tensor *> leafs;  // op none: inputs, weights, constants
    std::unordered_set<const tensor *> visited;
    std::unordered_map<const tensor *, int> use_count;  // consumers of each tensor within the graph

    size_t size() const { return nodes.size() + leafs.size(); }
    void clear();
};

// Depth-first from `out` with an explicit stack: appends out and everything it depends on that is
// not yet in g, each after its sources. Calling it again for another output extends the same graph.
void build_forward_expand(graph &g, tensor *out);

// One line per node and leaf: index, op, name, shape, type, sources.
void graph_print(const graph &g, std::ostream &os);
// Graphviz DOT: nodes as records (name, op, shape, type), leafs as boxes, edges src -> dst.
void graph_dump_dot(const graph &g, std::ostream &os);

// Counts of nodes per op, in op order, for summaries.
std::vector<std::pair<op_kind, int>> graph_op_counts(const graph &g);

// Called per node during execution. First with ask = true: return whether you want to observe
// this node. If yes, called again with ask = false after the node is computed (its data is then
// readable); return false to abort the computation.
using eval_callback = std::function<bool(tensor *node, bool ask)>;

}  // namespace weft
