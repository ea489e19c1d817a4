#include "libs/wire/transport_security.h"

#include <kj/compat/tls.h>
#include <kj/debug.h>

#include <mutex>
#include <thread>

#include "libs/wire/coalescing_stream.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/protocol_mismatch.h"

namespace ravnest::wire {

namespace {

// OpenSSL's reason: the end of its last error line ("error:0A000086:SSL routines::certificate
// verify failed" -> "certificate verify failed").
std::string reason_of(const kj::Exception& e) {
  const std::string reason = openssl_reason(std::string(e.getDescription().cStr()));
  return reason.empty() ? kj_reason(e) : reason;
}

// A client's handshake that the server cut (closed or reset before it finished: OpenSSL's "SSL
// unable to continue I/O", or the socket's own error): what a daemon does to a connection over
// its limits, before any byte it could explain itself with. Said so; still DISCONNECTED (a
// retry may find room), else nullptr.
kj::Maybe<kj::Exception> handshake_cut(const kj::Exception& e) {
  const std::string reason = kj_reason(e);
  if (e.getType() != kj::Exception::Type::DISCONNECTED &&
      reason.find("unable to continue I/O") == std::string::npos) {
    return nullptr;
  }
  return kj_failure("the node closed the connection during the TLS handshake (" + reason +
                        "): it may be at its connection limit (ravnestd.toml [limits] "
                        "connections, connections_per_peer)",
                    kj::Exception::Type::DISCONNECTED);
}

// `client`: the handshake is this end's as a client (handshake_cut applies).
kj::Promise<kj::Own<kj::AsyncIoStream>> refusing(
    kj::Promise<kj::Own<kj::AsyncIoStream>>&& handshake, bool client) {
  return handshake.catch_([client](kj::Exception&& e) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
    if (client) {
      KJ_IF_MAYBE(cut, handshake_cut(e)) { return kj::mv(*cut); }
    }
    if (e.getType() == kj::Exception::Type::DISCONNECTED) return kj::mv(e);
    return kj_failure(tls_refusal(e));
  });
}

}  // namespace

// The server's certificates by the name a client asks for: kPinnedHostName gets the daemon's own.
struct TransportSecurity::ServerNames final : public kj::TlsSniCallback {
  ServerNames(const std::optional<TlsIdentity>& own,
              std::shared_ptr<const NodeCredentials> credentials)
      : own_(own), credentials_(std::move(credentials)) {}
  kj::Maybe<kj::TlsKeypair> getKey(kj::StringPtr hostname) override {
    if (own_ && hostname == kPinnedHostName) {
      return keypair(own_->key_pem, own_->certificate_der);
    }
    return keypair(credentials_->tls_key_pem(), credentials_->certificate_der());
  }

 private:
  static kj::TlsKeypair keypair(const std::string& key_pem, const std::vector<uint8_t>& der) {
    return kj::TlsKeypair{kj::TlsPrivateKey(kj::StringPtr(key_pem.c_str())),
                          kj::TlsCertificate(kj::ArrayPtr<const kj::byte>(der.data(), der.size()))};
  }
  const std::optional<TlsIdentity>& own_;
  std::shared_ptr<const NodeCredentials> credentials_;
};

// The pins, and for each pinned certificate seen, a client context trusting it alone.
struct TransportSecurity::Pinned {
  std::mutex mutex;
  std::map<std::string, std::string> pins;                            // address -> fingerprint
  std::map<std::string, std::shared_ptr<kj::TlsContext>> contexts;  // fingerprint -> context
  std::map<std::string, std::vector<uint8_t>> certificates;          // fingerprint -> DER

  std::optional<std::string> pin_of(const std::string& address) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = pins.find(address);
    if (it == pins.end()) return std::nullopt;
    return it->second;
  }
  std::shared_ptr<kj::TlsContext> context_of(const std::string& fingerprint,
                                             std::vector<uint8_t>* der) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = contexts.find(fingerprint);
    if (it == contexts.end()) return nullptr;
    *der = certificates.at(fingerprint);
    return it->second;
  }
  // A client context that presents the secret's certificate and trusts `der` alone.
  std::shared_ptr<kj::TlsContext> add(const std::string& fingerprint,
                                      const std::vector<uint8_t>& der,
                                      const NodeCredentials& credentials) {
    const auto& own_der = credentials.certificate_der();
    kj::TlsKeypair keypair{
        kj::TlsPrivateKey(kj::StringPtr(credentials.tls_key_pem().c_str())),
        kj::TlsCertificate(kj::ArrayPtr<const kj::byte>(own_der.data(), own_der.size()))};
    kj::TlsCertificate trusted(kj::ArrayPtr<const kj::byte>(der.data(), der.size()));
    kj::TlsContext::Options tls;
    tls.useSystemTrustStore = false;
    tls.trustedCertificates = kj::arrayPtr(&trusted, 1);
    tls.defaultKeypair = keypair;
    tls.minVersion = kj::TlsVersion::TLS_1_2;
    auto context = std::make_shared<kj::TlsContext>(kj::mv(tls));
    std::lock_guard<std::mutex> lock(mutex);
    certificates.emplace(fingerprint, der);
    return contexts.emplace(fingerprint, std::move(context)).first->second;
  }
};

namespace {

// How long learning a pinned node's certificate may take, per step (connect, handshake).
constexpr double kFetchSeconds = 10;

kj::Promise<kj::Own<kj::AsyncIoStream>> pinned_handshake(
    std::shared_ptr<kj::TlsContext> context, kj::Own<kj::AsyncIoStream> stream,
    const std::string& address, const std::vector<uint8_t>& der) {
  // OpenSSL would refuse a certificate outside its dates as "certificate verify failed", which
  // says nothing of why: said here, with the dates, before the handshake.
  const std::string invalid = certificate_validity_problem(der);
  if (!invalid.empty()) {
    return kj_failure("refused: the certificate pinned for " + address + " " + invalid +
                      "; the node needs a certificate valid now (or a clock is wrong)");
  }
  auto handshake = context->wrapClient(kj::mv(stream), kPinnedHostName).attach(kj::mv(context));
  return handshake.catch_(
      [address](kj::Exception&& e) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
        KJ_IF_MAYBE(cut, handshake_cut(e)) { return kj::mv(*cut); }
        return kj_failure("refused: " + address + " does not show the certificate pinned for it (" +
                          tls_refusal(e).substr(9) + ")");
      });
}

}  // namespace

std::string tls_refusal(const kj::Exception& e) {
  const std::string reason = reason_of(e);
  // What a plain daemon answers a TLS client (protocol_mismatch.h); ravnest's TLS ends never
  // disagree on a version otherwise.
  if (reason.find("alert protocol version") != std::string::npos) return kDaemonSpeaksPlain;
  const bool certificate = reason.find("certificate") != std::string::npos ||
                           reason.find("unknown ca") != std::string::npos;
  return certificate ? "refused: wrong secret (TLS: " + reason + ")"
                     : "refused: TLS handshake failed: " + reason;
}

TransportSecurity::TransportSecurity(NodeCredentials credentials, Options options)
    : credentials_(std::make_shared<const NodeCredentials>(std::move(credentials))),
      options_(std::move(options)),
      pinned_(std::make_shared<Pinned>()) {
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
  tls_ = kj::heap<kj::TlsContext>(tls);
  if (!options_.own) return;
  // The server side then chooses its certificate by the name asked for, and has no default: kj
  // 0.9 sets the chosen key before its certificate, which OpenSSL refuses while the default's
  // certificate is still there ("key values mismatch"). Every ravnest client asks for a name.
  names_ = kj::heap<ServerNames>(options_.own, credentials_);
  tls.defaultKeypair = nullptr;
  tls.sniCallback = kj::Maybe<kj::TlsSniCallback&>(*names_);
  server_tls_ = kj::heap<kj::TlsContext>(kj::mv(tls));
}

TransportSecurity::~TransportSecurity() = default;

void TransportSecurity::set_pins(std::map<std::string, std::string> pins) {
  std::lock_guard<std::mutex> lock(pinned_->mutex);
  pinned_->pins = std::move(pins);
}

kj::Promise<kj::Own<kj::AsyncIoStream>> TransportSecurity::wrap_client(
    kj::Own<kj::AsyncIoStream> stream, const std::string& address) {
  if (!tls_) return kj::mv(stream);
  stream = kj::heap<CoalescingStream>(kj::mv(stream));  // TLS records in few syscalls
  const auto pin = pinned_->pin_of(address);
  if (!pin) return refusing(tls_->wrapClient(kj::mv(stream), kTlsHostName), true);
  std::vector<uint8_t> known;
  if (auto context = pinned_->context_of(*pin, &known)) {
    return pinned_handshake(std::move(context), kj::mv(stream), address, known);
  }
  // First contact: learn the certificate on a connection of its own, on a thread of its own
  // (OpenSSL's blocking client; this thread's event loop goes on meanwhile).
  auto learnt = kj::newPromiseAndCrossThreadFulfiller<std::vector<uint8_t>>();
  // Held by a shared_ptr: std::thread needs a callable whose destructor cannot throw.
  auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<std::vector<uint8_t>>>>(
      kj::mv(learnt.fulfiller));
  std::thread([fulfiller, address, credentials = credentials_]() {
    try {
      (*fulfiller)->fulfill(fetch_server_certificate(address, *credentials, kFetchSeconds));
    } catch (const std::exception& e) {
      (*fulfiller)->reject(kj_failure("refused: cannot learn the certificate of " + address + ": " +
                                   e.what()));
    }
  }).detach();
  return learnt.promise.then(
      [pinned = pinned_, credentials = credentials_, pin = *pin, address,
       stream = kj::mv(stream)](std::vector<uint8_t> der) mutable
      -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
        const std::string shown = certificate_fingerprint(der);
        if (shown != pin) {
          return kj_failure("refused: " + address + " shows the certificate " + shown +
                            ", not the one pinned for it (" + pin + ")");
        }
        return pinned_handshake(pinned->add(pin, der, *credentials), kj::mv(stream), address,
                                der);
      });
}

kj::Promise<kj::Own<kj::AsyncIoStream>> TransportSecurity::wrap_server(
    kj::Own<kj::AsyncIoStream> stream) {
  if (!tls_) return kj::mv(stream);
  stream = kj::heap<CoalescingStream>(kj::mv(stream));  // TLS records in few syscalls
  return refusing((server_tls_ ? *server_tls_ : *tls_).wrapServer(kj::mv(stream)), false);
}

std::shared_ptr<TransportSecurity> make_transport_security(std::string_view secret,
                                                           bool insecure,
                                                           std::optional<TlsIdentity> own) {
  TransportSecurity::Options options;
  options.insecure = insecure;
  options.own = std::move(own);
  return std::make_shared<TransportSecurity>(NodeCredentials::derive(secret), std::move(options));
}

}  // namespace ravnest::wire
