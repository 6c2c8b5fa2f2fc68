// src/runtime/pipeline.cpp — layer splits, in-process links, the stage loop of ranks > 0, the messages.
#include "weft/runtime/pipeline.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>

#include "runtime/pipeline_protocol.h"
#include "weft/core/error.h"
#include "weft/runtime/context.h"

namespace weft {

namespace pipeline_protocol {

const uint8_t *message_reader::take(size_t n) {
    if (b_.size() - at_ < n)
        throw error("pipeline message truncated: " + std::to_string(n) + " bytes wanted at offset " +
                    std::to_string(at_) + " of " + std::to_string(b_.size()));
    const uint8_t *p = b_.data() + at_;
    at_ += n;
    return p;
}

std::vector<uint8_t> encode_batch(const batch &b) {
    message_writer w;
    w.array(std::span<const token>(b.tokens)).array(std::span<const float>(b.embd)).value(b.n_embd_tokens);
    w.array(std::span<const llm_pos>(b.pos)).array(std::span<const int8_t>(b.output));
    w.value(uint64_t(b.seq_ids.size()));
    for (const std::vector<seq_id> &s : b.seq_ids) w.array(std::span<const seq_id>(s));
    return std::move(w.bytes);
}

batch decode_batch(message_reader &r) {
    batch b;
    b.tokens = r.array<token>();
    b.embd = r.array<float>();
    b.n_embd_tokens = r.value<int32_t>();
    b.pos = r.array<llm_pos>();
    b.output = r.array<int8_t>();
    const auto n = r.value<uint64_t>();
    if (n > r.rest().size())
        throw error("pipeline message truncated: " + std::to_string(n) + " sequence lists");
    b.seq_ids.resize(size_t(n));
    for (std::vector<seq_id> &s : b.seq_ids) s = r.array<seq_id>();
    return b;
}

}  // namespace pipeline_protocol

namespace {

// The queues of every (from, to, tag), shared by the n links of one process.
struct local_exchange {
    std::mutex m;
    std::condition_variable cv;
    std::map<std::tuple<int, int, int>, std::deque<std::vector<uint8_t>>> queues;
};

class local_link final : public pipeline_link {
  public:
    local_link(std::shared_ptr<local_exchange> x, int rank, int n) : x_(std::move(x)), rank_(rank), n_(n) {}
    int rank() const override { return rank_; }
    int n_ranks() const override { return n_; }
    void send(int to, int tag, std::span<const uint8_t> bytes) override {
        {
            std::lock_guard lock(x_->m);
            x_->queues[{rank_, to, tag}].emplace_back(bytes.begin(), bytes.end());
        }
        x_->cv.notify_all();
    }
    std::vector<uint8_t> recv(int from, int tag) override {
        std::unique_lock lock(x_->m);
        auto &q = x_->queues[{from, rank_, tag}];
        x_->cv.wait(lock, [&] { return !q.empty(); });
        std::vector<uint8_t> msg = std::move(q.front());
        q.pop_front();
        return msg;
    }

  private:
    std::shared_ptr<local_exchange> x_;
    int rank_, n_;
};

}  // namespace

std::vector<std::unique_ptr<pipeline_link>> make_local_pipeline(int n_ranks) {
    if (n_ranks < 1) throw error("a pipeline needs at least one rank");
    auto x = std::make_shared<local_exchange>();
    std::vector<std::unique_ptr<pipeline_link>> links;
    for (int r = 0; r < n_ranks; ++r) links.push_back(std::make_unique<local_link>(x, r, n_ranks));
    return links;
}

std::vector<layer_span> split_layers(int64_t n_layer, int n_ranks, std::span<const double> weights) {
    if (n_ranks < 1) throw error("a pipeline needs at least one rank");
    std::vector<double> w(weights.begin(), weights.end());
    if (w.empty()) w.assign(size_t(n_ranks), 1.0);
    if (int64_t(w.size()) != n_ranks)
        throw error("--split-layers has " + std::to_string(w.size()) + " values for " +
                    std::to_string(n_ranks) + " ranks");
    for (double v : w)
        if (!(v > 0.0)) throw error("--split-layers values must be positive");
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    // stage r ends at round(n_layer * (w_0 + ... + w_r) / total); without weights each stage gets
    // n_layer / n_ranks blocks and the first ones one more each for the remainder
    std::vector<layer_span> spans;
    double sum = 0.0;
    int64_t begin = 0;
    for (int r = 0; r < n_ranks; ++r) {
        sum += w[size_t(r)];
        const int64_t end = r == n_ranks - 1  ? n_layer
                            : weights.empty() ? begin + n_layer / n_ranks + (r < n_layer % n_ranks ? 1 : 0)
                                              : int64_t(double(n_layer) * sum / total + 0.5);
        if (end <= begin)
            throw error("the model's " + std::to_string(n_layer) + " blocks cannot be split so that rank " +
                        std::to_string(r) + " of " + std::to_string(n_ranks) + " gets one");
        spans.push_back({begin, end});
        begin = end;
    }
    return spans;
}

void serve_pipeline_stage(const model &m, pipeline_link &link) {
    using namespace pipeline_protocol;
    if (link.rank() == 0)
        throw error("serve_pipeline_stage: rank 0 drives the pipeline, it does not serve a stage");
    std::unique_ptr<inference_context> ctx;
    auto context = [&]() -> inference_context & {
        if (!ctx) throw error("pipeline: rank 0 sent a command before opening its context");
        return *ctx;
    };
    for (;;) {
        const std::vector<uint8_t> msg = link.recv(0, tag_command);
        message_reader r(msg);
        const auto cmd = command(r.value<int32_t>());
        // rank 0 sends an edit only after it succeeded there; the same edit succeeds here
        switch (cmd) {
            case command::open: {
                inference_params p;
                std::tie(p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max) =
                    r.values<uint32_t, uint32_t, uint32_t, uint32_t>();
                std::tie(p.n_threads, p.n_threads_batch) = r.values<int32_t, int32_t>();
                const auto [type_k, type_v] = r.values<int32_t, int32_t>();
                p.type_k = dtype(type_k);
                p.type_v = dtype(type_v);
                p.pipeline = &link;
                ctx.reset();
                ctx = std::make_unique<inference_context>(m, p);
                break;
            }
            case command::close:
                return;
            case command::decode:
                context().decode(decode_batch(r));  // the result reaches rank 0 from the last rank
                break;
            case command::seq_rm:
                std::apply([&](auto... a) { context().kv_seq_rm(a...); },
                           r.values<seq_id, llm_pos, llm_pos>());
                break;
            case command::seq_cp:
                std::apply([&](auto... a) { context().kv_seq_cp(a...); },
                           r.values<seq_id, seq_id, llm_pos, llm_pos>());
                break;
            case command::seq_keep:
                context().kv_seq_keep(r.value<seq_id>());
                break;
            case command::seq_add:
                std::apply([&](auto... a) { context().kv_seq_add(a...); },
                           r.values<seq_id, llm_pos, llm_pos, llm_pos>());
                break;
            case command::seq_div:
                std::apply([&](auto... a) { context().kv_seq_div(a...); },
                           r.values<seq_id, llm_pos, llm_pos, int32_t>());
                break;
            case command::clear:
                context().kv_clear();
                break;
            case command::defrag:
                context().kv_defrag();
                break;
            case command::update:
                context().kv_update();
                break;
            default:
                throw error("pipeline: unknown command " + std::to_string(int32_t(cmd)) + " from rank 0");
        }
    }
}

}  // namespace weft
