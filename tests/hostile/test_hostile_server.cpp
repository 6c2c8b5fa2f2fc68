// tests/hostile/test_hostile_server.cpp — `weft serve` against an attacker's requests (issue 42):
// bodies of megabytes sent fast, slowly, over the limit or with a form content type; API keys with
// tricks; logit_bias of the wrong kinds; one request asking for thousands of choices; LoRA scales
// beyond all use and adapters that make NaN logits; tiny image files claiming huge images.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/run_weft.h"
#include "common/served_model.h"
#include "weft/gguf/gguf.h"

namespace hostile_server_tests {

using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::test::connect_to;
using weft::test::served_model;
using weft::test::shell_quote;

// Sends `request` over a new connection in pieces of `piece` bytes, `pause` apart, then reads the
// answer until the server closes or 20 s pass. Returns the raw response ("" when none came).
std::string send_raw(int port, const std::string &request, size_t piece, std::chrono::milliseconds pause) {
    const int fd = connect_to(port);
    if (fd < 0) return "";
    for (size_t at = 0; at < request.size(); at += piece) {
        const size_t n = std::min(piece, request.size() - at);
        if (::send(fd, request.data() + at, n, MSG_NOSIGNAL) != ssize_t(n)) break;
        if (pause.count() > 0) std::this_thread::sleep_for(pause);
    }
    return weft::test::read_until_closed(fd, 20);
}

std::string post_request(const std::string &path, const std::string &body, const std::string &headers = "",
                         const std::string &content_type = "application/json") {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: " + content_type +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + headers + "\r\n" + body;
}

// A completion request of about `bytes` bytes: a short prompt, one token, and OpenAI's "user" field
// (which the server does not use) holding the rest.
std::string padded_completion(size_t bytes) {
    json body = {{"prompt", "Hello"}, {"max_tokens", 1}, {"user", ""}};
    const size_t base = body.dump().size();
    body["user"] = std::string(bytes > base ? bytes - base : 0, 'u');
    return body.dump();
}

// --- image files made by hand (no encoder library in this suite)

uint32_t crc32_of(const std::string &bytes) {
    uint32_t crc = 0xFFFFFFFFu;
    for (unsigned char b : bytes) {
        crc ^= b;
        for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

std::string be32(uint32_t v) {
    return {char(v >> 24), char(v >> 16 & 0xFF), char(v >> 8 & 0xFF), char(v & 0xFF)};
}

std::string le32(uint32_t v) {
    return {char(v & 0xFF), char(v >> 8 & 0xFF), char(v >> 16 & 0xFF), char(v >> 24)};
}

// A black RGB PNG of w x h pixels, its rows in stored (uncompressed) deflate blocks; `end`: with its
// IEND chunk.
std::string png_file(uint32_t w, uint32_t h, bool end = true) {
    auto chunk = [](const std::string &type, const std::string &data) {
        return be32(uint32_t(data.size())) + type + data + be32(crc32_of(type + data));
    };
    const std::string raw(size_t(h) * (1 + size_t(w) * 3), '\0');  // filter byte 0 and black pixels
    std::string z = "\x78\x01";
    uint32_t a = 1, b = 0;
    for (unsigned char c : raw) a = (a + c) % 65521, b = (b + a) % 65521;
    for (size_t at = 0; at < raw.size() || at == 0; at += 65535) {
        const size_t n = std::min<size_t>(65535, raw.size() - at);
        z += char(at + n >= raw.size() ? 1 : 0);
        z += {char(n & 0xFF), char(n >> 8), char(~n & 0xFF), char((~n >> 8) & 0xFF)};
        z += raw.substr(at, n);
        if (raw.empty()) break;
    }
    z += be32(b << 16 | a);
    const std::string ihdr = be32(w) + be32(h) + std::string("\x08\x02\x00\x00\x00", 5);
    return "\x89PNG\r\n\x1a\n" + chunk("IHDR", ihdr) + chunk("IDAT", z) + (end ? chunk("IEND", "") : "");
}

// A 24-bit BMP header declaring w x h pixels, followed by `pixel_bytes` bytes of pixel data.
std::string bmp_file(uint32_t w, uint32_t h, size_t pixel_bytes) {
    std::string f =
        "BM" + le32(uint32_t(54 + pixel_bytes)) + le32(0) + le32(54) + le32(40) + le32(w) + le32(h);
    f += std::string("\x01\x00\x18\x00", 4) + le32(0) + le32(uint32_t(pixel_bytes)) + le32(2835) +
         le32(2835) + le32(0) + le32(0);
    return f + std::string(pixel_bytes, '\x40');
}

std::string base64(const std::string &s) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < s.size(); i += 3) {
        const uint32_t v = uint32_t(uint8_t(s[i])) << 16 |
                           (i + 1 < s.size() ? uint32_t(uint8_t(s[i + 1])) << 8 : 0) |
                           (i + 2 < s.size() ? uint32_t(uint8_t(s[i + 2])) : 0);
        out += digits[v >> 18 & 63];
        out += digits[v >> 12 & 63];
        out += i + 1 < s.size() ? digits[v >> 6 & 63] : '=';
        out += i + 2 < s.size() ? digits[v & 63] : '=';
    }
    return out;
}

json chat_with_images(const std::vector<std::string> &files, const std::string &mime = "image/png") {
    json parts = json::array({{{"type", "text"}, {"text", "What is this?"}}});
    for (const std::string &f : files)
        parts.push_back(
            {{"type", "image_url"}, {"image_url", {{"url", "data:" + mime + ";base64," + base64(f)}}}});
    return {{"messages", json::array({{{"role", "user"}, {"content", parts}}})}, {"max_tokens", 1}};
}

class HostileServer : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new fs::path(fs::temp_directory_path() / ("weft-hostile-serve-" + std::to_string(::getpid())));
        fs::create_directories(*dir_);
        const std::string synth =
            shell_quote(WEFT_BINARY) + " synth " + shell_quote(path("model.gguf")) +
            " --embd 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 300 --ctx 512"
            " --lora " +
            shell_quote(path("adapter.gguf")) + " --rank 4 > /dev/null 2>&1";
        const std::string clip = shell_quote(WEFT_BINARY) + " synth " + shell_quote(path("mmproj.gguf")) +
                                 " --arch clip --embd 32 --layers 2 --heads 4 --ff 64 --image-size 28"
                                 " --patch-size 7 --proj-embd 64 > /dev/null 2>&1";
        synth_ok_ = std::system(synth.c_str()) == 0 && std::system(clip.c_str()) == 0;
    }
    static void TearDownTestSuite() {
        fs::remove_all(*dir_);
        delete dir_;
    }
    void SetUp() override { ASSERT_TRUE(synth_ok_) << "weft synth failed"; }

    static std::string path(const std::string &name) { return (*dir_ / name).string(); }
    static std::vector<std::string> base_args(std::vector<std::string> more = {}) {
        std::vector<std::string> args = {
            "-m", path("model.gguf"), "--host", "127.0.0.1", "--port", "0", "-np", "2", "-c", "512", "-t",
            "1",  "--chat-template",  "chatml"};
        args.insert(args.end(), more.begin(), more.end());
        return args;
    }
    static json error_of(const httplib::Result &res) {
        if (!res) return json();
        return json::parse(res->body, nullptr, false);
    }

    // The adapter of the suite copied with adapter.lora.alpha set to `alpha` and, when poison_b, every
    // value of its lora_b tensors NaN.
    static std::string hostile_adapter(const std::string &name, double alpha, bool poison_b) {
        const auto src = weft::gguf_file::open(path("adapter.gguf"));
        weft::gguf_writer w;
        for (const weft::gguf_kv &kv : src->kvs())
            if (kv.key != "adapter.lora.alpha") w.set_kv(kv);
        w.set_f32("adapter.lora.alpha", float(alpha));
        std::vector<std::vector<float>> keep;
        for (const weft::gguf_tensor_info &t : src->tensors()) {
            const std::span<const int64_t> ne(t.ne, t.n_dims);
            const bool is_b = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".lora_b") == 0;
            if (poison_b && is_b && t.type == weft::dtype::f32) {
                keep.emplace_back(t.nbytes / sizeof(float), std::numeric_limits<float>::quiet_NaN());
                w.add_tensor(t.name, t.type, ne, keep.back().data(), t.nbytes);
            } else {
                w.add_tensor(t.name, t.type, ne, src->tensor_data(t), t.nbytes);
            }
        }
        const std::string out = path(name);
        w.write(out);
        return out;
    }

    static inline fs::path *dir_ = nullptr;
    static inline bool synth_ok_ = false;
};

// Item 1: a body up to --max-body is read whole however it arrives (until Dec 6 every body of about
// 1 MiB or more that came quickly got no answer at all); above it a 413 with a message; a JSON body
// sent as a form (curl -d) is read as JSON.
TEST_F(HostileServer, LargeBodiesAreReadWholeFastOrSlow) {
    served_model server(*dir_, base_args());
    ASSERT_TRUE(server.healthy()) << server.log();
    for (size_t bytes : {size_t(1536) << 10, size_t(7) << 20}) {
        SCOPED_TRACE(bytes);
        const std::string body = padded_completion(bytes);
        auto res = server.client().Post("/v1/completions", body, "application/json");
        ASSERT_TRUE(res) << "no response to a fast body of " << bytes << " bytes; log:\n" << server.log();
        EXPECT_EQ(res->status, 200) << res->body;
        // slowly: 64 KiB pieces 5 ms apart
        const std::string reply =
            send_raw(server.port(), post_request("/v1/completions", body), size_t(64) << 10, 5ms);
        EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << reply.substr(0, 300);
    }
    // a large logit_bias map (every token of the vocabulary) is a body of its own kind
    json bias = json::object();
    for (int id = 0; id < 300; ++id) bias[std::to_string(id)] = 0.5;
    json body = {
        {"prompt", "Hello"}, {"max_tokens", 1}, {"logit_bias", bias}, {"user", std::string(1600000, 'b')}};
    auto res = server.client().Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    // a JSON body with a form content type, as curl -d sends it, larger than httplib's 8 KiB form limit
    const std::string form_body = padded_completion(64 << 10);
    res = server.client().Post("/v1/completions", form_body, "application/x-www-form-urlencoded");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_TRUE(server.stop()) << server.log();
}

TEST_F(HostileServer, BodyOverTheLimitIsA413WithAMessage) {
    served_model server(*dir_, base_args({"--max-body", std::to_string(1 << 20)}));
    ASSERT_TRUE(server.healthy()) << server.log();
    for (size_t bytes : {size_t(3) << 20, size_t(9) << 20}) {
        SCOPED_TRACE(bytes);
        auto res = server.client().Post("/v1/completions", padded_completion(bytes), "application/json");
        ASSERT_TRUE(res) << "no response; log:\n" << server.log();
        EXPECT_EQ(res->status, 413);
        const json e = error_of(res);
        ASSERT_TRUE(e.contains("error")) << res->body;
        EXPECT_NE(e["error"].value("message", "").find("--max-body"), std::string::npos) << res->body;
    }
    // the server goes on serving
    auto res = server.client().Post("/v1/completions", padded_completion(1000), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_TRUE(server.log_has({"-> 413"})) << server.log();
    EXPECT_TRUE(server.stop()) << server.log();
}

// Item 7: the token is compared exactly, the scheme without regard to case.
TEST_F(HostileServer, ApiKeyIsComparedExactly) {
    served_model server(*dir_, base_args({"--api-key", "sesame"}));
    ASSERT_TRUE(server.healthy()) << server.log();
    const std::string body = padded_completion(100);
    auto status_with = [&](const std::string &authorization) {
        const std::string reply = send_raw(
            server.port(), post_request("/v1/completions", body, "Authorization: " + authorization + "\r\n"),
            1 << 20, 0ms);
        return reply.size() > 12 ? std::atoi(reply.c_str() + 9) : 0;
    };
    EXPECT_EQ(status_with("Bearer sesame"), 200);
    EXPECT_EQ(status_with("bearer sesame"), 200);
    EXPECT_EQ(status_with("BEARER sesame"), 200);
    EXPECT_NE(status_with(std::string("Bearer sesame\0anything", 22)), 200);
    EXPECT_EQ(status_with("Bearer sesamex"), 401);
    EXPECT_EQ(status_with("Bearer sesam"), 401);
    EXPECT_EQ(status_with("Basic sesame"), 401);
    EXPECT_EQ(status_with("Bearersesame"), 401);
    EXPECT_TRUE(server.stop()) << server.log();
}

// Item 7: logit_bias values are numbers (false bans a token in the array form, as llama-server has
// it) and keys canonical token ids; one request asks for at most 128 choices (prompts x n).
TEST_F(HostileServer, LogitBiasKindsAndTheChoicesCap) {
    served_model server(*dir_, base_args());
    ASSERT_TRUE(server.healthy()) << server.log();
    auto post = [&](const json &body) {
        auto res = server.client().Post("/v1/completions", body.dump(), "application/json");
        return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
    };
    const json base = {{"prompt", "Hello"}, {"max_tokens", 1}};
    auto with_bias = [&](const json &bias) {
        json b = base;
        b["logit_bias"] = bias;
        return post(b);
    };
    for (const json &bad : {json{{"+10", 1}}, json{{"010", 1}}, json{{" 10", 1}}, json{{"10", true}},
                            json{{"10", false}}, json{{"10", "1"}}, json{{"10", 1e39}},
                            json::array({json::array({10, true})}), json::array({json::array({10, "1"})})}) {
        const auto [status, text] = with_bias(bad);
        EXPECT_EQ(status, 400) << bad.dump() << " -> " << text;
        EXPECT_NE(text.find("logit_bias"), std::string::npos) << text;
    }
    for (const json &good : {json{{"10", -100}}, json{{"0", 2.5}}, json::array({json::array({10, false})})}) {
        const auto [status, text] = with_bias(good);
        EXPECT_EQ(status, 200) << good.dump() << " -> " << text;
    }
    json many = base;
    many["prompt"] = std::vector<std::string>(2000, "hi");
    many["n"] = 16;
    const auto t0 = std::chrono::steady_clock::now();
    const auto [status, text] = post(many);
    EXPECT_EQ(status, 400) << text;
    EXPECT_NE(text.find("choices"), std::string::npos) << text;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    many["prompt"] = std::vector<std::string>(8, "hi");  // 128: the most
    EXPECT_EQ(post(many).first, 200);
    EXPECT_TRUE(server.stop()) << server.log();
}

// Item 4: LoRA scales and alphas are finite and bounded on every path; NaN logits while serving end
// the request with an error status, never a 200.
TEST_F(HostileServer, LoraScalesAlphasAndNanLogits) {
    const std::string adapter = path("adapter.gguf"), model = path("model.gguf");
    for (const std::string scale : {"nan", "inf", "1e6", "101"}) {
        const auto r = weft::test::run_weft(
            {"run", "-m", model, "-p", "hi", "-n", "2", "--lora-scaled", adapter, scale});
        EXPECT_NE(r.status, 0) << scale;
        EXPECT_NE(r.err.find("LoRA scale"), std::string::npos) << scale << ": " << r.err;
    }
    for (const auto &[name, alpha] : {std::pair<std::string, double>{"alpha-inf.gguf", INFINITY},
                                      {"alpha-nan.gguf", NAN},
                                      {"alpha-huge.gguf", 4294967296.0},
                                      {"alpha-below-zero.gguf", -1.0}}) {
        const std::string file = hostile_adapter(name, alpha, false);
        for (const std::string command : {"run", "export-lora"}) {
            const auto r =
                command == "run"
                    ? weft::test::run_weft({"run", "-m", model, "-p", "hi", "-n", "2", "--lora", file})
                    : weft::test::run_weft(
                          {"export-lora", "-m", model, "--lora", file, "-o", path("merged.gguf")});
            EXPECT_NE(r.status, 0) << command << " " << name;
            EXPECT_NE(r.err.find("adapter.lora.alpha"), std::string::npos)
                << command << " " << name << ": " << r.err;
            EXPECT_EQ(r.err.find("is negative"), std::string::npos) << r.err;  // what NaN was called
        }
    }
    // an adapter whose values are NaN: export-lora refuses to write the model it would make
    const std::string nan_adapter = hostile_adapter("nan-values.gguf", 8.0, true);
    const auto merged = weft::test::run_weft(
        {"export-lora", "-m", model, "--lora", nan_adapter, "-o", path("merged-nan.gguf")});
    EXPECT_NE(merged.status, 0);
    EXPECT_NE(merged.err.find("not finite"), std::string::npos) << merged.err;
    EXPECT_FALSE(fs::exists(path("merged-nan.gguf")));

    served_model server(*dir_, base_args({"--lora", adapter}));
    ASSERT_TRUE(server.healthy()) << server.log();
    for (const double scale : {1e6, 101.0, -1e300}) {
        auto res = server.client().Post("/lora-adapters", json::array({{{"id", 0}, {"scale", scale}}}).dump(),
                                        "application/json");
        ASSERT_TRUE(res);
        EXPECT_EQ(res->status, 400) << scale << ": " << res->body;
        json body = {{"prompt", "Hello"}, {"max_tokens", 2}, {"lora", {{{"id", 0}, {"scale", scale}}}}};
        res = server.client().Post("/v1/completions", body.dump(), "application/json");
        ASSERT_TRUE(res);
        EXPECT_EQ(res->status, 400) << scale << ": " << res->body;
    }
    auto res = server.client().Post("/v1/completions", padded_completion(100), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_TRUE(server.stop()) << server.log();

    served_model poisoned(*dir_, base_args({"--lora", nan_adapter}));
    ASSERT_TRUE(poisoned.healthy()) << poisoned.log();
    res = poisoned.client().Post("/v1/completions", padded_completion(100), "application/json");
    ASSERT_TRUE(res);
    EXPECT_GE(res->status, 500) << res->body;
    EXPECT_NE(res->body.find("NaN"), std::string::npos) << res->body;
    EXPECT_TRUE(poisoned.stop()) << poisoned.log();
}

// Item 2: tiny files claiming huge images are refused before their pixels are decoded, formats other
// than PNG, JPEG, BMP and GIF are refused, files whose pixel data is missing are refused, a request
// holds at most 8 images and a chat whose images cannot fit the context is refused before decoding;
// the server's peak memory stays small through all of it (before: a 16384 x 1 PNG peaked at 820 MB).
TEST_F(HostileServer, HostileImagesCostLittle) {
    served_model server(*dir_, base_args({"--mmproj", path("mmproj.gguf")}));
    ASSERT_TRUE(server.healthy()) << server.log();
    auto post = [&](const json &body) {
        auto res = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
        return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string("no response"));
    };
    const auto [ok_status, ok_text] = post(chat_with_images({png_file(40, 30)}));
    ASSERT_EQ(ok_status, 200) << ok_text;
    const long peak_before = server.peak_rss_kib();
    ASSERT_GT(peak_before, 0);
    const auto t0 = std::chrono::steady_clock::now();
    // a thin image: refused by its header, eight at once in one request and four requests at once
    const std::string thin = png_file(16384, 1);
    std::vector<std::thread> clients;
    std::vector<int> statuses(4, 0);
    for (size_t c = 0; c < statuses.size(); ++c)
        clients.emplace_back(
            [&, c] { statuses[c] = post(chat_with_images(std::vector<std::string>(8, thin))).first; });
    for (auto &t : clients) t.join();
    for (int st : statuses) EXPECT_EQ(st, 400);
    auto [status, text] = post(chat_with_images({thin}));
    EXPECT_EQ(status, 400);
    EXPECT_NE(text.find("16384 x 1 pixels"), std::string::npos) << text;
    // a BMP declaring 16384 x 2048 pixels with no pixel data (54 bytes)
    std::tie(status, text) = post(chat_with_images({bmp_file(16384, 2048, 0)}, "image/bmp"));
    EXPECT_EQ(status, 400);
    std::tie(status, text) = post(chat_with_images({bmp_file(1024, 1024, 100)}, "image/bmp"));
    EXPECT_EQ(status, 400);
    EXPECT_NE(text.find("truncated"), std::string::npos) << text;
    // a PNG without its end
    std::tie(status, text) = post(chat_with_images({png_file(40, 30, false)}));
    EXPECT_EQ(status, 400);
    EXPECT_NE(text.find("truncated"), std::string::npos) << text;
    // formats weft does not read: Radiance HDR (68 bytes declaring 16384 x 2048), PNM, PSD
    for (const std::string &other :
         {std::string("#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 2048 +X 16384\n") + std::string(20, '\0'),
          std::string("P6\n4 4\n255\n") + std::string(48, 'x'),
          std::string("8BPS\x00\x01") + std::string(40, '\0')}) {
        std::tie(status, text) = post(chat_with_images({other}, "image/x-other"));
        EXPECT_EQ(status, 400);
        EXPECT_NE(text.find("PNG, JPEG, BMP or GIF"), std::string::npos) << text;
    }
    // nine images: over the request's limit; four fit the limit but not a slot's 256 tokens (16 each
    // plus the text would; 4 x 16 = 64 do) -- so the context check is shown with the 8 allowed
    std::tie(status, text) = post(chat_with_images(std::vector<std::string>(9, png_file(4, 4))));
    EXPECT_EQ(status, 400);
    EXPECT_NE(text.find("at most 8"), std::string::npos) << text;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
    const long peak_after = server.peak_rss_kib();
    std::fprintf(stderr, "peak RSS %ld KiB before the hostile images, %ld KiB after\n", peak_before,
                 peak_after);
    EXPECT_LT(peak_after - peak_before, 32 * 1024) << peak_before << " KiB -> " << peak_after << " KiB";
    EXPECT_TRUE(server.stop()) << server.log();
}

TEST_F(HostileServer, ImagesAreCountedAgainstTheContextBeforeDecoding) {
    // a slot of 64 tokens: three images of 16 tokens and the chat template's text do not fit
    served_model server(
        *dir_, {"-m", path("model.gguf"), "--host", "127.0.0.1", "--port", "0", "-np", "1", "-c", "64", "-t",
                "1", "--chat-template", "chatml", "--mmproj", path("mmproj.gguf")});
    ASSERT_TRUE(server.healthy()) << server.log();
    // the images are not even valid: the context check comes first
    auto res = server.client().Post("/v1/chat/completions",
                                    chat_with_images(std::vector<std::string>(4, "not an image")).dump(),
                                    "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400);
    EXPECT_NE(res->body.find("context holds"), std::string::npos) << res->body;
    EXPECT_TRUE(server.stop()) << server.log();
}

// The reference's own routes (/completion, /infill, /apply-template): malformed bodies are a 4xx in
// OpenAI's shape, never a 500; the server still answers after them.
TEST_F(HostileServer, NativeRoutesRefuseBadRequests) {
    const std::string fim_model = path("fim.gguf");
    const std::string synth = shell_quote(WEFT_BINARY) + " synth " + shell_quote(fim_model) +
                              " --arch qwen2 --embd 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 300"
                              " --ctx 512 --fim > /dev/null 2>&1";
    ASSERT_EQ(std::system(synth.c_str()), 0);
    std::vector<std::string> args = base_args();
    args[1] = fim_model;
    served_model server(*dir_, args);
    ASSERT_TRUE(server.healthy()) << server.log();
    const std::string bad_utf8 = "{\"prompt\": \"\xff\xfe\", \"n_predict\": 1}";
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"/completion",
         {"{not json",
          "[1]",
          "{}",
          R"({"prompt": 5})",
          R"({"prompt": []})",
          R"({"prompt": [[]]})",
          R"({"prompt": [1.5]})",
          R"({"prompt": [-1]})",
          R"({"prompt": [99999999999]})",
          R"({"prompt": {"x": 1}})",
          R"({"prompt": [["a", [1]]]})",
          R"({"prompt": ["a", null, 3]})",
          R"({"prompt": "x", "n_predict": -2})",
          R"({"prompt": "x", "n_predict": 1e308})",
          R"({"prompt": "x", "n_predict": "4"})",
          R"({"prompt": "x", "n_probs": -1})",
          R"({"prompt": "x", "n_probs": 1000})",
          R"({"prompt": "x", "id_slot": 99})",
          R"({"prompt": "x", "id_slot": -5})",
          R"({"prompt": "x", "temperature": "hot"})",
          R"({"prompt": "x", "stop": 5})",
          R"({"prompt": "x", "samplers": [5]})",
          R"({"prompt": "x", "grammar": "root ::= ("})",
          R"({"prompt": "x", "return_tokens": "yes"})",
          R"({"prompt": "x", "stream": "yes"})",
          R"({"prompt": "x", "cache_prompt": 1})",
          R"({"prompt": "x", "logit_bias": [[99999, 1]]})",
          R"({"prompt": [1, 2, 3], "n_keep": -5})",
          bad_utf8}},
        {"/infill",
         {"{not json", "[1]", "{}", R"({"input_prefix": "a"})", R"({"input_suffix": "a"})",
          R"({"input_prefix": 5, "input_suffix": "b"})", R"({"input_prefix": "a", "input_suffix": {"x": 1}})",
          R"({"input_prefix": [1.5], "input_suffix": ""})",
          R"({"input_prefix": [99999], "input_suffix": ""})",
          R"({"input_prefix": "a", "input_suffix": "b", "prompt": 5})",
          R"({"input_prefix": "a", "input_suffix": "b", "input_extra": 5})",
          R"({"input_prefix": "a", "input_suffix": "b", "input_extra": [5]})",
          R"({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "x"}]})",
          R"({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "x", "filename": 5}]})",
          R"({"input_prefix": "a", "input_suffix": "b", "n_predict": -7})",
          R"({"input_prefix": "a", "input_suffix": "b", "temperature": -1})"}},
        {"/apply-template",
         {"{not json", "[1]", "{}", R"({"messages": 5})", R"({"messages": []})", R"({"messages": [5]})",
          R"({"messages": [{"role": "user", "content": 5}]})",
          R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": "yes"})",
          R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": 5})",
          R"({"messages": [{"role": "user", "content": "hi"}], "tools": 5})",
          R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})",
          R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})"}},
    };
    for (const auto &[route, bodies] : cases)
        for (const std::string &body : bodies) {
            SCOPED_TRACE(route + " " + body.substr(0, 200));
            auto res = server.client().Post(route, body, "application/json");
            ASSERT_TRUE(res) << "no answer; log:\n" << server.log();
            EXPECT_GE(res->status, 400) << res->body;
            EXPECT_LT(res->status, 500) << res->body;
            const json e = json::parse(res->body, nullptr, false);
            EXPECT_TRUE(e["error"].is_object() && e["error"]["message"].is_string()) << res->body;
        }
    for (const char *route : {"/completion", "/infill"}) {
        auto res = server.client().Post(
            route, R"({"prompt": "x", "input_prefix": "a", "input_suffix": "b", "n_predict": 2})",
            "application/json");
        ASSERT_TRUE(res) << route;
        EXPECT_EQ(res->status, 200) << route << ": " << res->body;
    }
    EXPECT_FALSE(server.log_has({"-> 500"})) << server.log();
    EXPECT_TRUE(server.stop()) << server.log();
}

}  // namespace hostile_server_tests

namespace hostile_server_tests {

// Issue 41: the Anthropic, Responses and Ollama routes answer every malformed request with a 4xx in
// their API's own error shape (Anthropic's {"type": "error", "error": {...}}, OpenAI's {"error":
// {"message"}}, Ollama's {"error": "..."}), never a 500; the server keeps serving after them.
TEST_F(HostileServer, OtherApisRefuseBadRequestsInTheirOwnShape) {
    served_model server(*dir_, base_args({"--max-body", std::to_string(1 << 20)}));
    ASSERT_TRUE(server.healthy()) << server.log();
    const json hi = json::array({{{"role", "user"}, {"content", "hi"}}});
    const std::string bad_utf8 = "{\"prompt\": \"\xff\xfe\", \"stream\": false}";
    const std::string png = "data:image/png;base64,!!!not base64";
    auto anthropic = [&](json more) {
        json b = {{"max_tokens", 4}, {"messages", hi}};
        b.update(more);
        return b.dump();
    };
    auto responses = [&](json more) {
        json b = {{"input", "hi"}, {"max_output_tokens", 4}};
        b.update(more);
        return b.dump();
    };
    const auto &chat = anthropic;  // OpenAI's chat body has the same two fields
    const json any_tool = json::array({{{"name", "f"}, {"input_schema", {{"type", "object"}}}}});
    auto ollama = [&](json more) {
        json b = {{"messages", hi}, {"stream", false}, {"options", {{"num_predict", 2}}}};
        b.update(more);
        return b.dump();
    };
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"/v1/messages",
         {"{not json", "[1]", "\"text\"", R"({"max_tokens": 4, "messages": "hi"})",
          "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}",
          anthropic({{"max_tokens", -5}}), anthropic({{"max_tokens", "4"}}),
          anthropic({{"max_tokens", 1e308}}), anthropic({{"max_tokens", UINT64_MAX}}),
          json{{"messages", hi}}.dump(), anthropic({{"messages", json::array({1})}}),
          anthropic({{"messages", {{{"role", "user"}, {"content", 5}}}}}),
          anthropic({{"messages", {{{"role", "user"}, {"content", {{{"type", 5}}}}}}}}),
          anthropic({{"messages",
                      {{{"role", "user"}, {"content", {{{"type", "image"}, {"source", {{"type", 5}}}}}}}}}}),
          anthropic(
              {{"messages",
                {{{"role", "user"},
                  {"content",
                   {{{"type", "image"},
                     {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "!!!"}}}}}}}}}}),
          anthropic({{"messages",
                      {{{"role", "assistant"},
                        {"content", {{{"type", "tool_use"}, {"id", 1}, {"name", "f"}, {"input", 5}}}}}}}}),
          anthropic({{"messages",
                      {{{"role", "user"},
                        {"content",
                         {{{"type", "tool_result"}, {"tool_use_id", "a"}, {"content", {{"x", 1}}}}}}}}}}),
          anthropic({{"tool_choice", {{"type", "weird"}}}}), anthropic({{"tool_choice", "auto"}}),
          anthropic({{"tools", json::array({5})}}),
          anthropic({{"tools", {{{"name", "a"}, {"type", "web_search_20250305"}}}}}),
          anthropic({{"system", 5}}), anthropic({{"stop_sequences", json::array({5})}}),
          anthropic({{"temperature", "hot"}}), anthropic({{"stream", "yes"}}),
          // the fields of reasoning and forced tool calls
          anthropic({{"thinking", 5}}), anthropic({{"thinking", {{"type", "weird"}}}}),
          anthropic({{"thinking", {{"type", "enabled"}, {"budget_tokens", "x"}}}}),
          anthropic({{"thinking", {{"type", "enabled"}, {"budget_tokens", -1}}}}),
          anthropic({{"tool_choice", {{"type", "any"}}}}),
          anthropic({{"tool_choice", {{"type", "tool"}}}, {"tools", any_tool}}),
          anthropic({{"tool_choice", {{"type", "tool"}, {"name", "g"}}}, {"tools", any_tool}}),
          anthropic({{"tool_choice", {{"type", "tool"}, {"name", 5}}}, {"tools", any_tool}})}},
        {"/v1/messages/count_tokens", {"{not json", R"({"messages": 5})", R"({"messages": []})"}},
        {"/v1/responses",
         {"{not json",
          "[1]",
          "{}",
          R"({"input": 5})",
          R"({"input": []})",
          R"({"input": [5]})",
          R"({"input": [{"type": 5}]})",
          R"({"input": [{"type": "web_search_call"}]})",
          R"({"input": [{"role": "user", "content": [{"type": 5}]}]})",
          json{{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"image_url", png}}}}}}}}
              .dump(),
          responses({{"max_output_tokens", -1}}),
          responses({{"max_output_tokens", 1e308}}),
          responses({{"max_output_tokens", UINT64_MAX}}),
          responses({{"tool_choice", "weird"}}),
          responses({{"tool_choice", {{"type", "function"}, {"name", 5}}}}),
          responses({{"tools", {{{"type", 5}}}}}),
          responses({{"tools", {{{"type", "file_search"}}}}}),
          responses({{"text", {{"format", {{"type", 5}}}}}}),
          responses({{"instructions", 5}}),
          responses({{"previous_response_id", "resp_1"}}),
          R"({"input": [{"type": "function_call", "call_id": "a", "name": "f", "arguments": {"x": 1}}]})",
          responses({{"reasoning", 5}}),
          responses({{"reasoning", {{"effort", 5}}}}),
          responses({{"tool_choice", "required"}}),
          responses(
              {{"tool_choice", {{"type", "function"}, {"name", "g"}}},
               {"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}}}}})}},
        {"/v1/chat/completions",
         {chat({{"tool_choice", "required"}}), chat({{"tool_choice", "sometimes"}}),
          chat({{"tool_choice", {{"type", "function"}, {"function", {{"name", 5}}}}}}),
          chat({{"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}},
                {"tools",
                 {{{"type", "function"},
                   {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}}}}),
          chat({{"chat_template_kwargs", 5}})}},
        {"/api/chat",
         {"{not json", "[1]", ollama({{"messages", 5}}), ollama({{"messages", json::array({5})}}),
          ollama({{"messages", {{{"role", "weird"}, {"content", "hi"}}}}}),
          ollama({{"messages", {{{"role", "user"}, {"content", "hi"}, {"images", json::array({5})}}}}}),
          ollama({{"messages", {{{"role", "user"}, {"content", "hi"}, {"images", {"!!!"}}}}}}),
          ollama(
              {{"messages", {{{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array({5})}}}}}),
          ollama({{"options", 5}}), ollama({{"options", {{"num_predict", "x"}}}}),
          ollama({{"options", {{"num_predict", 1e308}}}}), ollama({{"options", {{"temperature", "x"}}}}),
          ollama({{"format", 5}}), ollama({{"format", "xml"}}), ollama({{"tools", 5}}),
          ollama({{"stream", "x"}}), ollama({{"think", 5}}), ollama({{"think", "extreme"}}),
          ollama({{"think", json::array({1})}})}},
        {"/api/generate",
         {"{not json", bad_utf8, R"({"prompt": 5})", R"({"prompt": "x", "images": [5]})",
          R"({"prompt": "x", "images": ["!!!"], "stream": false})", R"({"prompt": "x", "raw": "x"})",
          R"({"prompt": "x", "suffix": "y"})", R"({"prompt": "x", "context": [1]})"}},
        {"/api/embed", {"{not json", "{}", R"({"input": 5})", R"({"input": [5]})", R"({"input": "x"})"}},
        {"/api/embeddings", {"{not json", "{}", R"({"prompt": 5})"}},
        {"/api/show", {"{not json", "{}", R"({"model": 5})"}},
    };
    for (const auto &[route, bodies] : cases)
        for (const std::string &body : bodies) {
            SCOPED_TRACE(route + " " + body);
            auto res = server.client().Post(route, body, "application/json");
            ASSERT_TRUE(res) << "no answer; log:\n" << server.log();
            EXPECT_GE(res->status, 400) << res->body;
            EXPECT_LT(res->status, 500) << res->body;
            const json e = json::parse(res->body, nullptr, false);
            if (route.rfind("/v1/messages", 0) == 0) {
                EXPECT_EQ(e.value("type", ""), "error") << res->body;
                EXPECT_TRUE(e["error"].is_object() && e["error"]["message"].is_string()) << res->body;
            } else if (route.rfind("/api/", 0) == 0) {
                EXPECT_TRUE(e["error"].is_string()) << res->body;
            } else {
                EXPECT_TRUE(e["error"].is_object() && e["error"]["message"].is_string()) << res->body;
            }
        }
    // a body over --max-body: 413 in each API's shape
    const std::string big = "{\"input\": \"" + std::string(size_t(2) << 20, 'x') + "\"}";
    for (const char *route : {"/v1/messages", "/v1/responses", "/api/chat"}) {
        auto res = server.client().Post(route, big, "application/json");
        ASSERT_TRUE(res) << route;
        EXPECT_EQ(res->status, 413) << route;
        const json e = json::parse(res->body, nullptr, false);
        EXPECT_TRUE(e.contains("error")) << route << ": " << res->body;
    }
    auto res = server.client().Post("/v1/messages", anthropic(json::object()), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_FALSE(server.log_has({"-> 500"})) << server.log();
    EXPECT_TRUE(server.stop()) << server.log();
}

}  // namespace hostile_server_tests
