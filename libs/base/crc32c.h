// CRC-32C (Castagnoli, the reflected polynomial 0x82F63B78), as TFRecord files frame their
// records with (tensorboard_writer.h): crc32c("123456789") = 0xE3069283. Table-driven, pure,
// thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace ravnest::base {

uint32_t crc32c(std::string_view bytes);

// TFRecord's masked form, ((crc >> 15) | (crc << 17)) + 0xa282ead8: a CRC of data that itself
// holds CRCs would otherwise be weak.
uint32_t masked_crc32c(std::string_view bytes);

}  // namespace ravnest::base
