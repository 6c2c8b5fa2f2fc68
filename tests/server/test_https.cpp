// tests/server/test_https.cpp — `weft serve --ssl-cert-file --ssl-key-file`: the server speaks TLS
// (a self-signed certificate made at test time with the openssl command), answers /health, a chat
// completion and a stream over it, shrugs off a client speaking plain HTTP to it, and refuses a
// missing or wrong certificate or key before listening, naming the file.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "server/api_test_server.h"
#include "weft/core/error.h"
#include "weft/server/openai_server.h"

namespace weft::server {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class Https : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new fs::path(fs::temp_directory_path() / ("weft-https-" + std::to_string(::getpid())));
        fs::create_directories(*dir_);
        if (std::system("command -v openssl > /dev/null 2>&1") != 0) return;
        auto make = [](const std::string &name) {
            const std::string cmd =
                "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -addext "
                "subjectAltName=IP:127.0.0.1 -keyout " +
                path(name + "-key.pem") + " -out " + path(name + "-cert.pem") + " > /dev/null 2>&1";
            return std::system(cmd.c_str()) == 0;
        };
        have_certificates_ = make("a") && make("b");
    }
    static void TearDownTestSuite() {
        fs::remove_all(*dir_);
        delete dir_;
    }
    void SetUp() override {
        if (!have_certificates_)
            GTEST_SKIP() << "the openssl command is not installed (or failed): no certificate";
    }
    static std::string path(const std::string &name) { return (*dir_ / name).string(); }
    static server_options tls(const std::string &cert, const std::string &key) {
        server_options opt;
        opt.ssl_cert_file = cert;
        opt.ssl_key_file = key;
        return opt;
    }
    static inline fs::path *dir_ = nullptr;
    static inline bool have_certificates_ = false;
};

TEST_F(Https, ServesOverTls) {
    api_test::api_server server(tls(path("a-cert.pem"), path("a-key.pem")));
    httplib::SSLClient client("127.0.0.1", server.port);
    client.enable_server_certificate_verification(false);
    client.set_read_timeout(60, 0);
    auto res = client.Get("/health");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(json::parse(res->body)["status"], "ok");

    // verified against the certificate as the only authority
    httplib::SSLClient verifying("127.0.0.1", server.port);
    verifying.set_ca_cert_path(path("a-cert.pem"));
    verifying.enable_server_certificate_verification(true);
    res = verifying.Get("/health");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);

    const json chat = {
        {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}, {"temperature", 0}};
    res = client.Post("/v1/chat/completions", chat.dump(), "application/json");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    ASSERT_EQ(res->status, 200) << res->body;
    const json reply = json::parse(res->body);
    EXPECT_EQ(reply["usage"]["completion_tokens"], 4);
    EXPECT_FALSE(reply["choices"][0]["message"]["content"].get<std::string>().empty());

    // a stream, on the same kept-alive session
    json streamed = chat;
    streamed["stream"] = true;
    res = client.Post("/v1/chat/completions", streamed.dump(), "application/json");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_NE(res->body.find("data: [DONE]"), std::string::npos) << res->body;

    // plain HTTP to the HTTPS port gets no answer, and the server goes on
    httplib::Client plain("127.0.0.1", server.port);
    plain.set_read_timeout(5, 0);
    EXPECT_FALSE(plain.Get("/health"));
    res = client.Get("/health");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
}

TEST_F(Https, BadCertificateOrKeyIsRefusedBeforeListening) {
    const std::string missing = path("no-such.pem");
    const std::vector<std::pair<server_options, std::string>> cases = {
        {tls(missing, path("a-key.pem")), missing},                      // no such file
        {tls(path("a-cert.pem"), ""), "--ssl-key-file"},                 // one of the two
        {tls(path("a-key.pem"), path("a-key.pem")), path("a-key.pem")},  // a key as the certificate
        {tls(path("a-cert.pem"), path("a-cert.pem")), path("a-cert.pem")},
        {tls(path("a-cert.pem"), path("b-key.pem")), path("b-key.pem")},  // another certificate's key
    };
    for (const auto &[opt, named] : cases) {
        SCOPED_TRACE(opt.ssl_cert_file + " / " + opt.ssl_key_file);
        openai_server svr(opt);
        try {
            svr.listen();
            ADD_FAILURE() << "listened";
        } catch (const weft::error &e) {
            EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace weft::server
