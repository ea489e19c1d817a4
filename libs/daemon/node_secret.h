// NodeSecret: the shared secret every call but status() must present, compared in constant time.
// A wrong one fails the call with "unauthorized: ..." and is logged with the method's name.
#pragma once

#include <string>

#include <capnp/blob.h>

namespace ravnest::runtime {

class NodeSecret {
 public:
  explicit NodeSecret(std::string secret) : secret_(std::move(secret)) {}
  // Throws kj::Exception when `given` is not the secret.
  void check(capnp::Data::Reader given, const char* method) const;
  const std::string& text() const { return secret_; }

 private:
  std::string secret_;
};

}  // namespace ravnest::runtime
