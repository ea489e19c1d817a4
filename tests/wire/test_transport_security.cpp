// The secret's credentials and the TLS they run (libs/wire/node_credentials.h,
// transport_security.h): the same secret gives the same Ed25519 key and certificate everywhere,
// and a TLS handshake over 127.0.0.1 succeeds between two parties that derived them from the
// same secret and is refused, on both ends, otherwise.
#include <catch2/catch.hpp>

#include <string>

#include <kj/async-io.h>
#include <kj/debug.h>

#include "libs/wire/kj_reason.h"
#include "libs/wire/node_credentials.h"
#include "libs/wire/thread_io.h"
#include "libs/wire/transport_security.h"

using namespace ravnest::wire;

TEST_CASE("credentials: one secret, one key and certificate", "[wire][security]") {
  const auto a = NodeCredentials::derive("correct horse battery staple");
  const auto again = NodeCredentials::derive("correct horse battery staple");
  const auto b = NodeCredentials::derive("correct horse battery stable");
  CHECK(a.certificate_der() == again.certificate_der());
  CHECK(a.tls_key_pem() == again.tls_key_pem());
  CHECK(a.fingerprint() == again.fingerprint());
  CHECK(a.certificate_der() != b.certificate_der());
  CHECK(a.fingerprint() != b.fingerprint());
  CHECK(a.fingerprint().size() == 64);
  CHECK(a.tls_key_pem().find("BEGIN PRIVATE KEY") != std::string::npos);

  const GateBytes server = fresh_nonce(), client = fresh_nonce();
  CHECK(server != client);
  const auto proof = a.gate_proof(GateSide::kClient, server, client);
  CHECK(proof == again.gate_proof(GateSide::kClient, server, client));
  CHECK(proof != a.gate_proof(GateSide::kServer, server, client));  // one side's is not the other's
  CHECK(proof != b.gate_proof(GateSide::kClient, server, client));
  CHECK(proof != a.gate_proof(GateSide::kClient, client, server));
  CHECK(proof_matches(proof, proof.data(), proof.size()));
  CHECK_FALSE(proof_matches(proof, proof.data(), proof.size() - 1));
  auto forged = proof;
  forged[31] ^= 1;
  CHECK_FALSE(proof_matches(proof, forged.data(), forged.size()));
}

namespace {

struct Outcome {
  std::string client;  // what the client read, or its error
  std::string server;
};

// One connection over 127.0.0.1: the server (security `server`) answers "world" to "hello".
Outcome handshake(TransportSecurity& server, TransportSecurity& client) {
  auto io = ThreadIo::get();
  auto& ws = io->wait_scope();
  auto listener = io->network().parseAddress("127.0.0.1", 0).wait(ws)->listen();
  auto served =
      listener->accept()
          .then([&](kj::Own<kj::AsyncIoStream> s) { return server.wrap_server(kj::mv(s)); })
          .then([](kj::Own<kj::AsyncIoStream> s) {
            auto buffer = kj::heapArray<char>(5);
            auto read = s->read(buffer.begin(), 5);
            return read.then([s = kj::mv(s), buffer = kj::mv(buffer)]() mutable {
              auto written = s->write("world", 5);
              return written.attach(kj::mv(s), kj::mv(buffer));
            });
          })
          .then([]() { return std::string("ok"); },
                [](kj::Exception&& e) { return kj_reason(e); });
  auto asked =
      io->network()
          .parseAddress("127.0.0.1", listener->getPort())
          .then([](kj::Own<kj::NetworkAddress> to) { return to->connect().attach(kj::mv(to)); })
          .then([&](kj::Own<kj::AsyncIoStream> s) { return client.wrap_client(kj::mv(s)); })
          .then([](kj::Own<kj::AsyncIoStream> s) {
            auto written = s->write("hello", 5);
            return written.then([s = kj::mv(s)]() mutable {
              auto buffer = kj::heapArray<char>(5);
              auto read = s->read(buffer.begin(), 5);
              return read.then([buffer = kj::mv(buffer)]() { return std::string(buffer.begin(), 5); })
                  .attach(kj::mv(s));
            });
          })
          .then([](std::string got) { return got; },
                [](kj::Exception&& e) { return kj_reason(e); });
  auto both = kj::joinPromises(kj::arr(kj::mv(asked), kj::mv(served))).wait(ws);
  return {both[0], both[1]};
}

}  // namespace

TEST_CASE("TLS: the same secret connects, another is refused on both ends", "[wire][security]") {
  auto server = make_transport_security("the plan's secret");
  auto same = make_transport_security("the plan's secret");
  auto other = make_transport_security("another secret");

  const auto good = handshake(*server, *same);
  CHECK(good.client == "world");
  CHECK(good.server == "ok");

  const auto bad = handshake(*server, *other);
  INFO(bad.client << " | " << bad.server);
  CHECK(bad.client.rfind("refused: wrong secret (TLS: ", 0) == 0);
  CHECK(bad.server.rfind("refused: wrong secret (TLS: ", 0) == 0);

  // One end plain (--insecure), the other TLS: refused, not hung.
  auto plain = make_transport_security("the plan's secret", /*insecure=*/true);
  const auto mixed = handshake(*server, *plain);
  CHECK(mixed.server.rfind("refused: TLS handshake failed", 0) == 0);
}
