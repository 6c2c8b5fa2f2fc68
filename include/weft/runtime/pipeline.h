// weft/runtime/pipeline.h — one model's blocks split between processes (ranks) as a pipeline.
//
// Each rank loads only its stage's blocks (model_params::layers) and keeps only their KV cache;
// rank 0 owns tokenization, sampling and I/O. Rank 0's inference_context drives the others: every
// decode and every KV cache edit is sent to all ranks as a command, each rank carries it out on its
// own layers, the hidden states of each ubatch go from rank r to rank r + 1 as soon as they are
// computed (so the ubatches of one prompt flow through the ranks concurrently), and the last rank
// sends the logits back to rank 0. A failure on any rank travels down the pipeline with the hidden
// states and comes back to rank 0 as the decode's result: no rank waits forever.
//
// The transport is a pipeline_link: in-process queues (make_local_pipeline, one thread per rank),
// or one over MPI between processes and machines. The logits are bit-identical to a single
// process's (tests/runtime/test_pipeline.cpp: every fixture model on 2 and 3 ranks).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "weft/model/model.h"

namespace weft {

class inference_context;

// One rank's end of the messages between ranks.
class pipeline_link {
  public:
    virtual ~pipeline_link() = default;
    virtual int rank() const = 0;
    virtual int n_ranks() const = 0;
    // Blocking; the messages from one rank to another with one tag arrive in the order sent.
    virtual void send(int to, int tag, std::span<const uint8_t> bytes) = 0;
    virtual std::vector<uint8_t> recv(int from, int tag) = 0;
};

// n_ranks links whose messages go through in-process queues (one thread per rank).
std::vector<std::unique_ptr<pipeline_link>> make_local_pipeline(int n_ranks);

// The blocks of each of n_ranks stages, in rank order: in proportion to `weights` (one per rank,
// e.g. {3, 1}: three quarters on rank 0), evenly when empty, the remainder to the first stages.
// Throws weft::error when a stage would get no block or the weights are not one positive value per
// rank.
std::vector<layer_span> split_layers(int64_t n_layer, int n_ranks, std::span<const double> weights = {});

// Ranks > 0, with the model loaded with this rank's blocks: makes the stage's context when rank 0
// makes its own (with the same parameters), carries out rank 0's commands on it, and returns when
// rank 0's context ends. Throws weft::error on a malformed message.
void serve_pipeline_stage(const model &m, pipeline_link &link);

}  // namespace weft
