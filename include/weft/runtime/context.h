// weft/runtime/context.h — inference_context: KV cache, batches, ubatches, graph reuse, decode, logits.
//
// Usage:
//   auto m = weft::model::load("model.gguf");
//   weft::inference_context ctx(*m, {.n_ctx = 2048});
//   auto toks = m->vocab().tokenize(prompt, true, true);
//   if (ctx.decode(weft::batch::from_tokens(toks)) != 0) ...;
//   const float *logits = ctx.get_logits_ith(-1);   // the last token's row, n_vocab floats
//
// The class is called inference_context because weft::context is the core's tensor arena.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/core/backend.h"
#include "weft/core/device.h"
#include "weft/core/graph.h"
#include "weft/core/type.h"
#include "weft/model/model.h"
#include "weft/runtime/batch.h"

namespace weft {

class kv_cache;
class recurrent_memory;
class sequence_memory;
class op_profile;
class pipeline_link;
struct kv_cell;

struct inference_params {
    uint32_t n_ctx = 0;           // KV cache cells; 0: the model's training context
    uint32_t n_batch = 2048;      // most tokens one decode call accepts
    uint32_t n_ubatch = 512;      // most tokens one graph computes (capped at n_batch)
    uint32_t n_seq_max = 1;       // distinct sequence ids (1..64)
    int32_t n_threads = 0;        // threads for single-token steps (0: the hardware's count)
    int32_t n_threads_batch = 0;  // threads for ubatches of more than one token (0: n_threads)
    // KV cache types of K and V: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or q5_1 (kv_cache_type_from_name
    // reads the names); a block type needs head sizes that are multiples of 32. Encoders keep f32.
    dtype type_k = dtype::f16;
    dtype type_v = dtype::f16;
    std::string device;  // the device computing and holding the KV cache (empty: the first, the CPU)
    // Polled between graph nodes; returning true aborts decode (it returns 2).
    std::function<bool()> abort_callback;
    // Observes graph nodes (see eval_callback in core/graph.h).
    eval_callback cb_eval;
    // This process's link to the other ranks when the model is one stage of a pipeline
    // (runtime/pipeline.h; the model loaded with that rank's model_params::layers); null: alone.
    // Rank 0's context drives the others; ranks > 0 run serve_pipeline_stage on theirs.
    pipeline_link *pipeline = nullptr;
    // LoRA adapters applied at run time (weft/model/lora.h); they must outlive the context.
    std::vector<lora_use> loras;
};

// The devices weft computes on, the built-in backends' registered first (the CPU is always the
// first one).
std::vector<device *> available_devices();
// The device named `name` (case-insensitive; empty: the first host device, the CPU). Throws weft::error
// naming an unknown device and listing the available ones.
device &select_device(const std::string &name);

// Timings since creation or the last perf_reset. A decode call of more than one token counts as
// prompt evaluation, a single-token call as generation.
struct inference_perf {
    double t_p_eval_ms = 0.0;
    int64_t n_p_eval = 0;  // tokens
    double t_eval_ms = 0.0;
    int64_t n_eval = 0;  // tokens
    int64_t n_graph_builds = 0;
    int64_t n_graph_reuses = 0;
    double t_graph_build_ms = 0.0;  // building and planning graphs (part of the times above)
    int64_t n_k_shifts = 0;         // graphs run to re-rotate cached keys after positions moved
    int64_t n_defrags = 0;          // KV cache compactions that made a batch fit
};

// Return codes of decode.
constexpr int decode_ok = 0;
constexpr int decode_no_kv_space = 1;  // nothing was changed; free cells (seq_rm) or a bigger n_ctx
constexpr int decode_aborted = 2;      // the abort callback stopped it; the batch was rolled back
constexpr int decode_invalid = -1;     // the batch is malformed; last_error() says why
constexpr int decode_failed = -2;      // computation failed

class inference_context {
  public:
    // Allocates the KV cache and reserves the compute memory of a worst-case ubatch (n_ubatch
    // tokens over the whole cache), so decoding does not grow memory. Throws weft::error on bad
    // parameters or a vocabulary-only model.
    inference_context(const model &m, const inference_params &params = {});
    ~inference_context();
    inference_context(const inference_context &) = delete;
    inference_context &operator=(const inference_context &) = delete;

    const weft::model &model() const { return model_; }
    pipeline_link *pipeline() const { return params_.pipeline; }
    // The device this context computes on.
    weft::device &device() const { return *device_; }
    uint32_t n_ctx() const;
    uint32_t n_batch() const { return params_.n_batch; }
    uint32_t n_ubatch() const { return params_.n_ubatch; }
    uint32_t n_seq_max() const { return params_.n_seq_max; }
    int32_t n_vocab() const;
    void set_n_threads(int32_t n_threads, int32_t n_threads_batch);

    // 0 ok, 1 no KV space (nothing changed), 2 aborted, -1 invalid batch, -2 computation failed.
    // Never throws for a bad batch: the message is in last_error().
    int decode(const batch &b);
    // The scales of the LoRA adapters the context was made with (inference_params::loras, in that
    // order). A change makes the next decode build its graph again (an adapter at 0 leaves it).
    // Throws weft::error on a count other than the adapters' or a scale that is not finite.
    void set_lora_scales(std::span<const float> scales);
    std::vector<float> lora_scales() const;
    const std::vector<lora_use> &loras() const { return params_.loras; }
    const std::string &last_error() const { return last_error_; }

    // Logits of the last decode call. i is an index into that batch (negative: counted back from
    // the last output, -1 being the last); a token that did not ask for output throws weft::error.
    const float *get_logits_ith(int32_t i) const;
    // An encoder's (bert) output row for batch index i: the last hidden state, n_embd floats (the
    // same rows get_logits_ith returns for such a model).
    const float *get_embeddings_ith(int32_t i) const { return get_logits_ith(i); }
    // All rows of the last decode call, in batch order of the tokens that asked for them.
    const float *get_logits() const { return logits_.data(); }
    int32_t n_outputs() const { return int32_t(output_batch_index_.size()); }

    // --- memory (p0 < 0: from 0; p1 < 0: to the end): what the context remembers of each sequence,
    // behind one interface (weft/runtime/memory.h): the KV cache of an attention model; a recurrent
    // model's (mamba) per-sequence states, with the reference engine's recurrent semantics: a state
    // holds all of its sequence's positions at once, so kv_seq_rm of only part of them returns false
    // and changes nothing (removing all of them, or none, succeeds), kv_seq_cp copies a whole state
    // (throws weft::error for a part), positions cannot move (can_shift() is false), and the
    // positions of all sequences together count against n_ctx as a KV cache's cells would; or a
    // hybrid model's both (its attention layers' KV cache and its recurrent layers' states), where a
    // call succeeds only as both parts allow and the KV cells count against n_ctx.
    const sequence_memory &memory() const { return *memory_; }
    // Whether the context keeps recurrent states (a recurrent or a hybrid model): its sequences
    // cannot drop part of their past, nor move positions.
    bool is_recurrent() const { return rs_ != nullptr; }
    bool kv_seq_rm(seq_id s, llm_pos p0, llm_pos p1);  // s < 0: every sequence
    void kv_seq_cp(seq_id src, seq_id dst, llm_pos p0, llm_pos p1);
    void kv_seq_keep(seq_id s);
    llm_pos kv_seq_pos_max(seq_id s) const;  // -1 when empty
    llm_pos kv_seq_pos_min(seq_id s) const;  // -1 when empty
    void kv_clear();
    uint32_t kv_used_cells() const;
    const kv_cache &kv() const;  // throws weft::error for a recurrent model, which has none

    // --- moving positions (a context shift: seq_rm the oldest tokens, seq_add -n to the rest).
    // kv_seq_add adds delta to the positions of s's cells in [p0, p1) (s < 0: every sequence's; a
    // cell that falls below 0 is dropped); kv_seq_div divides them by d >= 1. The cached keys are
    // rotated to their new positions by a graph of their own before the next decode (or kv_update),
    // so decoding after a shift gives the logits of a fresh decode at the new positions, to f16
    // rounding. Throws weft::error when the model cannot move positions (!can_shift) or d < 1.
    bool can_shift() const;
    void kv_seq_add(seq_id s, llm_pos p0, llm_pos p1, llm_pos delta);
    void kv_seq_div(seq_id s, llm_pos p0, llm_pos p1, int d);
    // Applies pending moves now (decode does it first). Throws weft::error when the graph fails.
    void kv_update();
    // Moves the used cells to the front of the cache (decode does it by itself when holes left by
    // seq_rm keep a batch from fitting after its sequences' cells). Returns the cells moved.
    uint32_t kv_defrag();

    // --- state. The whole context (every cell with the K and V rows of the used ones, and the last
    // decode's logits) or one sequence (its cells in order with their rows), plus the tokens they
    // hold and the caller's own bytes, as bytes or a file. Format: magic "WEFTSTAT", version, kind,
    // the model's identity (architecture, shapes, tensor names, types and a sample of their bytes)
    // and name, then a payload with its size and FNV-1a checksum. Loading checks all of it, the
    // cache type and the room, and throws weft::error naming the problem (another model, a truncated
    // or corrupt file, a cache of another size) without changing the context. Saving applies
    // pending position moves first. The logits after a load are bit for bit those after the save.
    struct saved_state {
        std::vector<token> tokens;
        std::string user_data;
    };
    std::vector<uint8_t> state_save(std::span<const token> tokens = {}, std::string_view user_data = {});
    saved_state state_load(std::span<const uint8_t> bytes, const std::string &origin = "state");
    std::vector<uint8_t> seq_state_save(seq_id s, std::span<const token> tokens = {},
                                        std::string_view user_data = {});
    // Replaces dst's cells with the saved sequence's, placed after the other sequences' cells.
    saved_state seq_state_load(std::span<const uint8_t> bytes, seq_id dst,
                               const std::string &origin = "state");
    // The same through a file, written to a temporary file and renamed over `path` when complete.
    void state_save_file(const std::string &path, std::span<const token> tokens = {},
                         std::string_view user_data = {});
    saved_state state_load_file(const std::string &path);
    void seq_state_save_file(const std::string &path, seq_id s, std::span<const token> tokens = {},
                             std::string_view user_data = {});
    saved_state seq_state_load_file(const std::string &path, seq_id dst);

    // --- performance and memory
    inference_perf perf() const { return perf_; }
    void perf_reset() { perf_ = {}; }
    // Times every graph node into `profile` (null: stop); the caller keeps it alive. With the
    // environment variable WEFT_PROFILE set, the context keeps a profile of its own and prints it
    // to stderr when destroyed.
    void set_profile(op_profile *profile);
    size_t kv_bytes() const;
    size_t compute_buffer_bytes() const;
    int compute_grow_count() const;  // times the compute buffer grew after the reservation (0 expected)

    // Builds the graph of one decode step of n_tokens tokens (one output row, attending over the
    // cells such a step would see) without running it, and hands it to fn. For `weft graph -m`.
    void visit_step_graph(int32_t n_tokens, const std::function<void(const graph &)> &fn) const;
    // The same graph described: node and leaf counts, nodes per op, planned compute memory; with a
    // dot stream, also written as Graphviz DOT.
    struct graph_report {
        size_t n_nodes = 0;
        size_t n_leafs = 0;
        std::vector<std::pair<std::string, int>> ops;  // op name, nodes
        size_t planned_bytes = 0;
        // where each node computes (g.nodes' order): its backend's name; and the runs of nodes on
        // one backend the graph splits into (1 without an offload device)
        std::vector<std::string> node_backends;
        int n_splits = 1;
        int n_copies = 0;
    };
    graph_report describe_graph(int32_t n_tokens, std::ostream *dot = nullptr) const;

  private:
    struct filled_batch;
    struct built_graph;
    struct runtime_state;
    struct shift_graph;
    int decode_impl(const batch &b);
    // Pipeline: sends a ubatch's status (and its hidden states) to the next rank; after a decode,
    // brings the last rank's result (its return code and the logits) to rank 0.
    void pass_on(int32_t status, std::span<const float> hidden = {});
    int exchange_result(int rc);
    // Rank 0 of a pipeline of several ranks: sends a command (built only then) to the others.
    bool drives_pipeline() const;
    void send_command(const std::vector<uint8_t> &command_and_args) const;
    template <class Command, class... Args>
    void forward(Command c, const Args &...args) const;  // context.cpp: its only user
    compute_status apply_kv_shift();
    void set_compute_threads(int n);
    std::vector<backend *> compute_backends() const;  // the scheduler's, in its order
    std::string cannot_shift_reason() const;          // why kv_seq_add and kv_seq_div refuse
    bool validate_and_fill(const batch &b, filled_batch &fb);
    void build_graph(built_graph &bg, const graph_shape &shape) const;
    void set_inputs(built_graph &bg, const filled_batch &fb, int32_t begin, int32_t n,
                    std::span<const uint32_t> cells, std::span<const int32_t> out_local);
    size_t graph_capacity() const;
    size_t graph_tensor_budget() const;  // the model's, and the products of the adapters
    std::vector<uint8_t> save_impl(int32_t kind, seq_id s, std::span<const token> tokens,
                                   std::string_view user_data);
    saved_state load_impl(std::span<const uint8_t> bytes, int32_t kind, seq_id dst,
                          const std::string &origin);

    const weft::model &model_;
    inference_params params_;
    weft::device *device_ = nullptr;
    std::unique_ptr<sequence_memory> memory_;  // what the context remembers of each sequence
    kv_cache *kv_ = nullptr;                   // its attention part (null for a recurrent model)
    recurrent_memory *rs_ = nullptr;           // its recurrent part (null for an attention model)
    std::unique_ptr<runtime_state> state_;     // backend, scheduler, reusable graph
    std::vector<float> logits_;                // n_outputs x n_vocab
    std::vector<int32_t> output_batch_index_;  // output row -> batch index
    std::vector<int32_t> batch_output_row_;    // batch index -> output row or -1
    std::string last_error_;
    bool owes_hidden_ = false;  // a ubatch started here whose status the next rank still waits for
    inference_perf perf_;
};

}  // namespace weft
