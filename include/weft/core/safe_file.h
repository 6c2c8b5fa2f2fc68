// weft/core/safe_file.h — files weft writes and reads on a user's behalf, safely: an output is
// written to an unpredictably named temporary file beside it (created exclusively, never through a
// symbolic link), flushed to disk and renamed over the target only when complete; it is removed on
// error and on SIGINT / SIGTERM, and a target that exists but is not a regular file (a FIFO, a
// device, a directory) is refused. Inputs are opened without blocking and refused unless regular.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace weft {

class output_file {
  public:
    // Creates the temporary file. Throws weft::error naming `path` when the target exists and is not
    // a regular file, or the temporary file cannot be created.
    explicit output_file(const std::string &path);
    ~output_file();  // removes the temporary file unless commit() ran
    output_file(const output_file &) = delete;
    output_file &operator=(const output_file &) = delete;

    // Appends n bytes; throws weft::error on a failed write (disk full ...).
    void write(const void *data, size_t n);
    void write(const std::string &s) { write(s.data(), s.size()); }
    // Appends n zero bytes without writing them (a hole in the file: padding to a hostile
    // alignment of 2 GiB costs a seek, not 2 GiB of writes); throws weft::error if the seek fails.
    void write_zeros(size_t n);
    // Flushes to disk, closes, and renames the temporary file over the target.
    void commit();

    const std::string &path() const { return path_; }
    const std::string &temp_path() const { return temp_; }

  private:
    std::string path_, temp_;
    int fd_ = -1;
    int slot_ = -1;  // in the list the signal handler removes
};

// Throws weft::error when `path` exists and is not a regular file (a FIFO, device or directory),
// or cannot be examined. Opens nothing.
void require_regular_file(const std::string &path);

// The whole of a regular file as bytes: opened without blocking (a FIFO given by mistake fails at
// once instead of waiting for a writer), refused unless regular, then read. Throws weft::error.
std::string read_input_file(const std::string &path);

}  // namespace weft
