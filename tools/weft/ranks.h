// tools/weft/ranks.h — a command's place in a pipeline across processes: `mpirun -np R weft CMD ...`
// splits the model's blocks between the R ranks (runtime/pipeline.h). Every rank parses the same
// command line and loads only its blocks; rank 0 runs the command (tokenizing, sampling, printing),
// the others follow its context until it ends and exit 0. Without mpirun (or in a build without
// MPI) the process is rank 0 of 1 and nothing changes.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/pipeline.h"

namespace weft::tool {

// The number of blocks of the model in a GGUF file, from its header alone (general.architecture,
// <arch>.block_count): what a split is computed from before any rank loads its share.
int64_t block_count_of(const std::string &path);

// "3,1" -> {3, 1}: the --split-layers weights (empty text: none); weft::error on a bad list.
std::vector<double> parse_split_layers(const std::string &split);

// Whether mpirun started this process as one of several (from its environment, before MPI starts).
bool launched_as_several_ranks();

// Starts MPI when the process was launched by mpirun (weft built with MPI); idempotent.
void init_ranks();
int rank();
int n_ranks();

// What a command needs to run as one rank of a pipeline: --split-layers, the share of the blocks
// of each rank, e.g. "3,1" (default: even); --max-memory, the most weight bytes per rank.
struct rank_options {
    std::string split;
    std::string max_memory;  // "12G", "512M", "1048576"
    void apply(model_params &mp) const;
};
void add_rank_options(CLI::App &app, rank_options &o);

// The model with this rank's blocks ("3,1" style split, empty: even). Every rank loads, then rank 0
// hears about every rank's failure: it throws naming the rank and its error, the others exit 1.
std::unique_ptr<model> load_stage_model(const std::string &path, model_params mp, const rank_options &o);
// The peak resident memory of this process (VmHWM), in bytes; 0 when unknown.
size_t peak_resident_bytes();

// Rank 0 (or alone): sets ip.pipeline and returns false, the command goes on. Ranks > 0: follow rank
// 0's context until it ends and return true: the command exits 0 without output.
bool follow_rank_zero(const model &m, inference_params &ip);

// After an error on any rank of a pipeline: ends the whole job (no rank waits forever); alone it
// returns (end_job_after_error) or exits (abort_ranks).
void end_job_after_error(int code);
[[noreturn]] void abort_ranks(int code);
// Ends MPI at a normal exit (every rank).
void finish_ranks();

}  // namespace weft::tool
