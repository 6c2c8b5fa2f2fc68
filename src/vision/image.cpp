// src/vision/image.cpp — image decoding with stb_image (limits checked first) and CLIP preprocessing.
#include "weft/vision/image.h"

#include <stb_image.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "weft/core/safe_file.h"

namespace weft::vision {

namespace {

std::string dims_text(int64_t w, int64_t h) {
    return std::to_string(w) + " x " + std::to_string(h);
}

// Keys' cubic convolution kernel with a = -0.5 (Catmull-Rom).
double cubic_weight(double x) {
    constexpr double a = -0.5;
    x = std::fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

// For each output coordinate along one axis: the 4 source indices (clamped) and their weights.
struct axis_taps {
    std::vector<int32_t> index;  // 4 per output coordinate
    std::vector<double> weight;
};

axis_taps make_taps(int32_t n_in, int32_t n_out) {
    axis_taps t;
    t.index.resize(size_t(n_out) * 4);
    t.weight.resize(size_t(n_out) * 4);
    const double scale = double(n_in) / double(n_out);
    for (int32_t o = 0; o < n_out; ++o) {
        const double src = (double(o) + 0.5) * scale - 0.5;
        const double base = std::floor(src);
        for (int k = 0; k < 4; ++k) {
            const double pos = base - 1.0 + double(k);
            t.index[size_t(o) * 4 + size_t(k)] = int32_t(std::clamp(pos, 0.0, double(n_in - 1)));
            t.weight[size_t(o) * 4 + size_t(k)] = cubic_weight(src - pos);
        }
    }
    return t;
}

uint32_t read_le32(std::span<const uint8_t> b, size_t at) {
    return uint32_t(b[at]) | uint32_t(b[at + 1]) << 8 | uint32_t(b[at + 2]) << 16 | uint32_t(b[at + 3]) << 24;
}

enum class image_format { png, jpeg, bmp, gif, other };

// The format by its signature. Only these four are decoded (the formats of photos and screenshots a
// chat sends, as the reference server takes them); stb_image would also read HDR, PSD, PIC, TGA and
// PNM, whose headers can declare huge images over no pixel data at all.
image_format format_of(std::span<const uint8_t> b) {
    auto starts = [&](std::string_view sig) {
        return b.size() >= sig.size() && std::equal(sig.begin(), sig.end(), b.begin(),
                                                    [](char c, uint8_t x) { return uint8_t(c) == x; });
    };
    if (starts("\x89PNG\r\n\x1a\n")) return image_format::png;
    if (starts("\xFF\xD8\xFF")) return image_format::jpeg;
    if (starts("BM")) return image_format::bmp;
    if (starts("GIF87a") || starts("GIF89a")) return image_format::gif;
    return image_format::other;
}

// stb_image decodes a truncated file without complaint in most formats (the missing part blank), so
// each format's end is checked first: a JPEG's scan data must be followed by its EOI marker (FF D9
// after the last SOS, FF DA, so an embedded thumbnail's EOI does not count); a PNG must hold its IEND
// chunk; a GIF must end in its trailer (3B); an uncompressed BMP must hold every row its header
// declares (RLE-compressed BMPs, whose size cannot be known before decoding, are refused).
void check_complete(std::span<const uint8_t> b, image_format format, const std::string &name) {
    auto truncated = [&](const std::string &format_name, const std::string &why) {
        return image_error(name + ": the " + format_name + " image is truncated (" + why + ")");
    };
    switch (format) {
        case image_format::jpeg: {
            size_t last_sos = 0;
            for (size_t i = 2; i + 1 < b.size(); ++i)
                if (b[i] == 0xFF && b[i + 1] == 0xDA) last_sos = i;
            bool eoi = false;
            for (size_t i = last_sos; !eoi && i + 1 < b.size(); ++i) eoi = b[i] == 0xFF && b[i + 1] == 0xD9;
            if (last_sos == 0 || !eoi) throw truncated("JPEG", "no end of image after its scan data");
            return;
        }
        case image_format::png: {
            static constexpr uint8_t iend[] = {'I', 'E', 'N', 'D'};
            // the last chunk: length 0, "IEND", its CRC (a few bytes after it are tolerated)
            const auto tail = b.last(std::min<size_t>(b.size(), 64));
            if (std::search(tail.begin(), tail.end(), std::begin(iend), std::end(iend)) == tail.end())
                throw truncated("PNG", "no IEND chunk at its end");
            return;
        }
        case image_format::gif:
            if (b.back() != 0x3B) throw truncated("GIF", "no trailer at its end");
            return;
        case image_format::bmp: {
            if (b.size() < 54) throw truncated("BMP", "its headers are incomplete");
            const uint32_t data_at = read_le32(b, 10), header_size = read_le32(b, 14);
            if (header_size < 40) return;  // an OS/2 core header: stb checks it
            const int32_t width = int32_t(read_le32(b, 18)), height = int32_t(read_le32(b, 22));
            const uint32_t bits = uint32_t(b[28]) | uint32_t(b[29]) << 8, compression = read_le32(b, 30);
            if (compression != 0 && compression != 3)
                throw image_error(name + ": a compressed BMP (compression " + std::to_string(compression) +
                                  ") is not read; PNG, JPEG, uncompressed BMP and GIF are");
            const uint64_t row = (uint64_t(std::abs(int64_t(width))) * bits + 31) / 32 * 4;
            const uint64_t need = uint64_t(data_at) + row * uint64_t(std::abs(int64_t(height)));
            if (need > b.size())
                throw truncated("BMP", "its rows need " + std::to_string(need) + " bytes, the file has " +
                                           std::to_string(b.size()));
            return;
        }
        case image_format::other:
            return;
    }
}

// Bicubic resampling of `img` placed at (x0, y0) in a padded_w x padded_h canvas of `fill`, without
// making the canvas: a padding row or column has the fill colour, so its horizontal pass is computed
// once. The arithmetic (taps, weights, order of the sums) is that of resampling the padded canvas, so
// the result is the same to the bit; the memory is the image, its rows at the output width and the
// output, however large the padding (a 16384 x 1 image was padded to 16384 x 16384 first: 805 MB).
rgb_image resize_placed(const rgb_image &img, int32_t padded_w, int32_t padded_h, int32_t x0, int32_t y0,
                        std::array<uint8_t, 3> fill, int32_t width, int32_t height) {
    const axis_taps tx = make_taps(padded_w, width), ty = make_taps(padded_h, height);
    auto source = [&](int32_t px, int32_t y, int c) -> double {
        const int32_t x = px - x0;
        return x >= 0 && x < img.width ? double(img.at(x, y, c)) : double(fill[size_t(c)]);
    };
    // horizontal pass into doubles: the image's rows [img.height][width][3], and the fill's one row
    std::vector<double> rows(size_t(img.height) * size_t(width) * 3), fill_row(size_t(width) * 3);
    for (int32_t x = 0; x < width; ++x)
        for (int c = 0; c < 3; ++c) {
            double sum = 0.0, fill_sum = 0.0;
            for (int k = 0; k < 4; ++k)
                fill_sum += tx.weight[size_t(x) * 4 + size_t(k)] * double(fill[size_t(c)]);
            fill_row[size_t(x) * 3 + size_t(c)] = fill_sum;
            for (int32_t y = 0; y < img.height; ++y) {
                sum = 0.0;
                for (int k = 0; k < 4; ++k)
                    sum += tx.weight[size_t(x) * 4 + size_t(k)] *
                           source(tx.index[size_t(x) * 4 + size_t(k)], y, c);
                rows[(size_t(y) * size_t(width) + size_t(x)) * 3 + size_t(c)] = sum;
            }
        }
    auto row_at = [&](int32_t py) -> const double * {
        const int32_t y = py - y0;
        return y >= 0 && y < img.height ? rows.data() + size_t(y) * size_t(width) * 3 : fill_row.data();
    };
    rgb_image out;
    out.width = width;
    out.height = height;
    out.pixels.resize(size_t(width) * size_t(height) * 3);
    for (int32_t y = 0; y < height; ++y)
        for (int32_t x = 0; x < width; ++x)
            for (int c = 0; c < 3; ++c) {
                double sum = 0.0;
                for (int k = 0; k < 4; ++k)
                    sum += ty.weight[size_t(y) * 4 + size_t(k)] *
                           row_at(ty.index[size_t(y) * 4 + size_t(k)])[size_t(x) * 3 + size_t(c)];
                out.pixels[(size_t(y) * size_t(width) + size_t(x)) * 3 + size_t(c)] =
                    uint8_t(std::clamp(std::nearbyint(sum), 0.0, 255.0));
            }
    return out;
}

}  // namespace

rgb_image image_decode(std::span<const uint8_t> bytes, const std::string &name, const image_limits &limits) {
    if (bytes.empty()) throw image_error(name + ": the image is empty (0 bytes)");
    if (bytes.size() > limits.max_bytes)
        throw image_error(name + ": the image has " + std::to_string(bytes.size()) +
                          " bytes, more than the " + std::to_string(limits.max_bytes) + " allowed");
    if (bytes.size() > size_t(INT32_MAX)) throw image_error(name + ": the image is too large to decode");
    const image_format format = format_of(bytes);
    if (format == image_format::other)
        throw image_error(name +
                          ": not a PNG, JPEG, BMP or GIF image (the formats weft reads; HDR, PSD, PIC, "
                          "TGA, PNM and others are refused)");
    int w = 0, h = 0, channels = 0;
    if (!stbi_info_from_memory(bytes.data(), int(bytes.size()), &w, &h, &channels))
        throw image_error(name + ": not an image weft can decode (" + std::string(stbi_failure_reason()) +
                          "); PNG, JPEG, BMP and GIF are read");
    if (w <= 0 || h <= 0 || w > limits.max_side || h > limits.max_side || int64_t(w) * h > limits.max_pixels)
        throw image_error(name + ": the image is " + dims_text(w, h) + " pixels; at most " +
                          std::to_string(limits.max_side) + " on a side and " +
                          std::to_string(limits.max_pixels) + " pixels are allowed");
    check_complete(bytes, format, name);
    int dw = 0, dh = 0;
    uint8_t *data = stbi_load_from_memory(bytes.data(), int(bytes.size()), &dw, &dh, &channels, 3);
    if (!data)
        throw image_error(name + ": the image cannot be decoded (" + std::string(stbi_failure_reason()) +
                          "): a corrupt or truncated file?");
    rgb_image img;
    img.width = dw;
    img.height = dh;
    img.pixels.assign(data, data + size_t(dw) * size_t(dh) * 3);
    stbi_image_free(data);
    if (dw != w || dh != h)
        throw image_error(name + ": the header says " + dims_text(w, h) + " pixels, the data " +
                          dims_text(dw, dh));
    return img;
}

rgb_image image_load(const std::string &path, const image_limits &limits) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) throw image_error(path + ": cannot read the image: " + ec.message());
    if (size > limits.max_bytes)
        throw image_error(path + ": the image has " + std::to_string(size) + " bytes, more than the " +
                          std::to_string(limits.max_bytes) + " allowed");
    std::string bytes;
    try {
        bytes = read_input_file(path);
    } catch (const error &e) {
        throw image_error(e.what());
    }
    return image_decode(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()), path,
        limits);
}

rgb_image image_pad_to_square(const rgb_image &img, std::array<uint8_t, 3> fill) {
    const int32_t side = std::max(img.width, img.height);
    rgb_image out;
    out.width = out.height = side;
    out.pixels.resize(size_t(side) * size_t(side) * 3);
    for (size_t i = 0; i < out.pixels.size(); i += 3)
        std::copy(fill.begin(), fill.end(), out.pixels.begin() + std::ptrdiff_t(i));
    const int32_t x0 = (side - img.width) / 2, y0 = (side - img.height) / 2;
    for (int32_t y = 0; y < img.height; ++y)
        std::copy_n(img.pixels.begin() + std::ptrdiff_t(size_t(y) * size_t(img.width) * 3),
                    size_t(img.width) * 3,
                    out.pixels.begin() + std::ptrdiff_t((size_t(y + y0) * size_t(side) + size_t(x0)) * 3));
    return out;
}

rgb_image image_resize_bicubic(const rgb_image &img, int32_t width, int32_t height) {
    if (width == img.width && height == img.height) return img;
    return resize_placed(img, img.width, img.height, 0, 0, {}, width, height);
}

rgb_image image_pad_and_resize(const rgb_image &img, std::array<uint8_t, 3> fill, int32_t side) {
    const int32_t padded = std::max(img.width, img.height);
    if (padded == side) return image_pad_to_square(img, fill);  // no resampling, as resize at one size
    return resize_placed(img, padded, padded, (padded - img.width) / 2, (padded - img.height) / 2, fill, side,
                         side);
}

image_limits image_limits_for_encoder(int64_t image_size) {
    image_limits l;
    const int64_t side = std::clamp<int64_t>(12 * image_size, 2048, l.max_side);
    l.max_side = int32_t(side);
    l.max_pixels = std::min(l.max_pixels, side * side);
    return l;
}

std::vector<float> image_normalize(const rgb_image &img, const std::array<float, 3> &mean,
                                   const std::array<float, 3> &std) {
    const size_t n = size_t(img.width) * size_t(img.height);
    std::vector<float> out(n * 3);
    for (int c = 0; c < 3; ++c)
        for (size_t i = 0; i < n; ++i)
            out[size_t(c) * n + i] =
                (float(img.pixels[i * 3 + size_t(c)]) / 255.0f - mean[size_t(c)]) / std[size_t(c)];
    return out;
}

}  // namespace weft::vision
