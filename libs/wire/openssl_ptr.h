// OpensslPtr: a std::unique_ptr that frees an OpenSSL object with its own free function
// (OpensslPtr<X509, X509_free>), so that every early return and exception releases it.
// Shared by the node's credentials (node_credentials.cpp) and the TLS fingerprint probe
// (tls_identity.cpp).
#pragma once

#include <memory>

namespace ravnest::wire {

template <typename T, void (*Free)(T*)>
struct OpensslFree {
  void operator()(T* p) const { Free(p); }
};

template <typename T, void (*Free)(T*)>
using OpensslPtr = std::unique_ptr<T, OpensslFree<T, Free>>;

}  // namespace ravnest::wire
