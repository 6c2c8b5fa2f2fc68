// tests/server/test_image_parts.cpp — chat messages with image_url parts: read into embedding rows at
// the image's place with --mmproj, a clear 400 without it or for a bad image or URI.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <string>

#include "server/openai_request.h"
#include "vision/vision_test_util.h"
#include "weft/model/model.h"
#include "weft/model/synth.h"
#include "weft/serving/conversation.h"
#include "weft/vision/clip.h"
#include "weft/vision/clip_synth.h"

namespace {

using nlohmann::json;
namespace server = weft::server;

std::string base64(const std::string &bytes) {
    static const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 2 < bytes.size(); i += 3) {
        const uint32_t v =
            uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
        for (int k = 3; k >= 0; --k) out += alphabet[(v >> (6 * k)) & 63];
    }
    if (i < bytes.size()) {
        uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
        if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
        out += alphabet[(v >> 18) & 63];
        out += alphabet[(v >> 12) & 63];
        out += i + 1 < bytes.size() ? alphabet[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

json chat_with_image(const std::string &url) {
    return {{"messages",
             {{{"role", "user"},
               {"content",
                {{{"type", "text"}, {"text", "What is this?"}},
                 {{"type", "image_url"}, {"image_url", {{"url", url}}}}}}}}}};
}

class ImageParts : public ::testing::Test {
  protected:
    void SetUp() override {
        llm_path = weft::test::vision_temp_path("parts-llm.gguf");
        mmproj_path = weft::test::vision_temp_path("parts-mmproj.gguf");
        weft::synth_write(weft::test::tiny_text_spec(48), llm_path);
        weft::vision::clip_synth_write(weft::test::tiny_clip_spec(48), mmproj_path);
        llm = weft::model::load(llm_path);
        proj = weft::vision::clip_model::load(mmproj_path);
        tmpl = weft::serving::choose_chat_template(*llm, "chatml");
    }
    void TearDown() override {
        std::filesystem::remove(llm_path);
        std::filesystem::remove(mmproj_path);
    }
    std::string expect_400(const server::openai_request_reader &reader, const json &body) {
        try {
            reader.parse(body, true);
        } catch (const server::request_error &e) {
            EXPECT_EQ(e.status(), 400);
            return e.what();
        }
        ADD_FAILURE() << "accepted: " << body.dump().substr(0, 200);
        return "";
    }

    std::string llm_path, mmproj_path;
    std::unique_ptr<weft::model> llm;
    std::unique_ptr<weft::vision::clip_model> proj;
    weft::serving::template_choice tmpl;
};

TEST_F(ImageParts, ImageRowsStandWhereThePartIs) {
    const server::openai_request_reader reader(*llm, tmpl, 16, 0, 0, proj.get(), 2);
    const std::string bmp = weft::test::bmp_bytes(weft::test::random_image(30, 20, 1));
    const server::parsed_request p =
        reader.parse(chat_with_image("data:image/bmp;base64," + base64(bmp)), true);
    ASSERT_EQ(p.prompts.size(), 1u);
    ASSERT_EQ(p.media.size(), 1u);
    const weft::serving::embd_chunk &c = p.media[0];
    EXPECT_EQ(c.n_tokens, 16);
    EXPECT_EQ(c.embd.size(), size_t(16 * 48));
    EXPECT_EQ(c.embd, proj->encode_image(weft::test::random_image(30, 20, 1), 2));
    const std::vector<weft::token> &t = p.prompts[0];
    ASSERT_LE(c.at + 16, t.size());
    EXPECT_TRUE(std::all_of(t.begin() + std::ptrdiff_t(c.at), t.begin() + std::ptrdiff_t(c.at + 16),
                            [](weft::token x) { return x == weft::token_null; }));
    EXPECT_EQ(std::count(t.begin(), t.end(), weft::token_null), 16);
    // the text before the image ("What is this?") and the template's tokens after it
    EXPECT_NE(llm->vocab().detokenize({t.begin(), t.begin() + std::ptrdiff_t(c.at)}).find("What is this?"),
              std::string::npos);
    EXPECT_GT(t.size(), c.at + 16);
}

TEST_F(ImageParts, BadImagesAndServersWithoutMmprojAre400) {
    const std::string png_url = "data:image/png;base64," + base64("not a png at all");
    const server::openai_request_reader plain(*llm, tmpl, 16, 0);
    EXPECT_NE(expect_400(plain, chat_with_image(png_url)).find("--mmproj"), std::string::npos);
    const server::openai_request_reader reader(*llm, tmpl, 16, 0, 0, proj.get(), 2);
    EXPECT_NE(expect_400(reader, chat_with_image(png_url)).find("image 1 of the request"), std::string::npos);
    EXPECT_NE(expect_400(reader, chat_with_image("https://example.com/cat.png")).find("data: URIs"),
              std::string::npos);
    EXPECT_NE(expect_400(reader, chat_with_image("data:image/png;base64,@@@")).find("base64"),
              std::string::npos);
    EXPECT_NE(expect_400(reader, chat_with_image("data:text/plain;base64,QUJD")).find("not an image"),
              std::string::npos);
}

}  // namespace
