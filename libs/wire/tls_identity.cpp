#include "libs/wire/tls_identity.h"

#include <netdb.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <memory>
#include <stdexcept>

#include "libs/base/address.h"
#include "libs/base/atomic_file.h"
#include "libs/base/sha256.h"
#include "libs/wire/openssl_ptr.h"

namespace ravnest::wire {

namespace {

using PemBio = OpensslPtr<BIO, BIO_free_all>;
using X509Cert = OpensslPtr<X509, X509_free>;
using PrivateKey = OpensslPtr<EVP_PKEY, EVP_PKEY_free>;
using ClientContext = OpensslPtr<SSL_CTX, SSL_CTX_free>;
using ClientSsl = OpensslPtr<SSL, SSL_free>;

// OpenSSL's last error, short ("certificate verify failed"), and the queue emptied.
std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown error";
  const char* reason = ERR_reason_error_string(code);
  return reason != nullptr ? reason : "unknown error";
}

std::string read_pem(const std::string& path, const char* what) {
  try {
    return base::read_file(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(e.what()) + " (the TLS " + what + ")");
  }
}

std::vector<uint8_t> der_of(X509* cert) {
  unsigned char* der = nullptr;
  const int size = i2d_X509(cert, &der);
  if (size <= 0) throw std::runtime_error("cannot encode a certificate: " + openssl_error());
  std::vector<uint8_t> out(der, der + size);
  OPENSSL_free(der);
  return out;
}

struct OwnedSocket {
  int fd = -1;
  ~OwnedSocket() {
    if (fd >= 0) ::close(fd);
  }
};

// A connected TCP socket, every send and receive (connect included) bounded by `timeout`.
void connect_bounded(const std::string& address, double timeout_seconds, OwnedSocket& out) {
  const auto parsed = base::Address::try_parse(address);
  if (!parsed) throw std::runtime_error("address \"" + address + "\" is not host:port");
  const std::string& host = parsed->host();
  const std::string port = std::to_string(parsed->port());
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &list); rc != 0) {
    throw std::runtime_error("cannot resolve " + address + ": " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(list, freeaddrinfo);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_seconds);
  tv.tv_usec = static_cast<suseconds_t>(std::fmod(timeout_seconds, 1.0) * 1e6);
  int last_error = 0;
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    OwnedSocket fd;
    fd.fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd.fd < 0) {
      last_error = errno;
      continue;
    }
    // Linux bounds connect() by SO_SNDTIMEO.
    ::setsockopt(fd.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (::connect(fd.fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      std::swap(out.fd, fd.fd);
      return;
    }
    last_error = errno;
  }
  throw std::runtime_error("cannot connect to " + address + ": " + std::strerror(last_error));
}

// "2030-01-01 00:00:00 UTC"
std::string time_text(const ASN1_TIME* time) {
  struct tm parts {};
  if (time == nullptr || ASN1_TIME_to_tm(time, &parts) != 1) return "an unreadable date";
  char text[64];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &parts);
  return text;
}

// Empty, or why `cert` is not valid now, with its dates.
std::string validity_problem(X509* cert) {
  const ASN1_TIME* not_before = X509_get0_notBefore(cert);
  const ASN1_TIME* not_after = X509_get0_notAfter(cert);
  const std::string dates =
      "(valid from " + time_text(not_before) + " to " + time_text(not_after) + ")";
  if (X509_cmp_current_time(not_before) >= 0) return "is not valid yet " + dates;
  if (X509_cmp_current_time(not_after) <= 0) return "has expired " + dates;
  return {};
}

}  // namespace

std::string certificate_validity_problem(const std::vector<uint8_t>& certificate_der) {
  const unsigned char* p = certificate_der.data();
  X509Cert cert(d2i_X509(nullptr, &p, static_cast<long>(certificate_der.size())));
  if (!cert) {
    ERR_clear_error();
    return "is not a certificate";
  }
  return validity_problem(cert.get());
}

std::string certificate_fingerprint(const std::vector<uint8_t>& certificate_der) {
  return base::sha256_hex(std::string_view(reinterpret_cast<const char*>(certificate_der.data()),
                                             certificate_der.size()));
}

TlsIdentity load_tls_identity(const std::string& certificate_path, const std::string& key_path) {
  TlsIdentity out;
  out.certificate_pem = read_pem(certificate_path, "certificate");
  out.key_pem = read_pem(key_path, "key");
  PemBio cert_bio(BIO_new_mem_buf(out.certificate_pem.data(), static_cast<int>(out.certificate_pem.size())));
  X509Cert cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    ERR_clear_error();
    throw std::runtime_error(certificate_path + ": not a PEM certificate");
  }
  // A pass phrase would have to be typed at every start of a service: refused at once instead
  // of prompting on a terminal that is not there.
  auto no_password = [](char*, int, int, void*) -> int { return -1; };
  PemBio key_bio(BIO_new_mem_buf(out.key_pem.data(), static_cast<int>(out.key_pem.size())));
  PrivateKey key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_password, nullptr));
  if (!key) {
    ERR_clear_error();
    throw std::runtime_error(key_path + ": not an unencrypted PEM private key");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    throw std::runtime_error(key_path + ": not the private key of the certificate " +
                             certificate_path);
  }
  if (X509_check_host(cert.get(), kPinnedHostName, 0, 0, nullptr) != 1) {
    ERR_clear_error();
    throw std::runtime_error(certificate_path + ": the certificate must be issued to \"" +
                             std::string(kPinnedHostName) +
                             "\" (CN or DNS name; docs/security.md shows how to make one)");
  }
  // A certificate not valid yet would be accepted here and refused by every client's check
  // of it, which the client could only report as a failed handshake.
  const std::string invalid = validity_problem(cert.get());
  if (!invalid.empty()) throw std::runtime_error(certificate_path + ": the certificate " + invalid);
  out.certificate_der = der_of(cert.get());
  out.fingerprint = certificate_fingerprint(out.certificate_der);
  return out;
}

std::vector<uint8_t> fetch_server_certificate(const std::string& address,
                                              const NodeCredentials& client,
                                              double timeout_seconds) {
  OwnedSocket fd;
  connect_bounded(address, timeout_seconds, fd);
  ClientContext ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) throw std::runtime_error("TLS: " + openssl_error());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // The certificate is checked by its fingerprint afterwards, not by a chain.
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  const auto& der = client.certificate_der();
  const unsigned char* p = der.data();
  X509Cert own(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
  PemBio key_bio(BIO_new_mem_buf(client.tls_key_pem().data(), static_cast<int>(client.tls_key_pem().size())));
  PrivateKey key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!own || !key || SSL_CTX_use_certificate(ctx.get(), own.get()) != 1 ||
      SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1) {
    throw std::runtime_error("TLS: cannot use the secret's certificate: " + openssl_error());
  }
  ClientSsl ssl(SSL_new(ctx.get()));
  if (!ssl || SSL_set_fd(ssl.get(), fd.fd) != 1 ||
      SSL_set_tlsext_host_name(ssl.get(), kPinnedHostName) != 1) {
    throw std::runtime_error("TLS: " + openssl_error());
  }
  if (SSL_connect(ssl.get()) != 1) {
    const std::string why = openssl_error();
    throw std::runtime_error("no TLS handshake with " + address + ": " +
                             (why == "unknown error" ? std::string(std::strerror(errno)) : why));
  }
  X509Cert shown(SSL_get1_peer_certificate(ssl.get()));
  if (!shown) throw std::runtime_error(address + " showed no certificate");
  std::vector<uint8_t> out = der_of(shown.get());
  // A clean close, so that the daemon sees a connection that ended rather than a broken
  // handshake (which it would log as a refusal).
  SSL_shutdown(ssl.get());
  ::shutdown(fd.fd, SHUT_WR);
  char sink[256];
  while (SSL_read(ssl.get(), sink, sizeof(sink)) > 0) {
  }
  ERR_clear_error();
  return out;
}

}  // namespace ravnest::wire
