// tools/weft/cmd_gguf_split.cpp — `weft gguf-split`: a model into a split set of GGUF parts, or a set
// merged back into one file (the established gguf-split tool's layout and names).
#include <CLI/CLI.hpp>

#include <cinttypes>
#include <cstdio>
#include <string>

#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/gguf/gguf_split.h"

namespace {

int gguf_split_main(int argc, char **argv) {
    CLI::App app{
        "Split a GGUF model into a set of parts, or merge a set back into one file.\n"
        "  weft gguf-split [--split-max-size N(M|G) | --split-max-tensors N] [--dry-run] IN OUT\n"
        "      writes OUT-00001-of-0000N.gguf ... OUT-0000N-of-0000N.gguf: the first part holds all the\n"
        "      metadata, every part some of the tensors (in file order) and the keys split.no,\n"
        "      split.count and split.tensors.count, as the established gguf-split tool writes them.\n"
        "  weft gguf-split --merge FIRST OUT\n"
        "      FIRST is the set's NAME-00001-of-0000N.gguf; writes one file OUT (without the split keys).\n"
        "Every command that takes -m loads a set from its first part. IN may itself be the first part of\n"
        "a set. Outputs go to temporary files renamed into place only when all are complete, so a\n"
        "failure leaves nothing behind; an output that is one of the inputs is refused.",
        "weft gguf-split"};
    std::string in, out, max_size;
    int64_t max_tensors = 0;
    bool merge = false, split = false, dry_run = false;
    app.add_flag("--split", split, "split IN into parts (the default)");
    app.add_flag("--merge", merge, "merge the set whose first part is IN into one file OUT");
    auto *size_opt = app.add_option("--split-max-size", max_size,
                                    "most tensor bytes per part, in decimal M or G (500M, 2G); a tensor "
                                    "larger than that gets a part of its own");
    auto *tensors_opt =
        app.add_option("--split-max-tensors", max_tensors, "most tensors per part (default 128)");
    size_opt->excludes(tensors_opt);
    app.add_flag("--dry-run", dry_run, "print the parts that would be written, write nothing");
    app.add_option("in", in, "the model (split), or the first part of a set (--merge)")->required();
    app.add_option("out", out, "the prefix of the parts' names (split), or the merged file (--merge)")
        ->required();
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
    if (merge && split) throw weft::error("either --split or --merge, not both");
    if (merge && (!max_size.empty() || tensors_opt->count() > 0))
        throw weft::error("--split-max-size and --split-max-tensors apply to splitting, not to --merge");

    const auto set = weft::gguf_set::open(in);  // every part validated, as a load would
    if (merge) {
        std::fprintf(stderr, "weft gguf-split: merging %zu parts, %zu tensors of %s\n", set->n_parts(),
                     set->tensors().size(), in.c_str());
        if (dry_run) return 0;
        weft::gguf_write_merged(*set, out);
        std::fprintf(stderr, "weft gguf-split: wrote %s\n", out.c_str());
        return 0;
    }

    weft::gguf_split_limits limits;
    if (!max_size.empty()) limits.max_bytes = weft::gguf_parse_split_size(max_size);
    if (tensors_opt->count() > 0) limits.max_tensors = max_tensors;
    const std::vector<weft::gguf_split_part> parts = weft::gguf_plan_split(*set, out, limits);
    // the established tool's plan lines
    std::printf("n_split: %zu\n", parts.size());
    for (size_t i = 0; i < parts.size(); ++i)
        std::printf("split %05zu: n_tensors = %zu, total_size = %" PRIu64 "M\n", i + 1, parts[i].n_tensors,
                    parts[i].file_size / 1000 / 1000);
    if (dry_run) return 0;
    weft::gguf_write_split(*set, parts);
    for (const auto &part : parts) std::printf("wrote %s\n", part.path.c_str());
    std::fprintf(stderr, "weft gguf-split: %zu parts written with a total of %zu tensors\n", parts.size(),
                 set->tensors().size());
    return 0;
}

const bool registered_gguf_split = weft::tool::register_command(
    {"gguf-split", "split a GGUF model into a set of parts, or merge a set into one file", &gguf_split_main});

}  // namespace
