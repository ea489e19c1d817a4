#include "libs/torch_support/torch_errors.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace ravnest::torch_support {

std::string torch_message(const std::exception& e) {
  std::string text;
  if (auto* torch_error = dynamic_cast<const c10::Error*>(&e)) {
    text = torch_error->what_without_backtrace();
  } else {
    text = e.what();
  }
  // An error inside the TorchScript interpreter: a header, the serialized and the original
  // code's tracebacks, and the error itself on the last line ("RuntimeError: ...").
  const std::string interpreter = "The following operation failed in the TorchScript interpreter";
  if (text.find(interpreter) != std::string::npos) {
    size_t end = text.find_last_not_of(" \t\n");
    if (end != std::string::npos) {
      const size_t start = text.rfind('\n', end);
      std::string last = text.substr(start == std::string::npos ? 0 : start + 1,
                                     end + 1 - (start == std::string::npos ? 0 : start + 1));
      last = last.substr(std::min(last.size(), last.find_first_not_of(" \t")));
      if (last.rfind("RuntimeError: ", 0) == 0) last.erase(0, 14);
      if (!last.empty() && last.find(interpreter) == std::string::npos) {
        return last.size() > 300 ? last.substr(0, 300) + "..." : last;
      }
    }
  }
  // TorchScript errors put the message first and the source traceback after it; keep the
  // message and the innermost "The following operation failed" hint out.
  std::string out;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    line = line.substr(first);
    if (line.rfind("Traceback of TorchScript", 0) == 0 || line.rfind("File \"", 0) == 0 ||
        line.rfind("~", 0) == 0 || line.rfind("Exception raised from", 0) == 0) {
      continue;
    }
    if (!out.empty()) out += " ";
    out += line;
    if (out.size() > 300) break;
  }
  return out.empty() ? std::string("unknown error") : out;
}

}  // namespace ravnest::torch_support
