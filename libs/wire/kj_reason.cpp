#include "libs/wire/kj_reason.h"

#include <cctype>
#include <cstring>

namespace ravnest::wire {

std::string kj_reason(const kj::Exception& e) { return kj_reason(std::string(e.getDescription().cStr())); }

kj::Exception kj_failure(const std::string& description, kj::Exception::Type type) {
  return kj::Exception(type, __FILE__, __LINE__, kj::heapString(description.c_str()));
}

std::string openssl_reason(const std::string& description) {
  if (description.find("OpenSSL error") == std::string::npos) return "";
  std::string text = description;
  const auto line = text.rfind('\n');
  if (line != std::string::npos) text.erase(0, line + 1);
  const auto colons = text.rfind("::");
  if (colons != std::string::npos) return text.substr(colons + 2);
  const auto colon = text.rfind(':');
  return colon == std::string::npos ? text : text.substr(colon + 1);
}

std::string kj_reason(const std::string& description) {
  const std::string tls = openssl_reason(description);
  if (!tls.empty() && tls != "OpenSSL error") {
    const bool altered = tls.find("bad record mac") != std::string::npos ||
                         tls.find("decryption failed") != std::string::npos;
    return "TLS: " + tls +
           (altered ? " (a record altered on the way: the connection is dropped)" : "");
  }
  std::string text = description;
  for (const char* prefix : {"remote exception: ", "std::exception: ", "(remote) "}) {
    for (auto at = text.find(prefix); at != std::string::npos; at = text.find(prefix)) {
      text.erase(at, std::strlen(prefix));
    }
  }
  // A system call's signature: "::name(args): reason" or "name(args): reason".
  size_t start = text.rfind("::", 0) == 0 ? 2 : 0;
  size_t at = start;
  while (at < text.size() && (std::isalnum(static_cast<unsigned char>(text[at])) || text[at] == '_')) {
    ++at;
  }
  if (at > start && at < text.size() && text[at] == '(') {
    const auto close = text.find("): ", at);
    if (close != std::string::npos) text.erase(0, close + 3);
  }
  // "; name = value" details.
  for (size_t semi = text.find("; "); semi != std::string::npos; semi = text.find("; ", semi + 2)) {
    const auto next = text.find("; ", semi + 2);
    const auto equals = text.find(" = ", semi + 2);
    if (equals != std::string::npos && (next == std::string::npos || equals < next)) {
      text.erase(semi);
      break;
    }
  }
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return text;
}

}  // namespace ravnest::wire
