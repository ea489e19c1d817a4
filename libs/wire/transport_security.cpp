#include "libs/wire/transport_security.h"

#include <kj/compat/tls.h>
#include <kj/debug.h>

#include "libs/wire/kj_reason.h"

namespace ravnest::wire {

namespace {

// OpenSSL's reason: the end of its last error line ("error:0A000086:SSL routines::certificate
// verify failed" -> "certificate verify failed").
std::string openssl_reason(const kj::Exception& e) {
  std::string text = e.getDescription().cStr();
  const auto marker = text.find("OpenSSL error");
  if (marker == std::string::npos) return kj_reason(e);
  const auto line = text.rfind('\n');
  if (line != std::string::npos) text.erase(0, line + 1);
  const auto colons = text.rfind("::");
  if (colons != std::string::npos) return text.substr(colons + 2);
  const auto colon = text.rfind(':');
  return colon == std::string::npos ? text : text.substr(colon + 1);
}

kj::Promise<kj::Own<kj::AsyncIoStream>> refusing(
    kj::Promise<kj::Own<kj::AsyncIoStream>>&& handshake) {
  return handshake.catch_([](kj::Exception&& e) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
    if (e.getType() == kj::Exception::Type::DISCONNECTED) return kj::mv(e);
    return kj_failure(tls_refusal(e));
  });
}

}  // namespace

std::string tls_refusal(const kj::Exception& e) {
  const std::string reason = openssl_reason(e);
  const bool certificate = reason.find("certificate") != std::string::npos ||
                           reason.find("unknown ca") != std::string::npos;
  return certificate ? "refused: wrong secret (TLS: " + reason + ")"
                     : "refused: TLS handshake failed: " + reason;
}

TransportSecurity::TransportSecurity(NodeCredentials credentials, Options options)
    : credentials_(std::make_shared<const NodeCredentials>(std::move(credentials))),
      options_(options) {
  if (options_.insecure) return;
  const auto& der = credentials_->certificate_der();
  const kj::ArrayPtr<const kj::byte> cert(der.data(), der.size());
  kj::TlsKeypair keypair{kj::TlsPrivateKey(kj::StringPtr(credentials_->tls_key_pem().c_str())),
                         kj::TlsCertificate(cert)};
  kj::TlsCertificate trusted(cert);
  kj::TlsContext::Options tls;
  tls.useSystemTrustStore = false;
  tls.verifyClients = true;
  tls.trustedCertificates = kj::arrayPtr(&trusted, 1);
  tls.defaultKeypair = keypair;
  tls.minVersion = kj::TlsVersion::TLS_1_2;  // kj 0.9 knows no 1.3 setting; see the header
  // The SSL_CTX takes its own references to key and certificates: the locals may go.
  tls_ = kj::heap<kj::TlsContext>(kj::mv(tls));
}

TransportSecurity::~TransportSecurity() = default;

kj::Promise<kj::Own<kj::AsyncIoStream>> TransportSecurity::wrap_client(
    kj::Own<kj::AsyncIoStream> stream) {
  if (!tls_) return kj::mv(stream);
  return refusing(tls_->wrapClient(kj::mv(stream), kTlsHostName));
}

kj::Promise<kj::Own<kj::AsyncIoStream>> TransportSecurity::wrap_server(
    kj::Own<kj::AsyncIoStream> stream) {
  if (!tls_) return kj::mv(stream);
  return refusing(tls_->wrapServer(kj::mv(stream)));
}

std::shared_ptr<TransportSecurity> make_transport_security(std::string_view secret,
                                                           bool insecure) {
  TransportSecurity::Options options;
  options.insecure = insecure;
  return std::make_shared<TransportSecurity>(NodeCredentials::derive(secret), options);
}

}  // namespace ravnest::wire
