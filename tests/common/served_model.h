// tests/common/served_model.h — `weft serve` run as a child process and spoken to over HTTP, for
// the server's tests (tests/tools/test_serve_cli.cpp) and the hostile-input ones (tests/hostile).
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "common/run_weft.h"

namespace weft::test {

namespace served_model_detail {
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// `weft serve ARGS` as a child process on a free loopback port (--port 0; the port is read from
// its "listening on" log line). The destructor always ends it: SIGTERM, then SIGKILL after 5 s.
class served_model {
  public:
    served_model(const fs::path &dir, const std::vector<std::string> &args)
        : err_(dir / ("serve-" + std::to_string(n_started_++) + ".err")) {
        // everything the child needs is made before fork: after it, only exec
        std::vector<std::string> all = {WEFT_BINARY, "serve"};
        all.insert(all.end(), args.begin(), args.end());
        std::vector<char *> argv;
        for (auto &a : all) argv.push_back(a.data());
        argv.push_back(nullptr);
        const std::string out_path = err_.string() + ".out";
        pid_ = ::fork();
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test process that crashed
            std::freopen(err_.c_str(), "w", stderr);
            std::freopen(out_path.c_str(), "w", stdout);
            ::execv(WEFT_BINARY, argv.data());
            std::_Exit(127);
        }
        if (pid_ < 0) return;
        const std::string listening = "listening on http://127.0.0.1:";
        const auto deadline = std::chrono::steady_clock::now() + 60s;
        while (std::chrono::steady_clock::now() < deadline && running()) {
            const std::string log = read_text_file(err_);
            const size_t at = log.find(listening);
            if (at != std::string::npos && log.find('\n', at) != std::string::npos) {
                port_ = std::atoi(log.c_str() + at + listening.size());
                break;
            }
            std::this_thread::sleep_for(20ms);
        }
        if (port_ <= 0) return;
        // listening: wait until /health answers (bounded as well)
        for (int attempt = 0; attempt < 250; ++attempt) {
            auto res = client().Get("/health");
            if (res && res->status == 200) {
                healthy_ = true;
                return;
            }
            std::this_thread::sleep_for(20ms);
        }
    }
    ~served_model() { stop(); }
    served_model(const served_model &) = delete;
    served_model &operator=(const served_model &) = delete;

    bool healthy() const { return healthy_; }
    // The server's resident memory (VmRSS), in KiB; -1 when it cannot be read.
    long rss_kib() const { return status_kib("VmRSS:"); }
    // The most it has had resident so far (VmHWM, the high-water mark), in KiB.
    long peak_rss_kib() const { return status_kib("VmHWM:"); }
    int port() const { return port_; }
    std::string log() const { return read_text_file(err_); }
    // Whether the log holds one of `texts`. The server writes a request's line after the response
    // went out, so this waits for it (5 s at most).
    bool log_has(std::initializer_list<std::string> texts) const {
        for (int i = 0; i < 250; ++i) {
            const std::string now = log();
            for (const auto &t : texts)
                if (now.find(t) != std::string::npos) return true;
            std::this_thread::sleep_for(20ms);
        }
        return false;
    }

    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_connection_timeout(5s);
        c.set_read_timeout(60s);
        c.set_write_timeout(10s);
        return c;
    }

    bool running() {
        if (pid_ <= 0 || exited_) return false;
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            exited_ = true;
            exit_status_ = status;
            return false;
        }
        return true;
    }

    // SIGTERM and a bounded wait; true when the server exited on its own with status 0.
    bool stop() {
        if (!running()) return exited_ && WIFEXITED(exit_status_) && WEXITSTATUS(exit_status_) == 0;
        ::kill(pid_, SIGTERM);
        for (int i = 0; i < 250 && running(); ++i) std::this_thread::sleep_for(20ms);
        if (running()) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, &exit_status_, 0);
            exited_ = true;
            return false;
        }
        return WIFEXITED(exit_status_) && WEXITSTATUS(exit_status_) == 0;
    }

  private:
    long status_kib(const std::string &field) const {
        std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
        std::string line;
        while (std::getline(f, line))
            if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + field.size());
        return -1;
    }

    static inline int n_started_ = 0;
    fs::path err_;
    pid_t pid_ = -1;
    int port_ = -1;
    bool healthy_ = false;
    bool exited_ = false;
    int exit_status_ = 0;
};

}  // namespace served_model_detail

using served_model_detail::served_model;

// A connected TCP socket to the server on 127.0.0.1 (-1 on failure).
inline int connect_to(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0) return fd;
    if (fd >= 0) ::close(fd);
    return -1;
}

// Everything the server sends on a connected socket until it closes it, or until `timeout_s`
// seconds pass without a byte; then the socket is closed.
inline std::string read_until_closed(int fd, int timeout_s) {
    timeval tv{timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string replies;
    char buf[16384];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) replies.append(buf, size_t(n));
    ::close(fd);
    return replies;
}

}  // namespace weft::test
