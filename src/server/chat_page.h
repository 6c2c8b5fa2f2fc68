// src/server/chat_page.h — the chat page (src/server/assets/chat.html) the server answers GET / with,
// built into the library.
#pragma once

#include <string_view>

namespace weft::server {

std::string_view chat_page();

}  // namespace weft::server
