// tools/weft/mpi/mpi_link.h — the pipeline's messages over MPI (Open MPI), for `mpirun -np R weft ...`.
// Built only when CMake finds MPI (option WEFT_MPI); tools/weft/ranks.cpp is its one user.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "weft/runtime/pipeline.h"

namespace weft::tool::mpi {

// MPI_Init_thread (one thread at a time calls MPI) and the link of this rank over MPI_COMM_WORLD.
std::unique_ptr<pipeline_link> init();
void finalize();
// Ends every rank of the job (MPI_Abort) with exit code `code`.
[[noreturn]] void abort_job(int code);
// On rank 0: every rank's `mine`, in rank order (other ranks: empty). Collective.
std::vector<std::string> gather(const std::string &mine);

}  // namespace weft::tool::mpi
