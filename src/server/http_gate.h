// src/server/http_gate.h — the HTTP server of `weft serve`: connections wait in one polling thread
// (the gate) until a whole request has arrived, and only then does a worker thread run it.
//
// cpp-httplib gives every connection a thread from the moment it is accepted, so a crowd of clients
// that send their headers a byte at a time, or that hold kept-alive connections open, occupies every
// worker and starves everyone else. Here a connection costs a worker only while its request runs:
// the gate reads request heads and bodies for all connections at once (poll), bounds how long each
// may take and how much it may buffer, and closes the one waiting longest when too many are open.
// Routing, parsing and responses stay httplib's (Server::process_request on a stream of our own).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace weft::server {

struct gate_limits {
    size_t max_connections = 768;                   // open at once; beyond, the gate's oldest is closed
    std::chrono::milliseconds head_timeout{10000};  // first byte of a request to the end of its head
    std::chrono::milliseconds idle_timeout{5000};   // a kept-alive connection without a new request
    std::chrono::milliseconds io_timeout{600000};   // the whole body; and each read/write of a worker
    size_t max_head = 16384;                        // a longer head is answered 431
    size_t max_buffered = size_t(64) << 20;         // request bytes the gate holds, all connections
    size_t keep_alive_max = 1000;                   // requests per connection
};

// Whether the client of the request this thread is running is still connected (no hang-up seen),
// without writing to it: a handler waiting for a long answer polls this instead of committing to a
// status early. True on a thread that runs no gated request.
bool client_still_connected();

class gated_server : public httplib::Server {
  public:
    explicit gated_server(gate_limits limits);
    ~gated_server() override;
    gated_server(const gated_server &) = delete;
    gated_server &operator=(const gated_server &) = delete;

    // Serves HTTPS from now on: the TLS handshake and the request bytes are read by the gate as
    // plain HTTP's are, the answers written through the same session. Throws weft::error naming the
    // file when the certificate (PEM, a chain allowed) or the private key cannot be read or do not
    // belong together. Call before bind_and_listen.
    void use_tls(const std::string &cert_file, const std::string &key_file);
    // Binds host:port (0: any free port) and listens; returns the port. Throws weft::error naming
    // the address when that fails.
    int bind_and_listen(const std::string &host, int port);
    // Accepts and serves until stop_serving(); requests run on n_workers threads. The calling thread
    // and the workers run at nice value `nice` at least (see server_options::http_nice). Returns once
    // the requests in progress have ended.
    void run(size_t n_workers, int nice = 0);
    // Thread-safe: stops accepting, closes the waiting connections and makes run() return.
    void stop_serving();

    struct connection;  // one client connection (http_gate.cpp)

  private:
    void gate_loop();
    void accept_new();
    void read_from(connection &c);
    bool request_complete(connection &c);
    void refuse_too_large(connection &c);  // a Content-Length over the body limit: 413, body dropped
    void evict_oldest();
    void drop(connection &c);  // closes a connection the gate holds
    void work(std::unique_ptr<connection> c);
    void give_back(std::unique_ptr<connection> c);
    void close_connection(std::unique_ptr<connection> c);
    void wake();
    bool tls_handshake(connection &c);  // false: not finished yet, or failed (then dropped)

    gate_limits limits_;
    int listen_fd_ = -1;
    int wake_fd_ = -1;
    std::atomic<bool> stopping_{false};
    std::atomic<size_t> open_{0};
    size_t buffered_ = 0;                               // gate thread only
    std::vector<std::unique_ptr<connection>> waiting_;  // gate thread only
    std::mutex returned_mutex_;
    std::vector<std::unique_ptr<connection>> returned_;  // from workers, for the gate to take back
    std::unique_ptr<httplib::ThreadPool> workers_;
    std::shared_ptr<ssl_ctx_st> tls_;  // HTTPS: OpenSSL's server context; null: plain HTTP
};

}  // namespace weft::server
