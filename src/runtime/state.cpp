// src/runtime/state.cpp — saving and loading an inference_context's state (the whole context or one
// sequence) as bytes or a file, with the checks that keep a state from landing in the wrong place.
#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>

#include "runtime/recurrent_memory.h"
#include "weft/core/error.h"
#include "weft/core/safe_file.h"
#include "weft/gguf/gguf.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"

namespace weft {

namespace {

constexpr char state_magic[8] = {'W', 'E', 'F', 'T', 'S', 'T', 'A', 'T'};
constexpr uint32_t state_version = 1;
constexpr int32_t kind_context = 1;
constexpr int32_t kind_sequence = 2;

const char *kind_name(int32_t kind) {
    return kind == kind_context ? "a whole context's state" : "one sequence's state";
}

struct fnv1a {
    uint64_t hash = 14695981039346656037ull;
    void add(const void *p, size_t n) {
        const auto *b = static_cast<const uint8_t *>(p);
        for (size_t i = 0; i < n; ++i) hash = (hash ^ b[i]) * 1099511628211ull;
    }
    template <typename T>
    void add_value(T v) {
        add(&v, sizeof v);
    }
    void add_string(std::string_view s) {
        add_value(uint64_t(s.size()));
        add(s.data(), s.size());
    }
};

// Two models whose states are interchangeable have the same architecture, shapes, tensors and
// (as far as a sample of each tensor's first and last bytes tells) weights.
uint64_t model_identity(const model &m) {
    fnv1a h;
    const model_hparams &hp = m.hparams();
    h.add_string(hp.arch);
    for (int64_t v : {hp.n_layer, hp.n_embd, hp.n_vocab, hp.n_embd_head_k, hp.n_embd_head_v, hp.n_rot})
        h.add_value(v);
    for (int64_t il = 0; il < hp.n_layer; ++il) h.add_value(hp.n_head_kv(il));
    const gguf_set &f = m.files();
    constexpr size_t sample = 64;
    for (const gguf_tensor_info &t : f.tensors()) {
        h.add_string(t.name);
        h.add_value(int32_t(t.type));
        for (int64_t ne : t.ne) h.add_value(ne);
        if (const uint8_t *data = f.tensor_data(t)) {
            const size_t n = std::min(sample, t.nbytes);
            h.add(data, n);
            h.add(data + t.nbytes - n, n);
        }
    }
    return h.hash;
}

class byte_writer {
  public:
    void bytes(const void *p, size_t n) {
        const auto *b = static_cast<const uint8_t *>(p);
        out.insert(out.end(), b, b + n);
    }
    template <typename T>
    void value(T v) {
        bytes(&v, sizeof v);
    }
    void string(std::string_view s) {
        value(uint32_t(s.size()));
        bytes(s.data(), s.size());
    }
    std::vector<uint8_t> out;
};

// Reads what a byte_writer wrote, every read bounds-checked: a short input is a truncated state.
class byte_reader {
  public:
    byte_reader(std::span<const uint8_t> b, const std::string &origin) : b_(b), origin_(origin) {}
    const uint8_t *take(size_t n, const char *what) {
        if (b_.size() - at_ < n)
            throw error(origin_ + ": truncated: " + what + " needs " + std::to_string(n) +
                        " bytes at offset " + std::to_string(at_) + ", " + std::to_string(b_.size() - at_) +
                        " are left");
        const uint8_t *p = b_.data() + at_;
        at_ += n;
        return p;
    }
    template <typename T>
    T value(const char *what) {
        T v;
        std::memcpy(&v, take(sizeof v, what), sizeof v);
        return v;
    }
    std::string string(const char *what) {
        const auto n = value<uint32_t>(what);
        const uint8_t *p = take(n, what);
        return std::string(reinterpret_cast<const char *>(p), n);
    }
    // n items of `item` bytes each: the count is checked against what is left before anything is
    // allocated for it
    size_t count(uint64_t n, size_t item, const char *what) {
        if (item > 0 && n > (b_.size() - at_) / item)
            throw error(origin_ + ": truncated: " + std::to_string(n) + " " + what +
                        " announced, the data holds " + std::to_string((b_.size() - at_) / item));
        return size_t(n);
    }
    size_t left() const { return b_.size() - at_; }

  private:
    std::span<const uint8_t> b_;
    size_t at_ = 0;
    const std::string &origin_;
};

// Fills v (already sized) from the next bytes; an empty v takes nothing (memcpy must not see the
// null pointer an empty take may give).
template <class T>
void take_into(byte_reader &p, std::vector<T> &v, const char *what) {
    const uint8_t *src = p.take(v.size() * sizeof(T), what);
    if (!v.empty()) std::memcpy(v.data(), src, v.size() * sizeof(T));
}

std::vector<seq_id> seqs_of(uint64_t mask) {
    std::vector<seq_id> s;
    for (; mask != 0; mask &= mask - 1) s.push_back(seq_id(std::countr_zero(mask)));
    return s;
}

// The bytes of one cell's row of a KV cache tensor; 0 for a layer without one (a hybrid model's
// recurrent layers).
size_t kv_row_bytes(const tensor *t) {
    return t ? t->nb[1] : 0;
}

// A KV cache's part of the payload: its types and size, the saved cells (every used one, or the
// sequence's) with their positions, and per layer their K and V rows.
void save_kv(byte_writer &p, const kv_cache &kv, int32_t kind, seq_id s) {
    std::vector<uint32_t> saved;
    for (uint32_t c = 0; c < kv.size(); ++c) {
        const kv_cell &cell = kv.cells()[c];
        if (kind == kind_context ? !cell.empty() : cell.has_seq(s)) saved.push_back(c);
    }
    const size_t n_layer = kv.layers().size();
    p.value(int32_t(kv.type_k()));
    p.value(int32_t(kv.type_v()));
    p.value(uint32_t(n_layer));
    p.value(kv.size());
    p.value(uint32_t(saved.size()));
    for (uint32_t c : saved) {
        const kv_cell &cell = kv.cells()[c];
        if (kind == kind_context) {
            p.value(c);
            p.value(cell.seq_mask);
        }
        p.value(cell.pos);
    }
    for (size_t il = 0; il < n_layer; ++il) {
        const size_t k_row = kv_row_bytes(kv.layers()[il].k), v_row = kv_row_bytes(kv.layers()[il].v);
        p.value(uint64_t(k_row));
        p.value(uint64_t(v_row));
        if (k_row == 0) continue;  // a hybrid model's recurrent layer has no KV rows
        std::vector<uint8_t> row(std::max(k_row, v_row));
        for (uint32_t c : saved) {
            kv.read_k_row(il, c, row.data());
            p.bytes(row.data(), k_row);
        }
        for (uint32_t c : saved) {
            kv.read_v_row(il, c, row.data());
            p.bytes(row.data(), v_row);
        }
    }
}

// A recurrent model's part of the payload: per saved sequence its positions and, per layer, its
// conv and ssm state rows. kind_context saves every non-empty sequence with its id.
void save_recurrent(byte_writer &p, const recurrent_memory &rs, int32_t kind, seq_id s) {
    std::vector<seq_id> saved;
    for (seq_id q = 0; q < seq_id(rs.n_seq_max()); ++q)
        if (rs.seq_pos_max(q) >= 0 && (kind == kind_context || q == s)) saved.push_back(q);
    p.value(uint32_t(rs.layers().size()));
    p.value(rs.n_seq_max());
    p.value(uint32_t(saved.size()));
    for (seq_id q : saved) {
        if (kind == kind_context) p.value(q);
        p.value(rs.seq_pos_min(q));
        p.value(rs.seq_pos_max(q));
    }
    for (size_t il = 0; il < rs.layers().size(); ++il) {
        p.value(uint64_t(rs.conv_row_bytes(il)));
        p.value(uint64_t(rs.ssm_row_bytes(il)));
        if (rs.conv_row_bytes(il) > 0)
            for (seq_id q : saved) p.bytes(rs.conv_row(il, q), rs.conv_row_bytes(il));
        if (rs.ssm_row_bytes(il) > 0)
            for (seq_id q : saved) p.bytes(rs.ssm_row(il, q), rs.ssm_row_bytes(il));
    }
}

// What load_recurrent read and checked, applied only once the whole payload is read.
struct saved_recurrent {
    struct sequence {
        seq_id id = 0;
        llm_pos pos_min = -1, pos_max = -1;
    };
    std::vector<sequence> seqs;
    std::vector<std::pair<const uint8_t *, const uint8_t *>> rows;  // conv, ssm rows per layer
};

saved_recurrent load_recurrent(byte_reader &p, const recurrent_memory &rs, int32_t kind,
                               const std::function<void(const std::string &)> &fail) {
    saved_recurrent out;
    const auto n_layer = p.value<uint32_t>("the layer count");
    if (n_layer != rs.layers().size()) fail("saved " + std::to_string(n_layer) + " layers");
    const auto n_seq_max = p.value<uint32_t>("the sequence count");
    if (kind == kind_context && n_seq_max != rs.n_seq_max())
        fail("saved from a context of " + std::to_string(n_seq_max) + " sequences; this one has " +
             std::to_string(rs.n_seq_max()));
    const size_t n_saved =
        p.count(p.value<uint32_t>("the saved sequences"), kind == kind_context ? 12 : 8, "sequences");
    if (n_saved > (kind == kind_context ? rs.n_seq_max() : 1u))
        fail(std::to_string(n_saved) + " sequences saved, the context has " + std::to_string(rs.n_seq_max()));
    for (size_t i = 0; i < n_saved; ++i) {
        saved_recurrent::sequence q;
        if (kind == kind_context) {
            q.id = p.value<seq_id>("a sequence");
            if (q.id < 0 || uint32_t(q.id) >= rs.n_seq_max() || (i > 0 && q.id <= out.seqs.back().id))
                fail("sequence " + std::to_string(q.id) + " is out of order or outside the context");
        }
        q.pos_min = p.value<llm_pos>("a sequence");
        q.pos_max = p.value<llm_pos>("a sequence");
        if (q.pos_min < 0 || q.pos_max < q.pos_min)
            fail("a sequence holds positions [" + std::to_string(q.pos_min) + ", " +
                 std::to_string(q.pos_max) + "]");
        out.seqs.push_back(q);
    }
    for (size_t il = 0; il < n_layer; ++il) {
        const auto conv_row = p.value<uint64_t>("a row size"), ssm_row = p.value<uint64_t>("a row size");
        if (conv_row != rs.conv_row_bytes(il) || ssm_row != rs.ssm_row_bytes(il))
            fail("layer " + std::to_string(il) + " has states of another size");
        const uint8_t *conv = p.take(n_saved * size_t(conv_row), "the conv states");
        out.rows.emplace_back(conv, p.take(n_saved * size_t(ssm_row), "the ssm states"));
    }
    return out;
}

// What load_kv read and checked: the saved cells and, per layer, their K and V rows.
struct saved_kv {
    struct cell {
        uint32_t index = 0;
        uint64_t mask = 0;
        llm_pos pos = 0;
    };
    std::vector<cell> cells;
    std::vector<std::pair<const uint8_t *, const uint8_t *>> rows;  // K, V rows per layer
};

saved_kv load_kv(byte_reader &p, const kv_cache &kv, int32_t kind, uint32_t n_seq_max,
                 const std::function<void(const std::string &)> &fail) {
    saved_kv out;
    const auto type_k = dtype(p.value<int32_t>("the K cache type"));
    const auto type_v = dtype(p.value<int32_t>("the V cache type"));
    if (type_k != kv.type_k() || type_v != kv.type_v())
        fail(std::string("the saved KV cache is ") + type_name(type_k) + "/" + type_name(type_v) +
             " (K/V), this context's is " + type_name(kv.type_k()) + "/" + type_name(kv.type_v()));
    const auto n_layer = p.value<uint32_t>("the layer count");
    if (n_layer != kv.layers().size()) fail("saved " + std::to_string(n_layer) + " layers");
    const auto n_cells = p.value<uint32_t>("the cache size");
    if (kind == kind_context && n_cells != kv.size())
        fail("saved from a context of " + std::to_string(n_cells) + " cells; this one has " +
             std::to_string(kv.size()));
    const size_t cell_bytes = kind == kind_context ? 16 : 4;
    const size_t n_saved = p.count(p.value<uint32_t>("the cell count"), cell_bytes, "cells");
    if (n_saved > kv.size())
        fail(std::to_string(n_saved) + " cells saved, the cache has " + std::to_string(kv.size()));
    std::vector<saved_kv::cell> &cells = out.cells;
    cells.resize(n_saved);
    const uint64_t allowed = n_seq_max >= 64 ? ~uint64_t(0) : (uint64_t(1) << n_seq_max) - 1;
    for (size_t i = 0; i < n_saved; ++i) {
        saved_kv::cell &c = cells[i];
        if (kind == kind_context) {
            c.index = p.value<uint32_t>("a cell");
            c.mask = p.value<uint64_t>("a cell");
            if (c.index >= kv.size() || (i > 0 && c.index <= cells[i - 1].index))
                fail("cell index " + std::to_string(c.index) + " is out of order or outside the cache");
            if (c.mask == 0 || (c.mask & ~allowed) != 0)
                fail("a cell belongs to sequences outside [0, n_seq_max " + std::to_string(n_seq_max) + ")");
        }
        c.pos = p.value<llm_pos>("a cell");
        if (c.pos < 0) fail("a cell has negative position " + std::to_string(c.pos));
    }
    std::vector<std::pair<const uint8_t *, const uint8_t *>> &rows = out.rows;
    rows.resize(n_layer);
    for (size_t il = 0; il < n_layer; ++il) {
        const auto k_row = p.value<uint64_t>("a row size"), v_row = p.value<uint64_t>("a row size");
        if (k_row != kv_row_bytes(kv.layers()[il].k) || v_row != kv_row_bytes(kv.layers()[il].v))
            fail("layer " + std::to_string(il) + " has rows of another size");
        rows[il].first = p.take(n_saved * size_t(k_row), "the K rows");
        rows[il].second = p.take(n_saved * size_t(v_row), "the V rows");
    }
    return out;
}

void apply_kv(kv_cache &kv, const saved_kv &saved, int32_t kind, seq_id dst, uint32_t n_seq_max,
              const std::function<void(const std::string &)> &fail) {
    std::vector<uint32_t> slots;
    if (kind == kind_context) {
        kv.clear();
        for (const saved_kv::cell &c : saved.cells) slots.push_back(c.index);
    } else {
        if (dst < 0 || uint32_t(dst) >= n_seq_max)
            fail("sequence " + std::to_string(dst) + " is outside [0, n_seq_max " +
                 std::to_string(n_seq_max) + ")");
        std::vector<kv_cell> before = kv.snapshot();
        kv.seq_rm(dst, -1, -1);
        const std::vector<std::vector<seq_id>> seqs(saved.cells.size(), {dst});
        slots = kv.find_slots(seqs, false);
        if (slots.empty() && saved.cells.size() > 0 && kv.defrag() > 0) slots = kv.find_slots(seqs, false);
        if (slots.empty() && saved.cells.size() > 0) {
            kv.restore(std::move(before));
            fail(std::to_string(saved.cells.size()) + " cells are needed, " +
                 std::to_string(kv.size() - kv.used_cells()) + " are free");
        }
    }
    for (size_t i = 0; i < saved.cells.size(); ++i) {
        const std::vector<seq_id> seqs =
            kind == kind_context ? seqs_of(saved.cells[i].mask) : std::vector<seq_id>{dst};
        kv.assign(slots[i], saved.cells[i].pos, seqs);
        for (size_t il = 0; il < saved.rows.size(); ++il) {
            if (!kv.layers()[il].k) continue;  // a hybrid model's recurrent layer
            const size_t k_row = kv.layers()[il].k->nb[1], v_row = kv.layers()[il].v->nb[1];
            kv.write_k_row(il, slots[i], saved.rows[il].first + i * k_row);
            kv.write_v_row(il, slots[i], saved.rows[il].second + i * v_row);
        }
    }
}

void apply_recurrent(recurrent_memory &rs, const saved_recurrent &saved, int32_t kind, seq_id dst,
                     uint32_t n_ctx, const std::function<void(const std::string &)> &fail) {
    if (kind == kind_context) {
        rs.clear();
    } else {
        if (dst < 0 || uint32_t(dst) >= rs.n_seq_max())
            fail("sequence " + std::to_string(dst) + " is outside [0, n_seq_max " +
                 std::to_string(rs.n_seq_max()) + ")");
        const uint32_t held =
            rs.seq_pos_max(dst) >= 0 ? uint32_t(rs.seq_pos_max(dst) - rs.seq_pos_min(dst) + 1) : 0;
        const uint32_t needed =
            saved.seqs.empty() ? 0 : uint32_t(saved.seqs[0].pos_max - saved.seqs[0].pos_min + 1);
        if (rs.used_positions() - held + needed > n_ctx)
            fail(std::to_string(needed) + " positions are needed, " +
                 std::to_string(n_ctx - (rs.used_positions() - held)) + " of n_ctx are free");
        rs.seq_rm(dst, -1, -1);
    }
    for (size_t i = 0; i < saved.seqs.size(); ++i) {
        const seq_id q = kind == kind_context ? saved.seqs[i].id : dst;
        rs.set_positions(q, saved.seqs[i].pos_min, saved.seqs[i].pos_max);
        for (size_t il = 0; il < saved.rows.size(); ++il) {
            if (rs.conv_row_bytes(il) > 0)
                std::memcpy(rs.conv_row(il, q), saved.rows[il].first + i * rs.conv_row_bytes(il),
                            rs.conv_row_bytes(il));
            if (rs.ssm_row_bytes(il) > 0)
                std::memcpy(rs.ssm_row(il, q), saved.rows[il].second + i * rs.ssm_row_bytes(il),
                            rs.ssm_row_bytes(il));
        }
    }
}

}  // namespace

std::vector<uint8_t> inference_context::save_impl(int32_t kind, seq_id s, std::span<const token> tokens,
                                                  std::string_view user_data) {
    if (!model_.first_stage() || !model_.last_stage())
        throw error("saving state: this context is one stage of a pipeline and holds only some layers");
    kv_update();
    if (kind == kind_sequence && (s < 0 || uint32_t(s) >= params_.n_seq_max))
        throw error("seq_state_save: sequence " + std::to_string(s) + " is outside [0, n_seq_max " +
                    std::to_string(params_.n_seq_max) + ")");
    byte_writer p;  // the payload
    // a hybrid model saves both parts: the attention layers' cells, then the recurrent layers' states
    if (kv_) save_kv(p, *kv_, kind, s);
    if (rs_) save_recurrent(p, *rs_, kind, s);
    p.value(uint64_t(tokens.size()));
    p.bytes(tokens.data(), tokens.size_bytes());
    p.value(uint64_t(user_data.size()));
    p.bytes(user_data.data(), user_data.size());
    if (kind == kind_context) {
        p.value(uint32_t(output_batch_index_.size()));
        p.value(uint32_t(model_.hparams().n_output()));
        p.bytes(output_batch_index_.data(), output_batch_index_.size() * sizeof(int32_t));
        p.value(uint32_t(batch_output_row_.size()));
        p.bytes(batch_output_row_.data(), batch_output_row_.size() * sizeof(int32_t));
        p.bytes(logits_.data(), logits_.size() * sizeof(float));
    }

    fnv1a checksum;
    checksum.add(p.out.data(), p.out.size());
    byte_writer w;
    w.bytes(state_magic, sizeof state_magic);
    w.value(state_version);
    w.value(kind);
    w.value(model_identity(model_));
    w.string(model_.name());
    w.value(uint64_t(p.out.size()));
    w.value(checksum.hash);
    w.bytes(p.out.data(), p.out.size());
    return std::move(w.out);
}

inference_context::saved_state inference_context::load_impl(std::span<const uint8_t> bytes, int32_t kind,
                                                            seq_id dst, const std::string &origin) {
    auto fail = [&](const std::string &what) { throw error(origin + ": " + what); };
    if (!model_.first_stage() || !model_.last_stage())
        fail("this context is one stage of a pipeline and holds only some layers; state cannot be loaded");
    byte_reader r(bytes, origin);
    if (bytes.size() < sizeof state_magic || std::memcmp(bytes.data(), state_magic, sizeof state_magic) != 0)
        fail("not a weft state file (no WEFTSTAT magic)");
    r.take(sizeof state_magic, "the magic");
    const auto version = r.value<uint32_t>("the version");
    if (version != state_version)
        fail("state format version " + std::to_string(version) + " is not supported (this build reads " +
             std::to_string(state_version) + ")");
    const auto file_kind = r.value<int32_t>("the kind");
    if (file_kind != kind_context && file_kind != kind_sequence)
        fail("unknown kind " + std::to_string(file_kind));
    if (file_kind != kind)
        fail(std::string("holds ") + kind_name(file_kind) + ", not " + kind_name(kind) +
             (file_kind == kind_sequence ? " (load it as a sequence)" : " (load it as a whole context)"));
    const auto identity = r.value<uint64_t>("the model identity");
    const std::string saved_by = r.string("the model name");
    if (identity != model_identity(model_))
        fail("saved with another model ('" + saved_by + "'): this context runs '" + model_.name() + "' (" +
             model_.arch_name() + "), whose architecture, shapes or weights differ");
    const auto payload_size = r.value<uint64_t>("the payload size");
    const auto checksum = r.value<uint64_t>("the checksum");
    if (payload_size > r.left())
        fail("truncated: the header announces " + std::to_string(payload_size) + " bytes of data, " +
             std::to_string(r.left()) + " follow");
    if (payload_size < r.left())
        fail(std::to_string(r.left() - payload_size) + " unexpected bytes after the data");
    const uint8_t *payload = r.take(size_t(payload_size), "the payload");
    fnv1a sum;
    sum.add(payload, size_t(payload_size));
    if (sum.hash != checksum) fail("checksum mismatch: the state data is corrupt");

    byte_reader p(std::span<const uint8_t>(payload, size_t(payload_size)), origin);
    saved_kv kv_saved;
    saved_recurrent rs_saved;
    if (kv_) kv_saved = load_kv(p, *kv_, kind, params_.n_seq_max, fail);
    if (rs_) rs_saved = load_recurrent(p, *rs_, kind, fail);
    saved_state out;
    out.tokens.resize(p.count(p.value<uint64_t>("the token count"), sizeof(token), "tokens"));
    take_into(p, out.tokens, "the tokens");
    const size_t n_user = p.count(p.value<uint64_t>("the user data size"), 1, "bytes of user data");
    out.user_data.assign(reinterpret_cast<const char *>(p.take(n_user, "the user data")), n_user);
    std::vector<int32_t> out_index, out_row;
    std::vector<float> logits;
    if (kind == kind_context) {
        const size_t n_out = p.count(p.value<uint32_t>("the output count"), sizeof(int32_t), "outputs");
        const auto width = p.value<uint32_t>("the output width");
        if (width != model_.hparams().n_output()) fail("the saved logits rows have another width");
        out_index.resize(n_out);
        take_into(p, out_index, "the outputs");
        const size_t n_batch = p.count(p.value<uint32_t>("the batch size"), sizeof(int32_t), "batch rows");
        out_row.resize(n_batch);
        take_into(p, out_row, "the batch rows");
        for (int32_t i : out_index)
            if (i < 0 || size_t(i) >= n_batch) fail("an output row points outside its batch");
        for (int32_t row : out_row)
            if (row < -1 || row >= int32_t(n_out)) fail("a batch row points outside the outputs");
        logits.resize(p.count(uint64_t(n_out) * width, sizeof(float), "logits"));
        take_into(p, logits, "the logits");
    }
    if (p.left() != 0) fail(std::to_string(p.left()) + " unexpected bytes at the end of the data");

    // Everything is read and checked: now the context changes.
    kv_update();
    // (a hybrid's KV cells bound its positions: the states take what the cells took)
    if (kv_) apply_kv(*kv_, kv_saved, kind, dst, params_.n_seq_max, fail);
    if (rs_)
        apply_recurrent(*rs_, rs_saved, kind, dst, kv_ ? std::numeric_limits<uint32_t>::max() : params_.n_ctx,
                        fail);
    if (kind == kind_context) {
        output_batch_index_ = std::move(out_index);
        batch_output_row_ = std::move(out_row);
        logits_ = std::move(logits);
    }
    return out;
}

std::vector<uint8_t> inference_context::state_save(std::span<const token> tokens,
                                                   std::string_view user_data) {
    return save_impl(kind_context, -1, tokens, user_data);
}

inference_context::saved_state inference_context::state_load(std::span<const uint8_t> bytes,
                                                             const std::string &origin) {
    return load_impl(bytes, kind_context, -1, origin);
}

std::vector<uint8_t> inference_context::seq_state_save(seq_id s, std::span<const token> tokens,
                                                       std::string_view user_data) {
    return save_impl(kind_sequence, s, tokens, user_data);
}

inference_context::saved_state inference_context::seq_state_load(std::span<const uint8_t> bytes, seq_id dst,
                                                                 const std::string &origin) {
    return load_impl(bytes, kind_sequence, dst, origin);
}

namespace {

void write_state_file(const std::string &path, const std::vector<uint8_t> &bytes) {
    output_file out(path);
    out.write(bytes.data(), bytes.size());
    out.commit();
}

std::span<const uint8_t> as_bytes(const std::string &s) {
    return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

}  // namespace

void inference_context::state_save_file(const std::string &path, std::span<const token> tokens,
                                        std::string_view user_data) {
    write_state_file(path, state_save(tokens, user_data));
}

inference_context::saved_state inference_context::state_load_file(const std::string &path) {
    const std::string bytes = read_input_file(path);
    return state_load(as_bytes(bytes), "state file " + path);
}

void inference_context::seq_state_save_file(const std::string &path, seq_id s, std::span<const token> tokens,
                                            std::string_view user_data) {
    write_state_file(path, seq_state_save(s, tokens, user_data));
}

inference_context::saved_state inference_context::seq_state_load_file(const std::string &path, seq_id dst) {
    const std::string bytes = read_input_file(path);
    return seq_state_load(as_bytes(bytes), dst, "state file " + path);
}

}  // namespace weft
