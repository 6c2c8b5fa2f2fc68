// tools/weft/ranks.cpp — rank setup for pipelines across processes (MPI when built with it).
#include "weft/ranks.h"

#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#if WEFT_HAVE_MPI
#include "weft/mpi/mpi_link.h"
#endif

namespace weft::tool {

namespace {

struct rank_state {
    bool initialized = false;
    std::unique_ptr<pipeline_link> link;  // null: alone
};

rank_state &state() {
    static rank_state s;
    return s;
}

// mpirun (Open MPI, or a PMI launcher) tells its processes the job's size in the environment.
bool launched_by_mpirun() {
    for (const char *v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

}  // namespace

int64_t block_count_of(const std::string &path) {
    gguf_open_options header_only;
    header_only.load_data = false;
    const std::unique_ptr<gguf_file> f = gguf_file::open(path, header_only);
    const std::optional<std::string> arch = f->get_string("general.architecture");
    if (!arch) throw error(path + ": no general.architecture");
    const std::optional<int64_t> n = f->get_int(*arch + ".block_count");
    if (!n || *n < 1) throw error(path + ": no positive " + *arch + ".block_count");
    return *n;
}

std::vector<double> parse_split_layers(const std::string &split) {
    std::vector<double> w;
    if (split.empty()) return w;
    std::stringstream in(split);
    std::string item;
    while (std::getline(in, item, ',')) {
        char *end = nullptr;
        const double v = std::strtod(item.c_str(), &end);
        if (item.empty() || *end != '\0' || !(v > 0.0))
            throw error("--split-layers '" + split + "': expected positive numbers separated by commas");
        w.push_back(v);
    }
    return w;
}

bool launched_as_several_ranks() {
    for (const char *v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
        if (const char *n = std::getenv(v)) return std::atoi(n) > 1;
    return false;
}

void init_ranks() {
    rank_state &s = state();
    if (s.initialized) return;
    s.initialized = true;
#if WEFT_HAVE_MPI
    if (launched_by_mpirun()) {
        s.link = mpi::init();
        if (s.link->n_ranks() == 1) s.link.reset();
    }
#else
    if (launched_by_mpirun() && std::getenv("OMPI_COMM_WORLD_SIZE") &&
        std::string(std::getenv("OMPI_COMM_WORLD_SIZE")) != "1")
        throw error(
            "started by mpirun, but this weft was built without MPI (install libopenmpi-dev and rebuild)");
#endif
}

int rank() {
    init_ranks();
    return state().link ? state().link->rank() : 0;
}

int n_ranks() {
    init_ranks();
    return state().link ? state().link->n_ranks() : 1;
}

void add_rank_options(CLI::App &app, rank_options &o) {
    app.add_option("--split-layers", o.split,
                   "under mpirun: the share of the model's blocks of each rank, e.g. 3,1 (default: even)");
    app.add_option(
        "--max-memory", o.max_memory,
        "the most memory this process's weights may take (e.g. 12G, 512M); under mpirun, per rank");
}

void rank_options::apply(model_params &mp) const {
    if (max_memory.empty()) return;
    char *end = nullptr;
    const double v = std::strtod(max_memory.c_str(), &end);
    double unit = 1.0;
    const std::string suffix = end ? std::string(end) : "";
    if (suffix == "K" || suffix == "k" || suffix == "KiB")
        unit = 1024.0;
    else if (suffix == "M" || suffix == "m" || suffix == "MiB")
        unit = 1024.0 * 1024.0;
    else if (suffix == "G" || suffix == "g" || suffix == "GiB")
        unit = 1024.0 * 1024.0 * 1024.0;
    else if (!suffix.empty())
        throw error("--max-memory '" + max_memory + "': expected a size such as 512M or 12G");
    if (!(v > 0.0)) throw error("--max-memory '" + max_memory + "': expected a positive size");
    mp.max_weight_bytes = size_t(v * unit);
}

size_t peak_resident_bytes() {
    std::FILE *f = std::fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmHWM: %zu kB", &kib) == 1) break;
    std::fclose(f);
    return kib * 1024;
}

std::unique_ptr<model> load_stage_model(const std::string &path, model_params mp, const rank_options &o) {
    init_ranks();
    o.apply(mp);
    const std::string &split = o.split;
    if (n_ranks() == 1) {
        if (!split.empty() && parse_split_layers(split).size() != 1)
            throw error("--split-layers '" + split +
                        "' names several ranks, but this process runs alone (use mpirun)");
        return model::load(path, mp);
    }
    std::unique_ptr<model> m;
    std::string failure;
    try {
        const int64_t n_layer = block_count_of(path);
        const std::vector<layer_span> plan = split_layers(n_layer, n_ranks(), parse_split_layers(split));
        mp.layers = plan[size_t(rank())];
        if (rank() == 0) {  // the placement, once
            std::string line;
            for (size_t r = 0; r < plan.size(); ++r)
                line += (r ? "; rank " : "rank ") + std::to_string(r) + " blocks [" +
                        std::to_string(plan[r].begin) + ", " + std::to_string(plan[r].end) + ")" +
                        (r == 0 ? " + token embedding" : "") + (r + 1 == plan.size() ? " + output" : "");
            std::fprintf(stderr, "weft: pipeline of %d ranks: %s; each holds its blocks' KV cache\n",
                         n_ranks(), line.c_str());
        }
        m = model::load(path, mp);
        std::fprintf(stderr, "weft: rank %d of %d: blocks [%lld, %lld) of %lld\n", rank(), n_ranks(),
                     (long long)mp.layers.begin, (long long)mp.layers.end, (long long)n_layer);
        // Open MPI binds each of 2 ranks to one core: its threads would then share that core
        cpu_set_t allowed;
        const unsigned n_cpus = std::thread::hardware_concurrency();
        if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && unsigned(CPU_COUNT(&allowed)) < n_cpus)
            std::fprintf(stderr,
                         "weft: rank %d may use %d of the machine's %u CPUs (mpirun binds ranks to cores): "
                         "keep -t at most %d, or start with mpirun --bind-to none\n",
                         rank(), CPU_COUNT(&allowed), n_cpus, CPU_COUNT(&allowed));
    } catch (const std::exception &e) {
        failure = e.what();
        if (failure.empty()) failure = "failed";
    }
#if WEFT_HAVE_MPI
    const std::vector<std::string> all = mpi::gather(failure);
    std::string report;
    for (size_t r = 0; r < all.size(); ++r)
        if (!all[r].empty())
            report += (report.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + all[r]);
    if (rank() == 0 && !report.empty()) throw error(report);
    if (!failure.empty()) {
        // rank 0 prints the report and ends the job, which stops this rank too; aborting here first
        // could kill rank 0 before its message is out. The wait is only a backstop.
        std::this_thread::sleep_for(std::chrono::seconds(30));
        abort_ranks(1);
    }
#endif
    return m;
}

bool follow_rank_zero(const model &m, inference_params &ip) {
    init_ranks();
    pipeline_link *link = state().link.get();
    if (!link) return false;
    if (link->rank() == 0) {
        ip.pipeline = link;
        return false;
    }
    serve_pipeline_stage(m, *link);
    std::fprintf(stderr, "weft: rank %d of %d: blocks [%lld, %lld), peak resident memory %.1f MiB\n",
                 link->rank(), link->n_ranks(), (long long)m.layers().begin, (long long)m.layers().end,
                 double(peak_resident_bytes()) / (1024.0 * 1024.0));
    return true;
}

void end_job_after_error(int code) {
#if WEFT_HAVE_MPI
    if (state().link) mpi::abort_job(code);
#endif
    (void)code;
}

void abort_ranks(int code) {
    end_job_after_error(code);
    std::exit(code);
}

void finish_ranks() {
#if WEFT_HAVE_MPI
    if (state().initialized && launched_by_mpirun()) mpi::finalize();
#endif
}

}  // namespace weft::tool
