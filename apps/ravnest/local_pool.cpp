#include "apps/ravnest/local_pool.h"

#include <cstdio>
#include <stdexcept>

namespace ravnest::cli {

namespace {

// Integers print as integers ("8", not "8.000000"), others with enough digits to read back.
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

}  // namespace

std::string local_pool_json(const std::vector<int>& ports, double ram_gb, double bandwidth_mbps) {
  std::string out = "{\n";
  for (size_t i = 0; i < ports.size(); ++i) {
    out += "  \"" + std::to_string(i) + "\": {\"IP\": \"127.0.0.1:" + std::to_string(ports[i]) +
           "\", \"benchmarks\": {\"ram\": " + number(ram_gb) +
           ", \"bandwidth\": " + number(bandwidth_mbps) + "}}";
    out += i + 1 < ports.size() ? ",\n" : "\n";
  }
  return out + "}\n";
}

bool may_write_pool(const std::optional<std::string>& existing,
                    const std::optional<std::string>& ours, bool force) {
  return force || !existing || (ours && *existing == *ours);
}

std::vector<int> parse_gpu_list(const std::string& text) {
  std::vector<int> gpus;
  if (text.empty()) return gpus;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos ||
        item.size() > 4) {
      throw std::invalid_argument("--gpus: expected GPU indices separated by commas such as "
                                  "0,1, got '" + text + "'");
    }
    gpus.push_back(std::stoi(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return gpus;
}

std::string device_for_node(size_t i, const std::vector<int>& gpus) {
  if (gpus.empty()) return "";
  return "cuda:" + std::to_string(gpus[i % gpus.size()]);
}

std::string base64(const std::string& bytes) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace ravnest::cli
