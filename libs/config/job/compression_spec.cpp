#include "libs/config/job/compression_spec.h"

#include <utility>
#include <vector>

namespace ravnest::config {

namespace {

const std::vector<std::pair<std::string, WireCodec>>& codec_names() {
  static const std::vector<std::pair<std::string, WireCodec>> names = {
      {"none", WireCodec::kNone},
      {"fp16", WireCodec::kFp16},
      {"bf16", WireCodec::kBf16},
      {"int8", WireCodec::kInt8}};
  return names;
}

}  // namespace

bool parse_wire_codec(const std::string& name, WireCodec& out) {
  for (const auto& [text, codec] : codec_names()) {
    if (text == name) {
      out = codec;
      return true;
    }
  }
  return false;
}

const char* to_string(WireCodec codec) {
  for (const auto& [text, value] : codec_names()) {
    if (value == codec) return text.c_str();
  }
  return "?";
}

}  // namespace ravnest::config
