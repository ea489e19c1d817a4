// WireError: a message that cannot be decoded (or a tensor that cannot be received): malformed,
// malicious or over the receiver's limits. Thrown by every decode_* function of libs/wire; its
// what() is one line. No torch, no capnp.
#pragma once

#include <stdexcept>

namespace ravnest::wire {

class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ravnest::wire
