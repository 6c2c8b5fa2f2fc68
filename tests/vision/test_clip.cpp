// tests/vision/test_clip.cpp — the CLIP encoder and projectors against a NumPy forward pass; loading,
// preprocessing and image decoding errors.
#include <gtest/gtest.h>
#include <stb/stb_image_write.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/numpy_reference.h"
#include "common/run_weft.h"
#include "vision/vision_test_util.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/model/model.h"
#include "weft/model/synth.h"
#include "weft/vision/clip.h"

namespace {

using weft::test::random_image;
using weft::test::tiny_clip_spec;
using weft::test::vision_temp_path;
namespace vision = weft::vision;

struct encoder_case {
    const char *name;
    std::string projector;
    bool use_gelu;
    bool post_ln;
    int32_t width, height;  // of the image (the encoder's size: no resize)
    int64_t image_size = 28;
    weft::dtype type = weft::dtype::f32;  // of the matrices (NumPy reads f16 ones exactly)
};

class ClipEncoder : public ::testing::TestWithParam<encoder_case> {};

TEST_P(ClipEncoder, MatchesNumPyReference) {
    WEFT_SKIP_WITHOUT_NUMPY();
    const encoder_case &c = GetParam();
    vision::clip_synth_spec s = tiny_clip_spec();
    s.projector = c.projector;
    s.use_gelu = c.use_gelu;
    s.post_ln = c.post_ln;
    s.image_size = c.image_size;
    s.type = c.type;
    s.seed = 7;
    const std::string mmproj = vision_temp_path(std::string(c.name) + ".gguf");
    const std::string raw = vision_temp_path(std::string(c.name) + ".rgb");
    vision::clip_synth_write(s, mmproj);
    const vision::rgb_image img = random_image(c.width, c.height, 11);
    weft::test::write_raw_image(img, raw);

    const auto proj = vision::clip_model::load(mmproj);
    EXPECT_EQ(proj->hparams().n_layer_run, s.n_layer - 1);  // LLaVA: the second-to-last layer's features
    const int64_t n_patches = (c.image_size / 7) * (c.image_size / 7);
    EXPECT_EQ(proj->n_image_tokens(), c.projector == "ldpv2" ? n_patches / 4 : n_patches);
    EXPECT_EQ(proj->n_output_embd(), s.n_output_embd);
    const std::vector<float> got = proj->encode_image(img, 2);
    const std::vector<double> want = weft::test::run_reference("ref_clip.py", {mmproj, raw});
    ASSERT_EQ(got.size(), want.size());
    const double err = weft::test::nmse(got.data(), want.data(), got.size());
    EXPECT_LE(err, 1e-10) << c.name;
    std::printf("%s: NMSE %.3g over %zu values\n", c.name, err, got.size());
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    std::filesystem::remove(mmproj);
    std::filesystem::remove(raw);
}

INSTANTIATE_TEST_SUITE_P(Projectors, ClipEncoder,
                         ::testing::Values(encoder_case{"mlp_quick_gelu", "mlp", false, false, 28, 28},
                                           encoder_case{"mlp_gelu_post_ln", "mlp", true, true, 28, 28},
                                           encoder_case{"mlp_norm", "mlp_norm", false, true, 28, 28},
                                           encoder_case{"mlp_resized", "mlp", false, false, 45, 31},
                                           encoder_case{"ldpv2", "ldpv2", false, false, 56, 56, 56},
                                           encoder_case{"mlp_f16", "mlp", false, false, 28, 28, 28,
                                                        weft::dtype::f16}),
                         [](const auto &info) { return std::string(info.param.name); });

TEST(ClipPreprocess, PadAndBicubicResizeMatchNumPy) {
    WEFT_SKIP_WITHOUT_NUMPY();
    const std::string mmproj = vision_temp_path("pre.gguf"), raw = vision_temp_path("pre.rgb");
    vision::clip_synth_write(tiny_clip_spec(), mmproj);
    for (const auto &[w, h] : {std::pair{45, 31}, std::pair{13, 20}, std::pair{28, 28}}) {
        const vision::rgb_image img = random_image(w, h, uint32_t(w * 100 + h));
        weft::test::write_raw_image(img, raw);
        const std::vector<double> want =
            weft::test::run_reference("ref_clip.py", {"--preprocess", mmproj, raw});
        std::array<uint8_t, 3> fill{};
        const auto proj = vision::clip_model::load(mmproj);
        for (size_t c = 0; c < 3; ++c)
            fill[c] = uint8_t(std::nearbyint(proj->hparams().image_mean[c] * 255.0f));
        const vision::rgb_image got =
            vision::image_resize_bicubic(vision::image_pad_to_square(img, fill), 28, 28);
        ASSERT_EQ(got.pixels.size(), want.size());
        size_t differ = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            const double d = std::fabs(double(got.pixels[i]) - want[i]);
            EXPECT_LE(d, 1.0) << "pixel value " << i << " of " << w << " x " << h;
            differ += d > 0.0;
        }
        EXPECT_LE(differ, want.size() / 200) << w << " x " << h << ": values off by one (rounding ties)";
    }
    std::filesystem::remove(mmproj);
    std::filesystem::remove(raw);
}

TEST(ClipLoad, RefusesBadFilesByName) {
    const std::string mmproj = vision_temp_path("bad.gguf"), llm = vision_temp_path("llm.gguf");
    vision::clip_synth_write(tiny_clip_spec(48), mmproj);
    weft::synth_write(weft::test::tiny_text_spec(64), llm);
    // a text model is not an mmproj
    try {
        vision::clip_model::load(llm);
        ADD_FAILURE() << "a text model loaded as an mmproj";
    } catch (const weft::error &e) {
        EXPECT_NE(std::string(e.what()).find("not an mmproj"), std::string::npos) << e.what();
    }
    // the projector's width differs from the text model's n_embd
    const auto proj = vision::clip_model::load(mmproj);
    const auto text = weft::model::load(llm);
    try {
        proj->check_text_model(*text);
        ADD_FAILURE() << "a 48-wide projector accepted for an n_embd 64 model";
    } catch (const weft::error &e) {
        EXPECT_NE(std::string(e.what()).find("48"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(mmproj), std::string::npos) << e.what();
    }
    // an unknown projector type: the file's "mlp" value rewritten to "ldp" (same length)
    std::string bytes = weft::test::read_text_file(mmproj);
    const std::string value("\x03\0\0\0\0\0\0\0mlp", 11);
    const size_t at = bytes.find(value);
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, value.size(), std::string("\x03\0\0\0\0\0\0\0ldp", 11));
    std::ofstream(mmproj, std::ios::binary) << bytes;
    try {
        vision::clip_model::load(mmproj);
        ADD_FAILURE() << "an unknown projector type loaded";
    } catch (const weft::error &e) {
        EXPECT_NE(std::string(e.what()).find("'ldp'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("mlp_norm"), std::string::npos)
            << e.what();  // the supported list
    }
    std::filesystem::remove(mmproj);
    std::filesystem::remove(llm);
}

std::string png_bytes(const vision::rgb_image &img) {
    std::string out;
    stbi_write_png_to_func(
        [](void *ctx, void *data, int size) {
            static_cast<std::string *>(ctx)->append(static_cast<char *>(data), size_t(size));
        },
        &out, img.width, img.height, 3, img.pixels.data(), img.width * 3);
    return out;
}

std::span<const uint8_t> as_bytes(const std::string &s) {
    return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

void expect_image_error(const std::string &bytes, const std::string &name, const std::string &says,
                        const vision::image_limits &limits = {}) {
    try {
        vision::image_decode(as_bytes(bytes), name, limits);
        ADD_FAILURE() << name << ": decoded";
    } catch (const vision::image_error &e) {
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
}

TEST(ImageDecode, PngAndBmpRoundTrip) {
    const vision::rgb_image img = random_image(19, 7, 3);
    for (const std::string &bytes : {png_bytes(img), weft::test::bmp_bytes(img)}) {
        const vision::rgb_image back = vision::image_decode(as_bytes(bytes), "pic");
        EXPECT_EQ(back.width, 19);
        EXPECT_EQ(back.height, 7);
        EXPECT_EQ(back.pixels, img.pixels);
    }
}

// The pad-free resize gives the bits of padding first and resizing the square (what the encoder's
// preprocessing did before, at the cost of a side x side copy).
TEST(ImageDecode, PadAndResizeMatchesPaddingFirst) {
    const std::array<uint8_t, 3> fill = {122, 116, 104};
    for (const auto &[w, h, side] : {std::tuple{19, 7, 28}, std::tuple{7, 19, 28}, std::tuple{300, 2, 28},
                                     std::tuple{3, 64, 16}, std::tuple{28, 10, 28}, std::tuple{33, 33, 28}}) {
        const vision::rgb_image img = random_image(w, h, uint32_t(w * 31 + h));
        const vision::rgb_image expected =
            vision::image_resize_bicubic(vision::image_pad_to_square(img, fill), side, side);
        const vision::rgb_image got = vision::image_pad_and_resize(img, fill, side);
        EXPECT_EQ(got.width, side);
        EXPECT_EQ(got.height, side);
        EXPECT_EQ(got.pixels, expected.pixels) << w << " x " << h << " -> " << side;
    }
}

TEST(ImageDecode, BadImagesAreClearErrors) {
    const vision::rgb_image img = random_image(64, 48, 5);
    const std::string png = png_bytes(img);
    expect_image_error("", "empty.png", "empty");
    expect_image_error("this is no image at all, just text", "junk.jpg", "not a PNG, JPEG, BMP or GIF image");
    expect_image_error("P6\n64 48\n255\n" + std::string(64 * 48 * 3, 'x'), "pic.ppm",
                       "not a PNG, JPEG, BMP or GIF image");
    expect_image_error(png.substr(0, png.size() / 2), "half.png", "truncated");
    expect_image_error(png.substr(0, 40), "cut.png", "truncated");
    // stb_image would decode these with the missing part blank: weft checks their ends
    const std::string bmp = weft::test::bmp_bytes(img);
    expect_image_error(bmp.substr(0, bmp.size() - 10), "cut.bmp", "truncated");
    std::string jpg;
    stbi_write_jpg_to_func(
        [](void *ctx, void *data, int size) {
            static_cast<std::string *>(ctx)->append(static_cast<char *>(data), size_t(size));
        },
        &jpg, img.width, img.height, 3, img.pixels.data(), 90);
    EXPECT_EQ(vision::image_decode(as_bytes(jpg), "whole.jpg").width, 64);
    expect_image_error(jpg.substr(0, jpg.size() * 2 / 3), "cut.jpg", "truncated");
    // limits: bytes, then the header's dimensions before any pixel is decoded
    vision::image_limits small;
    small.max_bytes = 100;
    expect_image_error(png, "big.png", "more than the 100 allowed", small);
    vision::image_limits few_pixels;
    few_pixels.max_pixels = 1000;
    expect_image_error(png, "wide.png", "64 x 48 pixels", few_pixels);
    vision::rgb_image huge_header = random_image(2, 2, 1);
    std::string huge = weft::test::bmp_bytes(huge_header);
    for (int at : {18, 22})  // width and height: 100000
        for (int k = 0; k < 4; ++k) huge[size_t(at + k)] = char(100000u >> (8 * k) & 0xFF);
    expect_image_error(huge, "huge.bmp", "100000 x 100000 pixels");
    try {
        vision::image_load(vision_temp_path("does-not-exist.png"));
        ADD_FAILURE() << "a missing file loaded";
    } catch (const vision::image_error &e) {
        EXPECT_NE(std::string(e.what()).find("does-not-exist.png"), std::string::npos) << e.what();
    }
}

}  // namespace
