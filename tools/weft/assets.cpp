// tools/weft/assets.cpp — the bytes of the built-in model, included by the assembler (.incbin) from
// the path CMake passes in (WEFT_ASSET_MODEL), so no generated source is needed.
#include "weft/assets.h"

#define WEFT_STRINGIFY2(x) #x
#define WEFT_STRINGIFY(x) WEFT_STRINGIFY2(x)

// The file between a begin and an end symbol, in read-only data.
asm(".section .rodata\n"
    ".balign 64\n"
    ".global weft_asset_model_begin\n"
    "weft_asset_model_begin:\n"
    ".incbin \"" WEFT_STRINGIFY(WEFT_ASSET_MODEL) "\"\n"
    ".global weft_asset_model_end\n"
    "weft_asset_model_end:\n"
    ".previous\n");

extern "C" const uint8_t weft_asset_model_begin[], weft_asset_model_end[];

namespace weft::tool {

std::span<const uint8_t> default_model() {
    return {weft_asset_model_begin, size_t(weft_asset_model_end - weft_asset_model_begin)};
}

}  // namespace weft::tool
