// weft/gguf/gguf_split.h — splitting a model into a set of GGUF parts and merging a set back into one
// file, in the layout the established gguf-split tool writes and reads (see gguf_set in gguf.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/gguf/gguf.h"

namespace weft {

// How tensors are grouped into parts, in file order. max_bytes > 0: a part takes tensors while their
// data (each padded to 32 bytes, as the established tool counts; metadata not counted) stays within
// max_bytes — a tensor larger than that gets a part of its own. Otherwise a part takes max_tensors.
struct gguf_split_limits {
    uint64_t max_bytes = 0;
    int64_t max_tensors = 128;
};

struct gguf_split_part {
    std::string path;         // "<prefix>-00001-of-00003.gguf"
    size_t first_tensor = 0;  // index into the input's tensors()
    size_t n_tensors = 0;
    uint64_t file_size = 0;  // the part's whole file, header and padding included
};

// "2G", "500M": a size in decimal gigabytes or megabytes (as the established tool reads
// --split-max-size). Throws weft::error naming the text on anything else.
uint64_t gguf_parse_split_size(const std::string &text);

// The parts `in` would be written as, named from out_prefix. Throws weft::error on bad limits.
std::vector<gguf_split_part> gguf_plan_split(const gguf_set &in, const std::string &out_prefix,
                                             const gguf_split_limits &limits);

// Writes the planned parts: the first holds every metadata key of `in` (less any split keys it had)
// and then split.no, split.tensors.count and split.count; the others hold only those three. Every
// part goes to a temporary file first; they are renamed into place only when all are complete, so a
// failure leaves no part behind. An output that is one of in's files (same inode) is refused.
void gguf_write_split(const gguf_set &in, const std::vector<gguf_split_part> &parts);

// Writes every tensor of the split set `in` (opened from its first part) into one file `out`, with the
// first part's metadata less the split keys (so a model split and merged again is the original file,
// byte for byte, when it had the layout this writer produces). Atomic; refuses an `out` that is one of
// the parts (same inode) and an `in` that is not a split set (no split.count).
void gguf_write_merged(const gguf_set &in, const std::string &out);

}  // namespace weft
