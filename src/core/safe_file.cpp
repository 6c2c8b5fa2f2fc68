// src/core/safe_file.cpp — output files through exclusive temporary files, removed on signals;
// inputs checked before they are read.
#include "weft/core/safe_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>

#include "weft/core/error.h"

namespace weft {

namespace {

std::string errno_text() {
    return std::strerror(errno);
}

// The temporary files in progress, for the signal handler: fixed slots of plain characters, as a
// handler may only call async-signal-safe functions (unlink, raise, sigaction).
constexpr int max_pending = 16;
struct pending_slot {
    std::atomic<bool> used{false};
    char path[4096] = {};
};
std::array<pending_slot, max_pending> pending;
std::mutex install_mutex;
bool handlers_installed = false;
struct sigaction previous_int {
}, previous_term{};

extern "C" void remove_pending_and_reraise(int sig) {
    for (auto &slot : pending)
        if (slot.used.load()) ::unlink(slot.path);
    // the previous disposition (default: terminate), then the signal again
    ::sigaction(sig, sig == SIGINT ? &previous_int : &previous_term, nullptr);
    ::raise(sig);
}

int register_pending(const std::string &temp) {
    {
        std::lock_guard lock(install_mutex);
        if (!handlers_installed) {
            struct sigaction action {};
            action.sa_handler = remove_pending_and_reraise;
            sigemptyset(&action.sa_mask);
            ::sigaction(SIGINT, nullptr, &previous_int);
            ::sigaction(SIGTERM, nullptr, &previous_term);
            // a handler someone else installed (the chat's Ctrl-C) stays theirs
            if (previous_int.sa_handler == SIG_DFL) ::sigaction(SIGINT, &action, nullptr);
            if (previous_term.sa_handler == SIG_DFL) ::sigaction(SIGTERM, &action, nullptr);
            handlers_installed = true;
        }
    }
    if (temp.size() >= sizeof pending[0].path) return -1;
    for (int i = 0; i < max_pending; ++i) {
        bool expected = false;
        if (pending[size_t(i)].used.load() ||
            !std::atomic_compare_exchange_strong(&pending[size_t(i)].used, &expected, true))
            continue;
        std::memcpy(pending[size_t(i)].path, temp.c_str(), temp.size() + 1);
        return i;
    }
    return -1;
}

void unregister_pending(int slot) {
    if (slot >= 0) pending[size_t(slot)].used.store(false);
}

std::string random_suffix() {
    static const char chars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::random_device rd;
    std::string s;
    for (int i = 0; i < 12; ++i) s += chars[rd() % (sizeof chars - 1)];
    return s;
}

}  // namespace

void require_regular_file(const std::string &path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return;
        throw error(path + ": cannot examine: " + errno_text());
    }
    if (S_ISLNK(st.st_mode) && ::stat(path.c_str(), &st) != 0) return;  // a dangling link is replaced
    if (!S_ISREG(st.st_mode))
        throw error(path +
                    ": exists and is not a regular file (a FIFO, device or directory); refusing to "
                    "replace it");
}

output_file::output_file(const std::string &path) : path_(path) {
    require_regular_file(path);
    const size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    // The name is registered for the signal handler before the file is created, so a signal
    // arriving between the two cannot leave the file behind.
    for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
        temp_ = dir + "." + base + "." + random_suffix() + ".tmp";
        slot_ = register_pending(temp_);
        fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd_ >= 0) break;
        const int open_errno = errno;
        unregister_pending(slot_);  // not ours (EEXIST) or not created
        slot_ = -1;
        errno = open_errno;
        if (open_errno != EEXIST) break;
    }
    if (fd_ < 0)
        throw error(path + ": cannot create a temporary file beside it (" + temp_ + "): " + errno_text());
}

output_file::~output_file() {
    if (fd_ >= 0) {
        ::close(fd_);
        ::unlink(temp_.c_str());
    }
    unregister_pending(slot_);
}

void output_file::write(const void *data, size_t n) {
    const char *p = static_cast<const char *>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd_, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) throw error(path_ + ": writing " + temp_ + " failed: " + errno_text());
        p += w;
        n -= size_t(w);
    }
}

void output_file::write_zeros(size_t n) {
    if (n == 0) return;
    if (n > size_t(std::numeric_limits<off_t>::max()) || ::lseek(fd_, off_t(n), SEEK_CUR) < 0)
        throw error(path_ + ": writing " + temp_ + " failed: cannot skip " + std::to_string(n) +
                    " bytes: " + errno_text());
}

void output_file::commit() {
    // A file that ends in skipped zeros (write_zeros) has its length only once it is set.
    const off_t end = ::lseek(fd_, 0, SEEK_CUR);
    if (end < 0 || ::ftruncate(fd_, end) != 0)
        throw error(path_ + ": writing " + temp_ + " failed: " + errno_text());
    if (::fsync(fd_) != 0) throw error(path_ + ": writing " + temp_ + " failed: " + errno_text());
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) {
        ::unlink(temp_.c_str());
        throw error(path_ + ": closing " + temp_ + " failed: " + errno_text());
    }
    // the target may have become something else since the check
    try {
        require_regular_file(path_);
    } catch (...) {
        ::unlink(temp_.c_str());
        throw;
    }
    if (::rename(temp_.c_str(), path_.c_str()) != 0) {
        const std::string why = errno_text();
        ::unlink(temp_.c_str());
        throw error(path_ + ": cannot rename " + temp_ + " into place: " + why);
    }
    unregister_pending(slot_);
    slot_ = -1;
}

std::string read_input_file(const std::string &path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw error(path + ": cannot open: " + errno_text());
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw error(path + ": not a regular file (a FIFO, device or directory?)");
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    std::string out;
    out.reserve(size_t(st.st_size));
    char buf[1 << 16];
    for (;;) {
        const ssize_t r = ::read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            ::close(fd);
            throw error(path + ": read failed: " + errno_text());
        }
        if (r == 0) break;
        out.append(buf, size_t(r));
    }
    ::close(fd);
    return out;
}

}  // namespace weft
