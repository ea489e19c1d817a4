#include "libs/wire/kj_reason.h"

#include <cctype>
#include <cstring>

namespace ravnest::wire {

std::string kj_reason(const kj::Exception& e) { return kj_reason(std::string(e.getDescription().cStr())); }

kj::Exception kj_failure(const std::string& description, kj::Exception::Type type) {
  return kj::Exception(type, __FILE__, __LINE__, kj::heapString(description.c_str()));
}

std::string kj_reason(const std::string& description) {
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
