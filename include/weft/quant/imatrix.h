// weft/quant/imatrix.h — importance matrices: per weight matrix, the mean of the squared activations
// each of its input columns saw, which the i-quant and K-quant quantizers use as weights of their
// rounding error. File format: the reference engine's legacy imatrix file (what its quantizer reads
// with --imatrix):
//   int32 n_entries; per entry: int32 name length, the name, int32 ncall, int32 nval, nval floats
//   (mean of x^2 times ncall); then int32 chunks and int32 length + the dataset's file name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace weft {

struct imatrix_entry {
    int32_t ncall = 0;          // chunks it was seen in
    std::vector<float> values;  // mean of x^2 per input column, times ncall (as stored)
};

struct importance_matrix {
    std::map<std::string, imatrix_entry> entries;  // by weight tensor name ("blk.0.attn_q.weight")
    int32_t chunks = 0;
    std::string dataset;  // the text file it was computed from

    // The importance of tensor `name`'s columns (values / ncall), or null when it has no entry.
    const std::vector<float> *importance(const std::string &name) const;

  private:
    mutable std::map<std::string, std::vector<float>> normalized_;
};

// Reads a legacy imatrix file; throws weft::error naming the file and the problem (truncated,
// impossible counts, a name or value count beyond the file's size).
importance_matrix read_imatrix(const std::string &path);
// Writes it through a temporary file renamed over path once complete (weft/core/safe_file.h).
void write_imatrix(const std::string &path, const importance_matrix &m);

}  // namespace weft
