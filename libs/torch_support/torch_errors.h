// Torch's exceptions carry long C++ backtraces; users see the first meaningful line only.
#pragma once

#include <exception>
#include <string>

namespace ravnest::torch_support {

// The message of a c10::Error without its backtrace, or what() of any other exception,
// folded to one line; of an error inside the TorchScript interpreter, the error alone (its last
// line, without the tracebacks of the serialized and the original code).
std::string torch_message(const std::exception& e);

}  // namespace ravnest::torch_support
