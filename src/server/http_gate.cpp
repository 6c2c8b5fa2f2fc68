// src/server/http_gate.cpp — see http_gate.h.
#include "server/http_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>

#include "weft/core/error.h"

namespace weft::server {

using clock_type = std::chrono::steady_clock;

// What the gate must know of a head: how many body bytes follow, or that a worker must read them
// (chunked, "Expect: 100-continue", anything unusual: httplib then answers as it does).
struct gate_head_facts {
    bool body_by_worker = false;
    bool too_large = false;  // a Content-Length over max_body: the gate answers 413 itself
    size_t body = 0;
};

struct gated_server::connection {
    int fd = -1;
    SSL *ssl = nullptr;               // HTTPS: the TLS session over fd
    bool handshake_done = false;      // HTTPS: the session is established
    bool want_write = false;          // HTTPS: the session waits for the socket to take bytes
    std::string buffer;               // bytes read, not yet consumed by a request
    size_t consumed = 0;              // of buffer, by the request a worker runs
    clock_type::time_point since;     // entered the gate (eviction picks the smallest)
    clock_type::time_point deadline;  // the gate closes it then
    bool started = false;             // bytes of the next request have arrived
    bool head_done = false;           // and its head is complete
    bool body_buffered = false;       // the whole request is in buffer (a worker reads no socket)
    size_t request_bytes = 0;         // its length there: what follows is the next request
    size_t requests = 0;
    size_t head_bytes = 0;    // the head's length, once head_done
    gate_head_facts facts;    // what it says of the body, once head_done
    bool discarding = false;  // answered 413: the body still arriving is read and dropped
    size_t discard_left = 0;  // of it, by its Content-Length
};

namespace {

int remaining_ms(clock_type::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    return int(std::clamp<int64_t>(left.count(), 0, std::numeric_limits<int>::max()));
}

// Waits for `events` on fd until the deadline; true when they came.
bool wait_for(int fd, short events, clock_type::time_point deadline) {
    for (;;) {
        pollfd p{fd, events, 0};
        const int r = ::poll(&p, 1, remaining_ms(deadline));
        if (r > 0) return true;
        if (r == 0 || errno != EINTR) return false;
    }
}

// Reads or writes the connection's bytes as recv / send do (with MSG_NOSIGNAL): through its TLS
// session when it has one, where a session that waits for the socket sets errno to EAGAIN (and
// want_write when it waits to write) and a closed session reads 0.
ssize_t tls_result(gated_server::connection &c, int n) {
    if (n > 0) return n;
    switch (SSL_get_error(c.ssl, n)) {
        case SSL_ERROR_WANT_READ:
            errno = EAGAIN;
            return -1;
        case SSL_ERROR_WANT_WRITE:
            c.want_write = true;
            errno = EAGAIN;
            return -1;
        case SSL_ERROR_ZERO_RETURN:
            return 0;
        default:  // a fatal error: the session is not shut down cleanly
            ERR_clear_error();
            c.handshake_done = false;
            errno = ECONNRESET;
            return -1;
    }
}

ssize_t connection_recv(gated_server::connection &c, char *ptr, size_t size) {
    if (!c.ssl) return ::recv(c.fd, ptr, size, 0);
    c.want_write = false;
    return tls_result(c, SSL_read(c.ssl, ptr, int(std::min<size_t>(size, INT_MAX))));
}

ssize_t connection_send(gated_server::connection &c, const char *ptr, size_t size, int flags) {
    if (!c.ssl) return ::send(c.fd, ptr, size, flags | MSG_NOSIGNAL);
    c.want_write = false;
    return tls_result(c, SSL_write(c.ssl, ptr, int(std::min<size_t>(size, INT_MAX))));
}

// Ends a connection's TLS session (a close_notify when the socket takes it) and frees it.
void end_tls(gated_server::connection &c) {
    if (!c.ssl) return;
    if (c.handshake_done) SSL_shutdown(c.ssl);
    SSL_free(c.ssl);
    c.ssl = nullptr;
    ERR_clear_error();
}

// Case-insensitive: does the header line at [b, e) have this (lower-case) name?
bool header_is(const std::string &s, size_t b, size_t e, const char *name) {
    const size_t n = std::strlen(name);
    if (e - b <= n || s[b + n] != ':') return false;
    for (size_t i = 0; i < n; ++i)
        if (char(std::tolower(static_cast<unsigned char>(s[b + i]))) != name[i]) return false;
    return true;
}

std::string header_value(const std::string &s, size_t b, size_t e, const char *name) {
    size_t v = b + std::strlen(name) + 1;
    while (v < e && (s[v] == ' ' || s[v] == '\t')) ++v;
    while (e > v && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
    std::string out = s.substr(v, e - v);
    for (auto &ch : out) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return out;
}

gate_head_facts facts_of(const std::string &s, size_t head_end, size_t max_body) {
    gate_head_facts f;
    bool have_length = false;
    bool length_ok = false;
    for (size_t b = s.find("\r\n"); b != std::string::npos && b + 2 < head_end;) {
        b += 2;
        const size_t e = s.find("\r\n", b);
        if (e == std::string::npos || e > head_end) break;
        if (header_is(s, b, e, "content-length")) {
            const std::string v = header_value(s, b, e, "content-length");
            size_t n = 0;
            bool ok = !v.empty() && v.size() <= 18 && !have_length;
            for (char ch : v) ok = ok && ch >= '0' && ch <= '9', n = n * 10 + size_t(ch - '0');
            if (!ok) f.body_by_worker = true;
            have_length = true;
            length_ok = ok;
            f.body = n;
        } else if (header_is(s, b, e, "transfer-encoding") || header_is(s, b, e, "expect")) {
            f.body_by_worker = true;
        }
        b = e;
    }
    if (f.body > max_body) {
        // With a plain Content-Length the gate answers and reads the rest away (a worker closing a
        // connection with unread bytes would reset it before the client read the answer); anything
        // else is httplib's to answer.
        f.too_large = length_ok && !f.body_by_worker;
        f.body_by_worker = true;
    }
    return f;
}

// A form content type (what `curl -d` sends) becomes application/json in the head: every route
// reads its body as JSON whatever the type says (as the reference server does), while httplib would
// parse a form body as parameters and refuse one over 8 KiB as too large. Returns the change in the
// head's length.
ptrdiff_t read_form_body_as_json(std::string &s, size_t head_end) {
    static constexpr std::string_view form = "application/x-www-form-urlencoded";
    for (size_t b = s.find("\r\n"); b != std::string::npos && b + 2 < head_end;) {
        b += 2;
        const size_t e = s.find("\r\n", b);
        if (e == std::string::npos || e > head_end) break;
        if (header_is(s, b, e, "content-type") && header_value(s, b, e, "content-type").rfind(form, 0) == 0) {
            const std::string line = "Content-Type: application/json";
            const ptrdiff_t change = ptrdiff_t(line.size()) - ptrdiff_t(e - b);
            s.replace(b, e - b, line);
            return change;
        }
        b = e;
    }
    return 0;
}

// A short answer the gate gives itself, written once without waiting (over TLS only once the
// session is established).
void write_and_close(gated_server::connection &c, const char *status, const std::string &json_body = {}) {
    if (c.ssl && !c.handshake_done) return;
    std::string reply = std::string("HTTP/1.1 ") + status + "\r\nConnection: close\r\n";
    if (!json_body.empty()) reply += "Content-Type: application/json\r\n";
    reply += "Content-Length: " + std::to_string(json_body.size()) + "\r\n\r\n" + json_body;
    [[maybe_unused]] const ssize_t n = connection_send(c, reply.data(), reply.size(), MSG_DONTWAIT);
}

// OpenAI's error object for a request the gate refuses itself (`message` holds no quote or
// backslash: it is the gate's own text).
std::string error_json(const std::string &message) {
    return "{\"error\":{\"message\":\"" + message +
           "\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}";
}

// The first line of a request head, "METHOD /path", printable (for the log).
std::string request_line_of(const std::string &s) {
    const size_t end = std::min(s.find(' ', std::min(s.find(' '), s.size() - 1) + 1), s.find("\r\n"));
    return printable(std::string_view(s).substr(0, std::min<size_t>(end, 200)));
}

// The stream a worker's request reads and writes: the bytes the gate read first, then the socket;
// every read and write waits at most io_timeout.
class gate_stream final : public httplib::Stream {
  public:
    gate_stream(gated_server::connection &c, std::chrono::milliseconds io_timeout)
        : c_(c), io_timeout_(io_timeout) {}

    bool is_readable() const override {
        return c_.consumed < c_.buffer.size() || (c_.ssl && SSL_pending(c_.ssl) > 0) ||
               wait_for(c_.fd, POLLIN, clock_type::now() + io_timeout_);
    }
    bool is_writable() const override {
        if (!wait_for(c_.fd, POLLOUT, clock_type::now() + io_timeout_)) return false;
        // alive unless the peer closed: readable with nothing to read
        pollfd p{c_.fd, POLLIN, 0};
        if (::poll(&p, 1, 0) <= 0) return true;
        char b = 0;
        const ssize_t n = ::recv(c_.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    }
    ssize_t read(char *ptr, size_t size) override {
        if (c_.consumed < c_.buffer.size()) {
            const size_t n = std::min(size, c_.buffer.size() - c_.consumed);
            std::memcpy(ptr, c_.buffer.data() + c_.consumed, n);
            c_.consumed += n;
            return ssize_t(n);
        }
        const auto deadline = clock_type::now() + io_timeout_;
        for (;;) {
            const ssize_t n = connection_recv(c_, ptr, size);
            if (n >= 0) return n;
            if (errno == EINTR) continue;
            if ((errno != EAGAIN && errno != EWOULDBLOCK) ||
                !wait_for(c_.fd, c_.want_write ? POLLOUT : POLLIN, deadline))
                return -1;
        }
    }
    ssize_t write(const char *ptr, size_t size) override {
        size_t done = 0;
        while (done < size) {
            const ssize_t n = connection_send(c_, ptr + done, size - done, 0);
            if (n > 0) {
                done += size_t(n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            const short wanted = c_.ssl && !c_.want_write ? POLLIN : POLLOUT;
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) ||
                !wait_for(c_.fd, wanted, clock_type::now() + io_timeout_))
                return -1;
        }
        return ssize_t(size);
    }
    void get_remote_ip_and_port(std::string &ip, int &port) const override { address_of(true, ip, port); }
    void get_local_ip_and_port(std::string &ip, int &port) const override { address_of(false, ip, port); }
    socket_t socket() const override { return c_.fd; }

  private:
    void address_of(bool peer, std::string &ip, int &port) const {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        auto *sa = reinterpret_cast<sockaddr *>(&a);
        if ((peer ? ::getpeername(c_.fd, sa, &len) : ::getsockname(c_.fd, sa, &len)) != 0) return;
        char host[NI_MAXHOST] = {0};
        char serv[NI_MAXSERV] = {0};
        if (::getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) !=
            0)
            return;
        ip = host;
        port = std::atoi(serv);
    }

    gated_server::connection &c_;
    std::chrono::milliseconds io_timeout_;
};

// The socket of the request the calling worker runs (-1: none), for client_still_connected.
thread_local int current_request_fd = -1;

// Lowers the calling thread's priority to nice value `nice` (never raises it). Linux keeps a nice
// value per thread, which the threads it starts afterwards inherit; a failure only leaves the
// priority as it was.
void lower_thread_priority(int nice) {
#if defined(__linux__)
    errno = 0;
    const int now = ::getpriority(PRIO_PROCESS, 0);  // 0: the calling thread
    if (errno == 0 && now < nice) ::setpriority(PRIO_PROCESS, 0, nice);
#else
    (void)nice;
#endif
}

}  // namespace

bool client_still_connected() {
    const int fd = current_request_fd;
    if (fd < 0) return true;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    if (p.revents & (POLLHUP | POLLERR)) return false;
    char b = 0;
    const ssize_t n = ::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

gated_server::gated_server(gate_limits limits) : limits_(limits) {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) throw error(std::string("cannot create an eventfd: ") + std::strerror(errno));
}

gated_server::~gated_server() {
    stop_serving();
    for (auto &c : waiting_) end_tls(*c), ::close(c->fd);
    for (auto &c : returned_) end_tls(*c), ::close(c->fd);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    ::close(wake_fd_);
}

void gated_server::use_tls(const std::string &cert_file, const std::string &key_file) {
    // the first reason OpenSSL gives ("no start line", "key values mismatch" ...)
    auto reason = [] {
        std::string why = "not a PEM file OpenSSL can read";
        if (const unsigned long e = ERR_get_error()) {
            char buf[256];
            ERR_error_string_n(e, buf, sizeof buf);
            why = buf;
        }
        ERR_clear_error();
        return why;
    };
    for (const auto &[what, file] :
         {std::pair{"certificate", &cert_file}, std::pair{"private key", &key_file}}) {
        if (file->empty())
            throw error(std::string("HTTPS needs both --ssl-cert-file and --ssl-key-file; the ") + what +
                        " file is not given");
        if (::access(file->c_str(), R_OK) != 0)
            throw error(std::string("cannot read the ") + what + " file " + *file + ": " +
                        std::strerror(errno));
    }
    std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
    if (!ctx) throw error("cannot create a TLS context: " + reason());
    SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
    // a write that must wait is retried with the same bytes from wherever they are then
    SSL_CTX_set_mode(ctx.get(), SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert_file.c_str()) != 1)
        throw error("the certificate file " + cert_file +
                    " holds no certificate OpenSSL can use: " + reason());
    const bool key_read = SSL_CTX_use_PrivateKey_file(ctx.get(), key_file.c_str(), SSL_FILETYPE_PEM) == 1;
    const std::string why = key_read ? "" : reason();
    if (why.find("mismatch") != std::string::npos || (key_read && SSL_CTX_check_private_key(ctx.get()) != 1))
        throw error("the private key file " + key_file + " is not the key of the certificate in " +
                    cert_file);
    if (!key_read) throw error("the private key file " + key_file + " holds no key OpenSSL can use: " + why);
    tls_ = std::move(ctx);
}

int gated_server::bind_and_listen(const std::string &host, int port) {
    const std::string where = host + ":" + std::to_string(port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo *found = nullptr;
    const std::string service = std::to_string(port);
    if (const int r = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); r != 0)
        throw error("cannot listen on " + where + ": " + ::gai_strerror(r));
    std::string why = "no address";
    for (addrinfo *a = found; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            why = std::strerror(errno);
            continue;
        }
        // no SO_REUSEPORT: a second server must not share a busy port and take half its clients
        int yes = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
            listen_fd_ = fd;
            break;
        }
        why = std::strerror(errno);
        ::close(fd);
    }
    ::freeaddrinfo(found);
    if (listen_fd_ < 0) throw error("cannot listen on " + where + ": " + why);
    svr_sock_ = listen_fd_;  // httplib's streaming responses run while this is valid
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&a), &len);
    return a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&a)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in *>(&a)->sin_port);
}

void gated_server::run(size_t n_workers, int nice) {
    lower_thread_priority(nice);  // before the workers start: they inherit it
    workers_ = std::make_unique<httplib::ThreadPool>(std::max<size_t>(n_workers, 1));
    gate_loop();
    if (listen_fd_ >= 0) ::close(listen_fd_);  // new connections are refused from now on
    listen_fd_ = -1;
    workers_->shutdown();  // the requests in progress end (their routes are cancelled by then)
    std::lock_guard lock(returned_mutex_);
    for (auto &c : returned_) close_connection(std::move(c));
    returned_.clear();
}

void gated_server::stop_serving() {
    stopping_ = true;
    svr_sock_ = INVALID_SOCKET;  // streaming responses end
    wake();
}

void gated_server::wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void gated_server::gate_loop() {
    std::vector<pollfd> fds;
    while (!stopping_) {
        fds.clear();
        fds.push_back({wake_fd_, POLLIN, 0});
        fds.push_back({listen_fd_, POLLIN, 0});
        auto next = clock_type::now() + std::chrono::seconds(1);
        for (const auto &c : waiting_) {
            fds.push_back({c->fd, short(c->want_write ? POLLIN | POLLOUT : POLLIN), 0});
            next = std::min(next, c->deadline);
        }
        const int r = ::poll(fds.data(), nfds_t(fds.size()), remaining_ms(next));
        if (r < 0 && errno != EINTR)
            throw error(std::string("weft serve: poll failed: ") + std::strerror(errno));
        if (stopping_) break;
        if (fds[0].revents) {
            uint64_t count = 0;
            [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof count);
        }
        // read what arrived, before the vector changes below; then hand over or close
        for (size_t i = 0; i < waiting_.size(); ++i)
            if (fds[i + 2].revents) read_from(*waiting_[i]);
        {
            std::lock_guard lock(returned_mutex_);
            for (auto &c : returned_) {
                c->since = clock_type::now();
                c->started = !c->buffer.empty();
                c->deadline = c->since + (c->started ? limits_.head_timeout : limits_.idle_timeout);
                c->head_done = false;
                buffered_ += c->buffer.size();
                // TLS bytes the session holds already: read them now, the socket will not say so
                if (c->ssl && SSL_pending(c->ssl) > 0) read_from(*c);
                waiting_.push_back(std::move(c));  // (closed by read_from: skipped below)
            }
            returned_.clear();
        }
        const auto now = clock_type::now();
        std::vector<std::unique_ptr<connection>> still;
        still.reserve(waiting_.size());
        for (auto &c : waiting_) {
            if (c->fd < 0) continue;  // closed by read_from
            if (request_complete(*c)) {
                buffered_ -= c->buffer.size();
                workers_->enqueue([this, raw = c.release()] { work(std::unique_ptr<connection>(raw)); });
            } else if (c->fd < 0) {
                continue;
            } else if (now >= c->deadline) {
                if (c->started && !c->discarding) write_and_close(*c, "408 Request Timeout");
                drop(*c);
            } else {
                still.push_back(std::move(c));
            }
        }
        waiting_ = std::move(still);
        if (fds[1].revents) accept_new();
    }
    for (auto &c : waiting_)
        if (c->fd >= 0) drop(*c);
    waiting_.clear();
}

void gated_server::accept_new() {
    for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return;  // EAGAIN: none left; other errors: try again at the next poll
        if (open_ >= limits_.max_connections) evict_oldest();
        auto c = std::make_unique<connection>();
        c->fd = fd;
        if (open_ >= limits_.max_connections) {              // every connection is running a request
            write_and_close(*c, "503 Service Unavailable");  // (HTTPS: closed without a word)
            ::close(fd);
            continue;
        }
        int yes = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
        if (tls_) {
            c->ssl = SSL_new(tls_.get());
            if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
                end_tls(*c);
                ::close(fd);
                continue;
            }
            SSL_set_accept_state(c->ssl);
        }
        c->since = clock_type::now();
        c->deadline = c->since + limits_.head_timeout;
        ++open_;
        waiting_.push_back(std::move(c));
    }
}

void gated_server::evict_oldest() {
    auto oldest = waiting_.end();
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
        if ((*it)->fd >= 0 && (oldest == waiting_.end() || (*it)->since < (*oldest)->since)) oldest = it;
    if (oldest == waiting_.end()) return;
    drop(**oldest);
    waiting_.erase(oldest);
}

// Advances a connection's TLS handshake with what has arrived; true once it is established. A
// handshake that fails (a client speaking plain HTTP to an HTTPS port, a bad hello) drops it.
bool gated_server::tls_handshake(connection &c) {
    c.want_write = false;
    const int r = SSL_do_handshake(c.ssl);
    if (r == 1) {
        c.handshake_done = true;
        return true;
    }
    const int e = SSL_get_error(c.ssl, r);
    if (e == SSL_ERROR_WANT_READ) return false;
    if (e == SSL_ERROR_WANT_WRITE) {
        c.want_write = true;
        return false;
    }
    ERR_clear_error();
    drop(c);
    return false;
}

void gated_server::read_from(connection &c) {
    if (c.ssl && !c.handshake_done && !tls_handshake(c)) return;
    char chunk[16384];
    // At most 1 MiB a turn, so that one fast sender cannot hold the gate: the rest is read at the
    // next poll, which reports it at once. (Until Dec 6 the connection was dropped here instead, so
    // every body of about 1 MiB or more that arrived quickly got no answer.)
    for (int rounds = 0;; ++rounds) {
        if (rounds == 64) return;
        const ssize_t n = connection_recv(c, chunk, sizeof chunk);
        if (n > 0 && c.discarding) {
            c.discard_left -= std::min(c.discard_left, size_t(n));
            if (c.discard_left == 0) break;  // all of it: the connection closes, nothing is reset
            continue;
        }
        if (n > 0) {
            if (!c.started) {
                c.started = true;
                c.deadline = clock_type::now() + limits_.head_timeout;
            }
            c.buffer.append(chunk, size_t(n));
            buffered_ += size_t(n);
            if (buffered_ > limits_.max_buffered) {
                write_and_close(c, "503 Service Unavailable");
                break;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        break;  // the peer closed, or an error
    }
    drop(c);
}

void gated_server::drop(connection &c) {
    buffered_ -= c.buffer.size();
    c.buffer.clear();
    end_tls(c);
    ::close(c.fd);
    c.fd = -1;
    --open_;
}

bool gated_server::request_complete(connection &c) {
    if (c.discarding) return false;
    if (!c.head_done) {
        const size_t head_end = c.buffer.find("\r\n\r\n");
        if (head_end == std::string::npos) {
            if (c.buffer.size() > limits_.max_head) {
                write_and_close(c, "431 Request Header Fields Too Large");
                drop(c);
            }
            return false;
        }
        // A NUL in a head is invalid (RFC 9110); read as a C string it would end a header early, so
        // that "Bearer KEY\0anything" would pass for the key.
        if (std::memchr(c.buffer.data(), '\0', head_end) != nullptr) {
            write_and_close(c, "400 Bad Request", error_json("the request head holds a NUL byte"));
            drop(c);
            return false;
        }
        const ptrdiff_t change = read_form_body_as_json(c.buffer, head_end);
        buffered_ += size_t(change);  // (wraps back when negative: unsigned arithmetic)
        c.head_done = true;
        c.head_bytes = size_t(ptrdiff_t(head_end) + change) + 4;
        c.facts = facts_of(c.buffer, c.head_bytes, payload_max_length_);
        c.deadline = clock_type::now() + limits_.io_timeout;  // the body's time
        if (c.facts.too_large) {
            refuse_too_large(c);
            return false;
        }
    }
    c.body_buffered = !c.facts.body_by_worker;
    c.request_bytes = c.head_bytes + c.facts.body;
    return c.facts.body_by_worker || c.buffer.size() >= c.request_bytes;
}

void gated_server::refuse_too_large(connection &c) {
    const std::string message = "the request body (" + std::to_string(c.facts.body) +
                                " bytes) is larger than the server accepts (--max-body " +
                                std::to_string(payload_max_length_) + " bytes)";
    std::fprintf(stderr, "weft serve: %s -> 413: %s\n", request_line_of(c.buffer).c_str(), message.c_str());
    write_and_close(c, "413 Payload Too Large", error_json(message));
    // The answer is out; what the client still sends of its body is read and dropped (a close with
    // unread bytes would reset the connection, and the client would never see the 413), for as long
    // as a body may take.
    ::shutdown(c.fd, SHUT_WR);
    c.discarding = true;
    c.discard_left = c.facts.body - std::min(c.facts.body, c.buffer.size() - c.head_bytes);
    buffered_ -= c.buffer.size();
    c.buffer.clear();
    if (c.discard_left == 0) drop(c);
}

void gated_server::work(std::unique_ptr<connection> c) {
    gate_stream stream(*c, limits_.io_timeout);
    bool client_closes = false;
    const bool last = ++c->requests >= limits_.keep_alive_max || stopping_;
    current_request_fd = c->fd;
    const bool written = process_request(stream, last, client_closes, nullptr);
    current_request_fd = -1;
    // What the request left unread (a body that a 401 or 404 never looked at) is dropped; a
    // pipelined next request stays. A body read from the socket may have left bytes in flight:
    // no reuse then.
    c->buffer.erase(0, c->body_buffered ? std::max(c->consumed, c->request_bytes) : c->buffer.size());
    c->consumed = 0;
    if (!written || client_closes || last || stopping_ || !c->body_buffered)
        close_connection(std::move(c));
    else
        give_back(std::move(c));
}

void gated_server::give_back(std::unique_ptr<connection> c) {
    {
        std::lock_guard lock(returned_mutex_);
        returned_.push_back(std::move(c));
    }
    wake();
}

void gated_server::close_connection(std::unique_ptr<connection> c) {
    if (!c || c->fd < 0) return;
    end_tls(*c);
    ::shutdown(c->fd, SHUT_RDWR);
    ::close(c->fd);
    c->fd = -1;
    --open_;
}

}  // namespace weft::server
