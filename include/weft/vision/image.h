// weft/vision/image.h — images in: decoding (PNG, JPEG, BMP and GIF, with stb_image) within size
// limits, and the preprocessing a CLIP encoder expects (pad to a square, bicubic resize, normalize).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft::vision {

// An image that cannot be used: unreadable, corrupt, truncated, of an unsupported format or over the
// limits. what() names the image (its file or "image 2 of the request") and the problem.
class image_error : public error {
  public:
    using error::error;
};

// 8-bit RGB, row-major, 3 bytes per pixel, no padding.
struct rgb_image {
    int32_t width = 0;
    int32_t height = 0;
    std::vector<uint8_t> pixels;  // width * height * 3

    uint8_t at(int32_t x, int32_t y, int c) const {
        return pixels[(size_t(y) * size_t(width) + size_t(x)) * 3 + size_t(c)];
    }
};

// What an image may be: checked on the encoded bytes first, then on the dimensions the header states
// before any pixel is decoded, so a small file claiming a huge image costs nothing.
struct image_limits {
    size_t max_bytes = size_t(32) << 20;    // the encoded file
    int64_t max_pixels = int64_t(1) << 25;  // width * height (33.5 M: 8192 x 4096)
    int32_t max_side = 16384;               // width and height each
};

// The limits for images a projector resizes to image_size x image_size: at most 12 x image_size on a
// side (at least 2048, at most 16384; 4032 for a 336-pixel projector: a 12-megapixel photo) and that
// side squared in pixels. Decoding needs about 7 bytes a pixel at its peak (stb's buffers), so one
// image costs at most ~115 MB at 336, and a file that only claims a huge size is refused unread.
image_limits image_limits_for_encoder(int64_t image_size);

// Decodes an image from its encoded bytes: PNG, JPEG (baseline and progressive), BMP (uncompressed)
// and GIF (first frame); any other format (HDR, PSD, PIC, TGA, PNM ...) is refused by its signature,
// and a file whose pixel data is cut short (a PNG without IEND, a JPEG without its end marker, a GIF
// without its trailer, a BMP shorter than its rows) is refused before decoding. Grey, grey + alpha
// and RGBA become RGB (alpha dropped). `name` names the image in errors.
rgb_image image_decode(std::span<const uint8_t> bytes, const std::string &name,
                       const image_limits &limits = {});
// The same from a file; throws image_error naming the file when it cannot be read or is over the limits.
rgb_image image_load(const std::string &path, const image_limits &limits = {});

// The image centred on a square of side max(width, height) filled with `fill` (LLaVA-1.5's
// "pad" aspect: the shorter side padded with the mean colour instead of being cropped).
rgb_image image_pad_to_square(const rgb_image &img, std::array<uint8_t, 3> fill);
// Bicubic resampling (Keys' cubic convolution, a = -0.5, pixel centres aligned, edges clamped; no
// antialiasing filter when shrinking, as the reference's clip.cpp), rounded to 8 bits.
rgb_image image_resize_bicubic(const rgb_image &img, int32_t width, int32_t height);
// image_resize_bicubic(image_pad_to_square(img, fill), side, side), the same bits, without making the
// padded square (whose size a thin image would multiply: 16384 x 1 pixels padded are 805 MB).
rgb_image image_pad_and_resize(const rgb_image &img, std::array<uint8_t, 3> fill, int32_t side);
// Planar f32 [3][height][width]: (pixel / 255 - mean[c]) / std[c].
std::vector<float> image_normalize(const rgb_image &img, const std::array<float, 3> &mean,
                                   const std::array<float, 3> &std);

}  // namespace weft::vision
