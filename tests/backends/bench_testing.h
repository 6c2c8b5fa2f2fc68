// tests/backends/bench_testing.h — small pieces the kernel benchmarks share (bench_group_kernel.cpp,
// bench_decode_stream.cpp): option lists, this thread's CPU time, a plain matrix's shape.
#pragma once

#include <algorithm>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/tensor.h"
#include "weft/core/type.h"

namespace weft::test {

// "a,b,c" as {"a", "b", "c"} (empty items dropped).
inline std::vector<std::string> split_list(std::string_view list) {
    std::vector<std::string> out;
    for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        if (comma > at) out.emplace_back(list.substr(at, comma - at));
        at = comma + 1;
    }
    return out;
}

// Seconds of CPU time this thread has run.
inline double thread_seconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// A [k, rows] matrix of `type` with contiguous plain rows (no data).
inline tensor plain_matrix(dtype type, int64_t k, int64_t rows) {
    tensor a{};
    a.type = type;
    a.ne[0] = k;
    a.ne[1] = rows;
    a.ne[2] = a.ne[3] = 1;
    a.nb[0] = type_traits(type).type_size;
    a.nb[1] = row_size(type, k);
    a.nb[2] = a.nb[3] = a.nb[1] * size_t(rows);
    return a;
}

}  // namespace weft::test
