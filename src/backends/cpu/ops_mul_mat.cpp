// src/backends/cpu/ops_mul_mat.cpp — matrix product for every weight type, through the quant traits.
//
// dst[i0, i1, i2, i3] = dot(row i0 of a's matrix (i2 / (B2/A2), i3 / (B3/A3)), row (i1, i2, i3) of b).
// The activations b are first converted once per op to the weight type's vec_dot_type (f16 for f16
// weights, q8_0 / q8_K for the quantized ones) in the work memory, split across threads; then each
// thread computes tiles of the result. Every element is one vec_dot, so the result does not depend
// on the thread count.
#include <atomic>
#include <new>

#include "backends/cpu/f16_int16_mm.h"
#include "backends/cpu/float_mm.h"
#include "backends/cpu/interleaved.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/row_kernels.h"
#include "backends/cpu/rows.h"
#include "weft/quant/quant.h"

namespace weft::cpu {

namespace {

// A tile: up to this many rows of a times this many rows of b (a's rows stay in cache across b's).
constexpr int64_t max_tile_rows_a = 16;
constexpr int64_t max_tile_rows_b = 16;
// Tiles are halved until every thread has a few of them (small products: decode attention).
constexpr int64_t min_tiles_per_thread = 4;

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

// The tiles of the row-kernel path: halved from 16 x 16 until every thread has a few.
struct row_tiles {
    int64_t rows_a, rows_b;  // rows of a and of b per tile
    int64_t n_a, n_b;        // tiles along a's rows and along b's
};
row_tiles plan_row_tiles(int64_t m, int64_t b_rows, int nth) {
    int64_t rows_a = max_tile_rows_a, rows_b = max_tile_rows_b;
    const int64_t wanted_tiles = min_tiles_per_thread * nth;
    while (ceil_div(m, rows_a) * ceil_div(b_rows, rows_b) < wanted_tiles && (rows_a > 1 || rows_b > 1)) {
        if (rows_a >= rows_b && rows_a > 1)
            rows_a /= 2;
        else
            rows_b /= 2;
    }
    return {rows_a, rows_b, ceil_div(m, rows_a), ceil_div(b_rows, rows_b)};
}

// b can be read where it lies: already of the vec_dot type, with contiguous rows.
bool activations_used_in_place(const tensor &b, dtype vec_dot_type) {
    return b.type == vec_dot_type && b.nb[0] == type_traits(b.type).type_size;
}

size_t converted_bytes(const tensor &b, dtype vec_dot_type) {
    return pad_to_cache_line(row_size(vec_dot_type, b.ne[0]) * size_t(b.nrows()));
}

// --- weights in the interleaved layout (interleaved.h) ---------------------------------------------

// Products of at most this many columns (a decode step, or a few sequences' tokens) skip the
// barrier between quantizing the activations and the products: every thread quantizes all the
// columns into memory of its own, then takes chunks of groups. On a small model a step is
// hundreds of short nodes, and a barrier per product was a good part of it (8-layer embd-512 Q8_0
// synth: tg64 ~1500 -> ~1750 t/s, pp4 ~3300 -> ~3640 t/s, alternating runs).
constexpr int64_t few_columns = 4;

// Work memory of a product with interleaved weights: the activations as q8 rows (values, scales,
// sums), and per thread a float row and a row of q8_0 blocks (with few columns, each thread's own
// copy of the q8 rows instead of the shared ones).
struct interleaved_work {
    // byte offsets: of the q8 rows (in the node's work memory, or with few columns in a thread's),
    // of the threads' memory, and its size per thread
    size_t qs = 0, d = 0, sum = 0, threads = 0, thread_bytes = 0;

    interleaved_work(int64_t k, int64_t n_rows, q8_format format, int n_threads) {
        const size_t rows = size_t(n_rows);
        const size_t n_d = size_t(k / values_per_scale(format)), n_sums = size_t(k / values_per_sum(format));
        const size_t blocks =
            n_d * type_traits(format == q8_format::q8_k ? dtype::q8_k : dtype::q8_0).type_size;
        const size_t scratch = pad_to_cache_line(size_t(k) * sizeof(float)) + pad_to_cache_line(blocks);
        const bool private_copies = n_rows <= few_columns;
        qs = private_copies ? scratch : 0;
        d = qs + pad_to_cache_line(rows * size_t(k));
        sum = d + pad_to_cache_line(rows * n_d * sizeof(float));
        const size_t q8_end = sum + pad_to_cache_line(rows * n_sums * sizeof(int32_t));
        threads = private_copies ? 0 : q8_end;
        thread_bytes = private_copies ? q8_end : scratch;
    }
    size_t total(int n_threads) const { return threads + thread_bytes * size_t(n_threads); }
};

size_t work_size_interleaved(const tensor &dst, int n_threads) {
    const tensor &b = *dst.src[1];
    const q8_format format = activation_format(*interleaved_layout_of(*dst.src[0]));
    const size_t bytes = interleaved_work(b.ne[0], b.nrows(), format, n_threads).total(n_threads);
    // mul_mat_id runs its experts' products, of fewer columns each, in memory sized for all of them:
    // the few-column layout (a copy per thread) may need more than the shared one of more columns
    if (b.nrows() <= few_columns) return bytes;
    return std::max(bytes, interleaved_work(b.ne[0], few_columns, format, n_threads).total(n_threads));
}

// Columns of one pass over a chunk: their activations stay in L1 while the chunk's groups pass.
constexpr int64_t columns_per_pass = 16;

}  // namespace

shared_chunks plan_shared_chunks(const int64_t *groups, int n_products, int n_threads) {
    const chunk_plan plan = plan_chunks(std::span(groups, size_t(n_products)), n_threads);
    shared_chunks c;
    c.groups_per_chunk = plan.groups_per_chunk;
    c.n_chunks = plan.n_chunks;
    for (int j = 0; j < n_products; ++j)
        c.first_chunk[j + 1] = c.first_chunk[j] + (groups[j] + c.groups_per_chunk - 1) / c.groups_per_chunk;
    return c;
}

// Products of one activation matrix b by up to max_shared_products interleaved weights of one
// activation format (a layer's Q, K and V; its gate and up): b is quantized once, and the chunks of
// every product are dealt from one dispenser, product after product, with no barrier between them.
namespace {
void compute_mul_mat_grouped_float(const compute_params &p, tensor *const *dsts, int n_dsts);
}  // namespace

void compute_mul_mat_shared(const compute_params &p, tensor *const *dsts, int n_dsts) {
    WEFT_ASSERT(n_dsts >= 1 && n_dsts <= max_shared_products);
    if (is_grouped_f16_int16(*dsts[0]->src[0])) return compute_mul_mat_f16_int16(p, dsts, n_dsts);
    if (is_grouped_float(*dsts[0]->src[0])) return compute_mul_mat_grouped_float(p, dsts, n_dsts);
    const tensor &b = *dsts[0]->src[1];  // [k, n, B2, B3] floats
    // the kernel, chosen once, and the activation format of the products
    const groups_kernel_fn kernel = best_groups_kernel();
    const q8_format format = activation_format(*interleaved_layout_of(*dsts[0]->src[0]));
    const int64_t k = b.ne[0];
    const int64_t n_cols = b.nrows();
    const interleaved_work w(k, n_cols, format, p.nth);
    WEFT_ASSERT(w.total(p.nth) <= p.wsize);
    const int64_t n_d = k / values_per_scale(format), n_sums = k / values_per_sum(format);
    // product j's chunks are [first_chunk[j], first_chunk[j + 1]), of plan.groups_per_chunk groups
    const interleaved_layout *layouts[max_shared_products] = {};
    int64_t groups[max_shared_products] = {};
    for (int j = 0; j < n_dsts; ++j) {
        layouts[j] = interleaved_layout_of(*dsts[j]->src[0]);
        WEFT_ASSERT(layouts[j] && dsts[j]->src[1] == &b && dsts[j]->src[0]->ne[0] == k &&
                    activation_format(*layouts[j]) == format);
        groups[j] = dsts[j]->src[0]->ne[1] / interleave_rows;
    }
    const shared_chunks plan = plan_shared_chunks(groups, n_dsts, p.nth);
    const int64_t groups_per_chunk = plan.groups_per_chunk;
    const int64_t *first_chunk = plan.first_chunk;
    const chunk_dispenser chunks(p, plan.n_chunks);
    const bool private_copies = n_cols <= few_columns;
    std::byte *mine = p.wdata + w.threads + size_t(p.ith) * w.thread_bytes;
    std::byte *q8_base = private_copies ? mine : p.wdata;
    auto *qs = reinterpret_cast<int8_t *>(q8_base + w.qs);
    auto *d = reinterpret_cast<float *>(q8_base + w.d);
    auto *sum = reinterpret_cast<int32_t *>(q8_base + w.sum);

    // 1. activations to q8 rows: each thread a share of the rows, or with few columns all of them
    //    into its own memory (the same values, so who quantized a column does not change a product)
    {
        float *scratch = reinterpret_cast<float *>(mine);
        void *blocks = mine + pad_to_cache_line(size_t(k) * sizeof(float));
        const index_range rows = private_copies ? index_range{0, n_cols} : split_range(n_cols, p.ith, p.nth);
        for (int64_t r = rows.begin; r < rows.end; ++r) {
            int64_t i1, i2, i3;
            unravel_row(r, b.ne, i1, i2, i3);
            const float *x = row_as_f32(b.type, row_at(b, i1, i2, i3), b.nb[0], k, scratch);
            quantize_q8_row(x, k, format, qs + r * k, d + r * n_d, sum + r * n_sums, blocks);
        }
        if (!private_copies) p.barrier();
    }

    // 2. chunks of groups (every element is computed by one kernel call in the fixed order, so who
    //    computes it does not change it)
    const q8_rows act = make_q8_rows(qs, d, sum, k, format);
    int j = 0;  // the product of the chunk
    for (int64_t chunk = chunks.next(p.ith); chunk >= 0; chunk = chunks.next(p.ith)) {
        while (chunk >= first_chunk[j + 1]) ++j;
        while (chunk < first_chunk[j]) --j;
        const tensor &a = *dsts[j]->src[0];  // [k, m] interleaved
        const interleaved_layout &layout = *layouts[j];
        const int64_t m = a.ne[1], n_groups = m / interleave_rows;
        const auto *weights = static_cast<const uint8_t *>(a.data);
        const size_t group_bytes = size_t(k / layout.block) * layout.block_bytes;
        auto *out = static_cast<float *>(dsts[j]->data);  // contiguous: column c at out + c * m
        const int64_t g_begin = (chunk - first_chunk[j]) * groups_per_chunk;
        const int64_t g_end = std::min(n_groups, g_begin + groups_per_chunk);
        for (int64_t c0 = 0; c0 < n_cols; c0 += columns_per_pass)
            kernel(layout, weights + size_t(g_begin) * group_bytes, group_bytes, g_end - g_begin, act, c0,
                   std::min(columns_per_pass, n_cols - c0), out + c0 * m + g_begin * interleave_rows, m);
    }
}

namespace {

bool supports_mul_mat_interleaved(const tensor &dst) {
    const tensor &a = *dst.src[0];
    const tensor &b = *dst.src[1];
    return is_float_type(b.type) && b.ne[0] == a.ne[0] && a.ne[2] == 1 && a.ne[3] == 1 &&
           dst.type == dtype::f32 && dst.is_contiguous() && dst.ne[0] == a.ne[1] && dst.ne[1] == b.ne[1] &&
           dst.ne[2] == b.ne[2] && dst.ne[3] == b.ne[3];
}

// --- float weights (f32, f16, bf16) against f32 activations (float_mm.h) -----------------------------

// b is read where it lies when its rows are f32 and contiguous; otherwise it is converted first.
bool float_activations_in_place(const tensor &b) {
    return b.type == dtype::f32 && b.nb[0] == sizeof(float) && b.nb[1] % sizeof(float) == 0 &&
           b.nb[2] % sizeof(float) == 0 && b.nb[3] % sizeof(float) == 0;
}

size_t work_size_float(const tensor &dst, int) {
    const tensor &b = *dst.src[1];
    size_t bytes = cache_line;  // the task counter
    if (!float_activations_in_place(b)) bytes += pad_to_cache_line(size_t(b.nelements()) * sizeof(float));
    return bytes;
}

// Rows and columns of one task: small enough that both threads get many, large enough that a
// task's weights and activations are reused from cache.
constexpr int64_t float_task_rows = 64;
constexpr int64_t float_task_cols = 64;

void compute_mul_mat_float(const compute_params &p, tensor &dst) {
    const tensor &a = *dst.src[0];  // [k, m, A2, A3] f32 / f16 / bf16
    const tensor &b = *dst.src[1];  // [k, n, B2, B3]
    const int64_t k = a.ne[0], m = a.ne[1], n = b.ne[1], b2 = b.ne[2], b3 = b.ne[3];
    auto *next_task = reinterpret_cast<std::atomic<int64_t> *>(p.wdata);

    const char *x_base = static_cast<const char *>(b.data);
    size_t x_nb1 = b.nb[1], x_nb2 = b.nb[2], x_nb3 = b.nb[3];
    if (!float_activations_in_place(b)) {
        auto *converted = reinterpret_cast<float *>(p.wdata + cache_line);
        const index_range rows = split_range(b.nrows(), p.ith, p.nth);
        for (int64_t r = rows.begin; r < rows.end; ++r) {
            int64_t i1, i2, i3;
            unravel_row(r, b.ne, i1, i2, i3);
            load_row(b.type, row_at(b, i1, i2, i3), b.nb[0], k, converted + r * k);
        }
        x_base = reinterpret_cast<const char *>(converted);
        x_nb1 = size_t(k) * sizeof(float);
        x_nb2 = x_nb1 * size_t(n);
        x_nb3 = x_nb2 * size_t(b2);
    }
    if (p.ith == 0) new (next_task) std::atomic<int64_t>(0);
    p.barrier();

    const float_tile_fn tile = best_float_tile();
    const int64_t ratio2 = b2 / a.ne[2], ratio3 = b3 / a.ne[3];
    const int64_t row_tasks = (m + float_task_rows - 1) / float_task_rows;
    const int64_t col_tasks = (n + float_task_cols - 1) / float_task_cols;
    const int64_t n_tasks = b2 * b3 * row_tasks * col_tasks;
    for (int64_t t = next_task->fetch_add(1); t < n_tasks; t = next_task->fetch_add(1)) {
        const int64_t rt = t % row_tasks, ct = (t / row_tasks) % col_tasks, mi = t / (row_tasks * col_tasks);
        const int64_t i2 = mi % b2, i3 = mi / b2;
        const int64_t r0 = rt * float_task_rows, c0 = ct * float_task_cols;
        const char *a_rows = static_cast<const char *>(a.data) + size_t(i2 / ratio2) * a.nb[2] +
                             size_t(i3 / ratio3) * a.nb[3] + size_t(r0) * a.nb[1];
        const auto *x = reinterpret_cast<const float *>(x_base + size_t(c0) * x_nb1 + size_t(i2) * x_nb2 +
                                                        size_t(i3) * x_nb3);
        float *out = reinterpret_cast<float *>(row_at(dst, c0, i2, i3)) + r0;
        tile(a.type, a_rows, a.nb[1], std::min(float_task_rows, m - r0), x, x_nb1 / sizeof(float),
             std::min(float_task_cols, n - c0), k, out, dst.nb[1] / sizeof(float));
    }
}

// --- float weights grouped 16 rows at a time (float_mm.h) ---------------------------------------------

// A single column is read where it lies when it is f32; several are packed into panels.
bool b_rows_used_in_place(const tensor &b) {
    return b.type == dtype::f32 && b.is_contiguous() && b.nrows() == 1;
}

// bf16 weights: the panels of bf16 pairs (float_mm.h), then per thread the pairs of a panel's columns
// and one column in f32 (when b is not plain f32 rows).
size_t pair_panels_bytes(const tensor &b) {
    const int64_t panels = (b.nrows() + float_panel_width - 1) / float_panel_width;
    return pad_to_cache_line(size_t(panels * float_panel_width * (b.ne[0] / 2)) * sizeof(uint32_t));
}
size_t pair_scratch_bytes(const tensor &b) {
    return pad_to_cache_line(size_t(float_panel_width * (b.ne[0] / 2)) * sizeof(uint32_t)) +
           pad_to_cache_line(size_t(b.ne[0]) * sizeof(float));
}

size_t work_size_grouped_float(const tensor &dst, int n_threads) {
    const tensor &b = *dst.src[1];
    if (takes_bf16_pairs(dst.src[0]->type))
        return pair_panels_bytes(b) + size_t(n_threads) * pair_scratch_bytes(b);
    const int64_t panels = (b.nrows() + float_panel_width - 1) / float_panel_width;
    size_t bytes = 0;
    if (!b_rows_used_in_place(b))
        bytes += pad_to_cache_line(size_t(panels * float_panel_width * b.ne[0]) * sizeof(float));
    return bytes;
}

// Writes b's columns of panels [ps.begin, ps.end) as panels of bf16 pairs (float_mm.h): each column
// rounded to pairs (into `scratch` when the panel has several columns), then transposed into the panel
// with the f32 pack (a copy of 32-bit words).
void pack_pair_panels(const tensor &b, int64_t k, int64_t width, index_range ps, uint32_t *panels,
                      char *scratch) {
    const int64_t n_cols = b.nrows(), kp = k / 2;
    const bool plain_f32 = b.type == dtype::f32 && b.nb[0] == sizeof(float);
    const round_pairs_fn round_pairs = best_round_to_bf16_pairs();
    const pack_panel_fn pack = best_pack_panel();
    auto *column_pairs = reinterpret_cast<uint32_t *>(scratch);
    auto *column_f32 = reinterpret_cast<float *>(
        scratch + pad_to_cache_line(size_t(float_panel_width * kp) * sizeof(uint32_t)));
    const float *columns[float_panel_width];
    for (int64_t panel = ps.begin; panel < ps.end; ++panel) {
        const int64_t c0 = panel * width, n = std::min(width, n_cols - c0);
        uint32_t *to = panels + panel_index(0, c0, kp, width);
        for (int64_t j = 0; j < n; ++j) {
            int64_t i1, i2, i3;
            unravel_row(c0 + j, b.ne, i1, i2, i3);
            const char *src = row_at(b, i1, i2, i3);
            const float *x = reinterpret_cast<const float *>(src);
            if (!plain_f32) {
                for (int64_t i = 0; i < k; ++i)
                    column_f32[i] = load_element(b.type, src + size_t(i) * b.nb[0]);
                x = column_f32;
            }
            uint32_t *pairs = width == 1 ? to : column_pairs + j * kp;
            round_pairs(x, k, pairs);
            columns[j] = reinterpret_cast<const float *>(pairs);
        }
        if (width > 1) pack(columns, n, kp, width, reinterpret_cast<float *>(to));
    }
}

// Writes b's columns of panels [ps.begin, ps.end) into the panel layout: plain f32 columns with the
// ISA's pack (pack_panel_*), other types converted in the same order (64 values of a panel's columns
// at a time, so the lines being filled stay in L1).
void pack_panels(const tensor &b, int64_t k, int64_t width, index_range ps, float *panels) {
    constexpr int64_t values_per_step = 64;
    const int64_t n_cols = b.nrows();
    const bool plain_f32 = b.type == dtype::f32 && b.nb[0] == sizeof(float);
    const pack_panel_fn pack = best_pack_panel();
    const char *src[float_panel_width];
    const float *columns[float_panel_width];
    for (int64_t panel = ps.begin; panel < ps.end; ++panel) {
        const int64_t c0 = panel * width, n = std::min(width, n_cols - c0);
        for (int64_t j = 0; j < n; ++j) {
            int64_t i1, i2, i3;
            unravel_row(c0 + j, b.ne, i1, i2, i3);
            src[j] = row_at(b, i1, i2, i3);
            columns[j] = reinterpret_cast<const float *>(src[j]);
        }
        float *to = panels + panel_index(0, c0, k, width);  // value i of column c0 + j at to[i * width + j]
        if (plain_f32) {
            pack(columns, n, k, width, to);
            continue;
        }
        for (int64_t i0 = 0; i0 < k; i0 += values_per_step) {
            const int64_t i1 = std::min(k, i0 + values_per_step);
            for (int64_t j = 0; j < n; ++j)
                for (int64_t i = i0; i < i1; ++i)
                    to[i * width + j] = load_element(b.type, src[j] + size_t(i) * b.nb[0]);
        }
    }
}

// Products of one activation matrix b by n_dsts grouped float weights of one type and k (one, or a
// layer's Q, K and V, its gate and up: compute_mul_mat_shared): b is packed once, and the chunks of
// every product are dealt from one dispenser, product after product.
void compute_mul_mat_grouped_float(const compute_params &p, tensor *const *dsts, int n_dsts) {
    const tensor &a = *dsts[0]->src[0];  // [k, m] grouped
    const tensor &b = *dsts[0]->src[1];  // [k, n, B2, B3]
    const int64_t k = a.ne[0], n_cols = b.nrows();
    int64_t groups[max_shared_products] = {};
    for (int j = 0; j < n_dsts; ++j) {
        WEFT_ASSERT(dsts[j]->src[1] == &b && dsts[j]->src[0]->type == a.type && dsts[j]->src[0]->ne[0] == k);
        groups[j] = dsts[j]->src[0]->ne[1] / float_group_rows;
    }
    const shared_chunks plan = plan_shared_chunks(groups, n_dsts, p.nth);
    const int64_t groups_per_chunk = plan.groups_per_chunk;
    const int64_t *first_chunk = plan.first_chunk;
    const chunk_dispenser chunks(p, plan.n_chunks);
    const float *x = static_cast<const float *>(b.data);
    const int64_t width = n_cols == 1 ? 1 : float_panel_width;
    if (takes_bf16_pairs(a.type)) {
        auto *scratch =
            reinterpret_cast<char *>(p.wdata + pair_panels_bytes(b) + size_t(p.ith) * pair_scratch_bytes(b));
        if (n_cols == 1) {
            // one column (decode): every thread rounds it into its own scratch, so no barrier
            auto *own = reinterpret_cast<uint32_t *>(scratch);
            pack_pair_panels(b, k, 1, index_range{0, 1}, own, scratch);
            x = reinterpret_cast<const float *>(own);
        } else {
            auto *panels = reinterpret_cast<uint32_t *>(p.wdata);
            pack_pair_panels(b, k, width, split_range((n_cols + width - 1) / width, p.ith, p.nth), panels,
                             scratch);
            x = reinterpret_cast<const float *>(panels);
            p.barrier();
        }
    } else if (!b_rows_used_in_place(b)) {
        auto *panels = reinterpret_cast<float *>(p.wdata);
        pack_panels(b, k, width, split_range((n_cols + width - 1) / width, p.ith, p.nth), panels);
        x = panels;
        p.barrier();
    }

    const float_group_fn kernel = best_float_groups();
    const int64_t panel_k = takes_bf16_pairs(a.type) ? k / 2 : k;  // words per panel column
    const size_t group_bytes = size_t(k) * float_group_rows * type_traits(a.type).type_size;
    constexpr int64_t pass = 2 * float_panel_width;  // columns whose panels stay in cache over a chunk
    int j = 0;                                       // the product of the chunk
    for (int64_t chunk = chunks.next(p.ith); chunk >= 0; chunk = chunks.next(p.ith)) {
        while (chunk >= first_chunk[j + 1]) ++j;
        while (chunk < first_chunk[j]) --j;
        const tensor &dst = *dsts[j];
        const int64_t m = dst.src[0]->ne[1], n_groups = groups[j];
        const auto *weights = static_cast<const char *>(dst.src[0]->data);
        auto *out = static_cast<float *>(dst.data);  // contiguous: column c at out + c * m
        const int64_t g_begin = (chunk - first_chunk[j]) * groups_per_chunk;
        const int64_t g_count = std::min(n_groups, g_begin + groups_per_chunk) - g_begin;
        for (int64_t c0 = 0; c0 < n_cols; c0 += pass)
            kernel(a.type, weights + size_t(g_begin) * group_bytes, group_bytes, g_count, k,
                   x + panel_index(0, c0, panel_k, width), width, std::min(pass, n_cols - c0),
                   out + c0 * m + g_begin * float_group_rows, size_t(m));
    }
}

}  // namespace

void compute_mul_mat(const compute_params &p, tensor &dst) {
    if (is_grouped_float(*dst.src[0]) || interleaved_layout_of(*dst.src[0])) {
        tensor *const one[] = {&dst};
        return compute_mul_mat_shared(p, one, 1);
    }
    if (is_float_weight(dst.src[0]->type) && dst.nb[0] == sizeof(float) && dst.nb[1] % sizeof(float) == 0)
        return compute_mul_mat_float(p, dst);
    const tensor &a = *dst.src[0];  // [k, m, A2, A3] weights of any type
    const tensor &b = *dst.src[1];  // [k, n, B2, B3] activations
    const quant_traits &a_traits = row_traits_of(a.type);
    const dtype vec_dot_type = a_traits.vec_dot_type;
    // row_traits_of answers with the reference table under force_scalar(), so the oracle path is testable
    const vec_dot_fn vec_dot = a_traits.vec_dot;
    const int64_t k = a.ne[0];
    const int64_t m = a.ne[1];
    const int64_t n = b.ne[1], b2 = b.ne[2], b3 = b.ne[3];

    const char *y_base = static_cast<const char *>(b.data);
    size_t y_nb1 = b.nb[1], y_nb2 = b.nb[2], y_nb3 = b.nb[3];
    if (!activations_used_in_place(b, vec_dot_type)) {
        // Convert every row of b into contiguous rows of vec_dot_type, each thread a share.
        const size_t y_row = row_size(vec_dot_type, k);
        const quant_traits &y_traits = row_traits_of(vec_dot_type);
        const from_float_fn from_float = y_traits.from_float;
        std::byte *converted = p.wdata;
        float *scratch =
            reinterpret_cast<float *>(p.wdata + converted_bytes(b, vec_dot_type) +
                                      size_t(p.ith) * pad_to_cache_line(size_t(k) * sizeof(float)));
        const index_range rows = split_range(b.nrows(), p.ith, p.nth);
        for (int64_t r = rows.begin; r < rows.end; ++r) {
            int64_t i1, i2, i3;
            unravel_row(r, b.ne, i1, i2, i3);
            const char *src = row_at(b, i1, i2, i3);
            auto *out = reinterpret_cast<char *>(converted) + size_t(r) * y_row;
            if (vec_dot_type == dtype::f32) {
                load_row(b.type, src, b.nb[0], k, reinterpret_cast<float *>(out));
            } else {
                from_float(row_as_f32(b.type, src, b.nb[0], k, scratch), out, k);
            }
        }
        p.barrier();
        y_base = reinterpret_cast<const char *>(converted);
        y_nb1 = y_row;
        y_nb2 = y_row * size_t(n);
        y_nb3 = y_nb2 * size_t(b2);
    }

    const int64_t ratio2 = b2 / a.ne[2];
    const int64_t ratio3 = b3 / a.ne[3];
    const int64_t b_rows = n * b2 * b3;
    // q8_0 at the AVX2 level and above, several columns: register tiles with the row kernel's operations
    // (same bits); one column (decode) streams rows through the row kernel, which is faster there
    const bool q8_0_tiles = vec_dot == vec_dot_q8_0_avx2 && dst.nb[0] == sizeof(float) && b_rows > 1;
    const row_tiles plan = plan_row_tiles(m, b_rows, p.nth);
    const int64_t tile_rows_a = plan.rows_a, tile_rows_b = plan.rows_b, n_tiles_a = plan.n_a;
    // each thread one contiguous range of tiles (rows of a in order): a decode streams its share of
    // the weights from one place (tiles dealt in turn restarted the prefetchers at every tile)
    const index_range tiles = split_range(plan.n_a * plan.n_b, p.ith, p.nth);
    for (int64_t tile = tiles.begin; tile < tiles.end; ++tile) {
        const int64_t a_begin = (tile % n_tiles_a) * tile_rows_a;
        const int64_t a_end = std::min(m, a_begin + tile_rows_a);
        const int64_t b_begin = (tile / n_tiles_a) * tile_rows_b;
        const int64_t b_end = std::min(b_rows, b_begin + tile_rows_b);
        // the columns of the tile in runs that read the same matrix (dims 2 and 3 broadcast)
        for (int64_t rb = b_begin; rb < b_end;) {
            const char *a_matrix = nullptr;
            const void *ys[max_tile_rows_b];
            float *outs[max_tile_rows_b];
            int64_t n_run = 0;
            for (; rb < b_end; ++rb) {
                int64_t i11, i12, i13;
                unravel_row(rb, b.ne, i11, i12, i13);
                const char *matrix = static_cast<const char *>(a.data) + size_t(i12 / ratio2) * a.nb[2] +
                                     size_t(i13 / ratio3) * a.nb[3];
                if (n_run > 0 && matrix != a_matrix) break;
                a_matrix = matrix;
                ys[n_run] = y_base + size_t(i11) * y_nb1 + size_t(i12) * y_nb2 + size_t(i13) * y_nb3;
                outs[n_run++] =
                    reinterpret_cast<float *>(row_at(dst, i11, i12, i13) + size_t(a_begin) * dst.nb[0]);
            }
            if (q8_0_tiles) {
                dot_tile_q8_0_avx2(k, a_matrix + size_t(a_begin) * a.nb[1], a.nb[1], a_end - a_begin, ys,
                                   n_run, outs);
                continue;
            }
            for (int64_t j = 0; j < n_run; ++j)
                for (int64_t ra = a_begin; ra < a_end; ++ra)
                    vec_dot(k,
                            reinterpret_cast<float *>(reinterpret_cast<char *>(outs[j]) +
                                                      size_t(ra - a_begin) * dst.nb[0]),
                            a_matrix + size_t(ra) * a.nb[1], ys[j]);
        }
    }
}

bool shares_activations(const tensor &first, const tensor &next) {
    if (first.op != op_kind::mul_mat || next.op != op_kind::mul_mat || first.src[1] != next.src[1])
        return false;
    const interleaved_layout *a = interleaved_layout_of(*first.src[0]);
    const interleaved_layout *b = interleaved_layout_of(*next.src[0]);
    // grouped bf16 weights of one k: the panels of bf16 pairs are the same for both; f16 weights in
    // int16 blocks: the panels of int16 blocks
    const bool bf16_groups = is_grouped_float(*first.src[0]) && is_grouped_float(*next.src[0]) &&
                             takes_bf16_pairs(first.src[0]->type) && takes_bf16_pairs(next.src[0]->type);
    const bool int16_groups = is_grouped_f16_int16(*first.src[0]) && is_grouped_f16_int16(*next.src[0]);
    if (!bf16_groups && !int16_groups && (!a || !b || activation_format(*a) != activation_format(*b)))
        return false;
    if (first.src[0]->ne[0] != next.src[0]->ne[0]) return false;
    // each writes only its own result (a result the planner gave the memory of the other, or of the
    // activations, would be written while they are read); a graph not yet given memory (the partition
    // report's) is taken as the planner lays it out for a step: results apart
    auto overlap = [](const tensor &x, const tensor &y) {
        if (x.data == nullptr || y.data == nullptr) return false;
        const auto *x0 = static_cast<const std::byte *>(x.data), *y0 = static_cast<const std::byte *>(y.data);
        return x0 < y0 + y.nbytes() && y0 < x0 + x.nbytes();
    };
    return !overlap(first, next) && !overlap(next, *next.src[1]) && !overlap(first, *first.src[1]);
}

bool supports_mul_mat(const tensor &dst) {
    const tensor *a = dst.src[0];
    const tensor *b = dst.src[1];
    if (!a || !b || dst.type != dtype::f32 || !has_quant_traits(a->type) || !is_float_type(b->type))
        return false;
    if (interleaved_layout_of(*a) || is_grouped_float(*a)) return supports_mul_mat_interleaved(dst);
    const quant_traits &a_traits = row_traits_of(a->type);
    if (!a_traits.vec_dot || !a_traits.vec_dot_ref || !has_quant_traits(a_traits.vec_dot_type)) return false;
    const quant_traits &y_traits = row_traits_of(a_traits.vec_dot_type);
    if (a_traits.vec_dot_type != dtype::f32 && (!y_traits.from_float || !y_traits.from_float_ref))
        return false;
    const int64_t k = a->ne[0];
    return a->nb[0] == type_traits(a->type).type_size && b->ne[0] == k &&
           k % type_traits(a_traits.vec_dot_type).block_size == 0 && b->ne[2] % a->ne[2] == 0 &&
           b->ne[3] % a->ne[3] == 0 && dst.ne[0] == a->ne[1] && dst.ne[1] == b->ne[1] &&
           dst.ne[2] == b->ne[2] && dst.ne[3] == b->ne[3];
}

size_t work_size_mul_mat(const tensor &dst, int n_threads) {
    const tensor &a = *dst.src[0];
    const tensor &b = *dst.src[1];
    if (interleaved_layout_of(a)) return work_size_interleaved(dst, n_threads);
    if (is_grouped_f16_int16(a)) return work_size_mul_mat_f16_int16(dst, n_threads);
    if (is_grouped_float(a)) return work_size_grouped_float(dst, n_threads);
    if (is_float_weight(a.type) && dst.nb[0] == sizeof(float) && dst.nb[1] % sizeof(float) == 0)
        return work_size_float(dst, n_threads);
    const dtype vec_dot_type = row_traits_of(a.type).vec_dot_type;
    if (activations_used_in_place(b, vec_dot_type)) return 0;
    return converted_bytes(b, vec_dot_type) + scratch_size(b.ne[0], n_threads);
}

void mul_mat_thread_work(tensor *const *dsts, int n_dsts, int nth, std::span<double> work) {
    std::fill(work.begin(), work.end(), 0.0);
    const tensor &dst = *dsts[0];
    const tensor &a = *dst.src[0];
    const tensor &b = *dst.src[1];
    const double cols = double(b.nrows());
    if (interleaved_layout_of(a) || is_grouped_float(a)) {
        const int64_t rows_per_group = interleaved_layout_of(a) ? interleave_rows : float_group_rows;
        int64_t groups[max_shared_products] = {};
        for (int j = 0; j < n_dsts; ++j) groups[j] = dsts[j]->src[0]->ne[1] / rows_per_group;
        chunk_shares(std::span(groups, size_t(n_dsts)), nth, work);
        for (double &w : work) w *= double(rows_per_group) * cols;
        return;
    }
    const int64_t m = a.ne[1];
    if (is_float_weight(a.type) && dst.nb[0] == sizeof(float) && dst.nb[1] % sizeof(float) == 0) {
        // tasks from one counter: equally fast threads take them in turn
        const int64_t n = b.ne[1], row_tasks = ceil_div(m, float_task_rows),
                      col_tasks = ceil_div(n, float_task_cols);
        const int64_t n_tasks = b.ne[2] * b.ne[3] * row_tasks * col_tasks;
        for (int64_t t = 0; t < n_tasks; ++t) {
            const int64_t rt = t % row_tasks, ct = (t / row_tasks) % col_tasks;
            work[size_t(t % nth)] += double(std::min(float_task_rows, m - rt * float_task_rows)) *
                                     double(std::min(float_task_cols, n - ct * float_task_cols));
        }
        return;
    }
    const int64_t b_rows = b.nrows();
    const row_tiles plan = plan_row_tiles(m, b_rows, nth);
    for (int t = 0; t < nth; ++t) {
        const index_range tiles = split_range(plan.n_a * plan.n_b, t, nth);
        for (int64_t tile = tiles.begin; tile < tiles.end; ++tile) {
            const int64_t a_begin = (tile % plan.n_a) * plan.rows_a,
                          b_begin = (tile / plan.n_a) * plan.rows_b;
            work[size_t(t)] += double(std::min(m, a_begin + plan.rows_a) - a_begin) *
                               double(std::min(b_rows, b_begin + plan.rows_b) - b_begin);
        }
    }
}

}  // namespace weft::cpu
