// SHA-256 of a byte string, as lowercase hex: the checksum stage files travel with.
#pragma once

#include <string>
#include <string_view>

namespace ravnest::config {

std::string sha256_hex(std::string_view bytes);

}  // namespace ravnest::config
