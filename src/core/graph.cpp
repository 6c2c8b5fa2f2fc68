// src/core/graph.cpp — graph expansion (explicit-stack depth-first walk), printing, DOT export.
#include "weft/core/graph.h"

#include <map>
#include <string>

#include "weft/core/error.h"
#include "weft/core/ops.h"

namespace weft {

void graph::clear() {
    nodes.clear();
    leafs.clear();
    visited.clear();
    use_count.clear();
}

void build_forward_expand(graph &g, tensor *out) {
    if (out == nullptr) throw error("build_forward_expand: output tensor is null");
    if (g.visited.count(out)) return;  // already part of the graph

    // Post-order walk with an explicit stack (a deep model must not overflow the call stack). The
    // new tensors are collected first and committed only if they fit, so a graph that would exceed
    // its capacity is left exactly as it was.
    struct frame {
        tensor *t;
        int next_src;
    };
    std::vector<frame> stack;
    std::vector<tensor *> added;  // in post order: every tensor after its sources
    std::vector<const tensor *> newly_visited;

    auto visit = [&](tensor *t) {
        g.visited.insert(t);
        newly_visited.push_back(t);
        stack.push_back({t, 0});
    };
    visit(out);
    while (!stack.empty()) {
        frame &top = stack.back();
        if (top.next_src < max_src) {
            tensor *s = top.t->src[top.next_src++];
            if (s != nullptr && !g.visited.count(s)) visit(s);
            continue;
        }
        added.push_back(top.t);
        stack.pop_back();
    }

    if (g.size() + added.size() > g.capacity) {
        for (const tensor *t : newly_visited) g.visited.erase(t);
        throw error("graph capacity " + std::to_string(g.capacity) + " exceeded: expanding '" + out->name +
                    "' needs " + std::to_string(g.size() + added.size()) +
                    " tensors (nodes + leafs); build the graph with a larger capacity");
    }

    const size_t n_nodes_before = g.nodes.size();
    for (tensor *t : added) {
        (t->op == op_kind::none ? g.leafs : g.nodes).push_back(t);
        g.use_count.try_emplace(t, 0);
        for (tensor *s : t->src)
            if (s != nullptr) ++g.use_count[s];
    }
    if (out->op != op_kind::none && g.nodes.size() > n_nodes_before) WEFT_ASSERT(g.nodes.back() == out);
}

namespace {

// "n3", "l0": DOT ids (built by append: GCC 12 misreports `"n" + std::to_string(i)` under -Werror)
std::string dot_id(char kind, size_t index) {
    std::string id(1, kind);
    id += std::to_string(index);
    return id;
}

std::string display_name(const tensor &t) {
    return t.name[0] ? std::string(t.name) : std::string("-");
}

void print_tensor(std::ostream &os, size_t index, const tensor &t) {
    os << "  #" << index << "  " << op_name(t.op) << "  " << display_name(t) << "  " << t.shape_str() << "  "
       << type_name(t.type);
    bool first = true;
    for (const tensor *s : t.src) {
        if (s == nullptr) continue;
        os << (first ? "  <- " : ", ") << display_name(*s);
        first = false;
    }
    if (t.flags & tensor_flag_input) os << "  (input)";
    if (t.flags & tensor_flag_output) os << "  (output)";
    if (t.flags & tensor_flag_param) os << "  (weight)";
    os << '\n';
}

// Quotes and backslashes end or escape any label; record labels also treat {}|<> specially. Names
// come from models and users.
std::string dot_escape(const std::string &s, bool record) {
    std::string out;
    for (char c : s) {
        const bool record_special = c == '{' || c == '}' || c == '|' || c == '<' || c == '>';
        if (c == '"' || c == '\\' || (record && record_special)) out += '\\';
        out += c;
    }
    return out;
}

}  // namespace

void graph_print(const graph &g, std::ostream &os) {
    os << "graph: " << g.nodes.size() << " nodes, " << g.leafs.size() << " leafs\n";
    os << "nodes:\n";
    for (size_t i = 0; i < g.nodes.size(); ++i) print_tensor(os, i, *g.nodes[i]);
    os << "leafs:\n";
    for (size_t i = 0; i < g.leafs.size(); ++i) print_tensor(os, i, *g.leafs[i]);
}

void graph_dump_dot(const graph &g, std::ostream &os) {
    std::unordered_map<const tensor *, std::string> ids;
    for (size_t i = 0; i < g.nodes.size(); ++i) ids[g.nodes[i]] = dot_id('n', i);
    for (size_t i = 0; i < g.leafs.size(); ++i) ids[g.leafs[i]] = dot_id('l', i);
    // a source that is not in the graph (a hand-built graph) still gets a box of its own
    std::vector<const tensor *> outside;
    auto id_of = [&](const tensor *t) -> const std::string & {
        auto it = ids.find(t);
        if (it != ids.end()) return it->second;
        outside.push_back(t);
        return ids[t] = dot_id('x', outside.size() - 1);
    };

    os << "digraph weft {\n  rankdir = TB;\n  node [fontname = \"monospace\"];\n";
    for (const tensor *t : g.nodes) {
        const std::string label = dot_escape(display_name(*t), true) + " | " +
                                  dot_escape(op_symbol(t->op), true) + " (" + op_name(t->op) + ") | " +
                                  t->shape_str() + " " + type_name(t->type);
        const char *color = (t->flags & tensor_flag_output) ? "lightpink" : "white";
        os << "  " << ids[t] << " [shape = record, style = filled, fillcolor = " << color << ", label = \"{"
           << label << "}\"];\n";
    }
    for (const tensor *t : g.leafs) {
        const std::string label =
            dot_escape(display_name(*t), false) + "\\n" + t->shape_str() + " " + type_name(t->type);
        const char *color = (t->flags & tensor_flag_param) ? "lightyellow" : "lightblue";
        os << "  " << ids[t] << " [shape = box, style = filled, fillcolor = " << color << ", label = \""
           << label << "\"];\n";
    }
    for (const tensor *t : g.nodes) {
        for (int j = 0; j < max_src; ++j) {
            const tensor *s = t->src[j];
            if (s == nullptr) continue;
            const std::string from = id_of(s);
            os << "  " << from << " -> " << ids[t] << " [label = \"src" << j << "\"];\n";
        }
    }
    for (size_t i = 0; i < outside.size(); ++i)
        os << "  x" << i << " [shape = box, style = dashed, label = \""
           << dot_escape(display_name(*outside[i]), false) << "\"];\n";
    os << "}\n";
}

std::vector<std::pair<op_kind, int>> graph_op_counts(const graph &g) {
    std::map<op_kind, int> counts;
    for (const tensor *t : g.nodes) ++counts[t->op];
    return {counts.begin(), counts.end()};
}

}  // namespace weft
