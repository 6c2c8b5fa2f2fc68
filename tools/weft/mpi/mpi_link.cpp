// tools/weft/mpi/mpi_link.cpp — pipeline_link over MPI point-to-point messages.
#include "weft/mpi/mpi_link.h"

// the C API only (Open MPI's mpi.h would pull in the removed C++ bindings)
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "weft/core/error.h"

namespace weft::tool::mpi {

namespace {

void check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, text, &n);
    throw error(std::string("MPI ") + what + " failed: " + std::string(text, size_t(n)));
}

class mpi_link final : public pipeline_link {
  public:
    mpi_link() {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
    }
    int rank() const override { return rank_; }
    int n_ranks() const override { return size_; }
    void send(int to, int tag, std::span<const uint8_t> bytes) override {
        if (bytes.size() > size_t(INT32_MAX)) throw error("a pipeline message over 2 GiB");
        check(MPI_Send(bytes.data(), int(bytes.size()), MPI_BYTE, to, tag, MPI_COMM_WORLD), "send");
    }
    // Waits by probing and sleeping, not by MPI_Recv's busy poll: a rank waiting for its next
    // command or ubatch leaves the cores to the ranks that compute (they may share a machine).
    std::vector<uint8_t> recv(int from, int tag) override {
        MPI_Status st;
        int ready = 0;
        auto pause = std::chrono::microseconds(1);
        for (;;) {
            check(MPI_Iprobe(from, tag, MPI_COMM_WORLD, &ready, &st), "probe");
            if (ready) break;
            std::this_thread::sleep_for(pause);
            pause = std::min(pause * 2, std::chrono::microseconds(200));
        }
        int n = 0;
        check(MPI_Get_count(&st, MPI_BYTE, &n), "get_count");
        std::vector<uint8_t> bytes(static_cast<size_t>(n));
        check(MPI_Recv(bytes.data(), n, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "recv");
        return bytes;
    }

  private:
    int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<pipeline_link> init() {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "init");
    if (provided < MPI_THREAD_SERIALIZED)
        std::fprintf(stderr, "weft: MPI gives thread level %d only; calls stay on one thread at a time\n",
                     provided);
    return std::make_unique<mpi_link>();
}

void finalize() {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

void abort_job(int code) {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
}

std::vector<std::string> gather(const std::string &mine) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int n = int(mine.size());
    std::vector<int> sizes(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
    check(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "gather");
    int total = 0;
    for (int r = 0; r < size; ++r) {
        offsets[size_t(r)] = total;
        total += sizes[size_t(r)];
    }
    std::string all(size_t(rank == 0 ? total : 0), '\0');
    check(MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0,
                      MPI_COMM_WORLD),
          "gatherv");
    std::vector<std::string> out;
    if (rank == 0)
        for (int r = 0; r < size; ++r)
            out.push_back(all.substr(size_t(offsets[size_t(r)]), size_t(sizes[size_t(r)])));
    return out;
}

}  // namespace weft::tool::mpi
