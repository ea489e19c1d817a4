#include "libs/wire/relay_link.h"

#include "libs/base/address.h"
#include "libs/base/printable.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/relay.h"
#include "libs/wire/relay_table.h"

namespace ravnest::wire {
namespace {

constexpr auto kRetryDelay = 2 * kj::SECONDS;
constexpr auto kAnswerTimeout = 10 * kj::SECONDS;

kj::Promise<void> write_text(kj::AsyncIoStream& stream, std::string text) {
  auto owned = kj::heap<std::string>(std::move(text));
  auto& t = *owned;
  return stream.write(t.data(), t.size()).attach(kj::mv(owned));
}

}  // namespace

RelayLink::RelayLink(std::string relay, uint16_t port, Adopt adopt,
                     std::function<void(const std::string&)> on_event,
                     std::shared_ptr<const NodeCredentials> credentials)
    : io_(ThreadIo::get()), relay_(std::move(relay)), asked_port_(port), adopt_(std::move(adopt)),
      on_event_(std::move(on_event)), credentials_(std::move(credentials)), tasks_(*this) {}

RelayLink::~RelayLink() noexcept(false) = default;

void RelayLink::say(const std::string& line) {
  if (on_event_) on_event_(line);
}

void RelayLink::taskFailed(kj::Exception&& exception) {
  say("relay " + relay_ + ": a session could not be joined: " + kj_reason(exception));
}

std::string RelayLink::relayed_address() const {
  if (held_port_ == 0) return "";
  const auto relay = base::Address::try_parse(relay_);
  if (!relay) return "";
  auto host = relay->host();
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return host + ":" + std::to_string(held_port_);
}

kj::Promise<void> RelayLink::run() {
  return control_once()
      .catch_([this](kj::Exception&& e) {
        held_port_ = 0;
        say("relay " + relay_ + ": " + kj_reason(e) + "; trying again in 2 s");
      })
      .then([this]() { return io_->timer().afterDelay(kRetryDelay); })
      .then([this]() { return run(); });
}

kj::Promise<void> RelayLink::control_once() {
  return io_->network()
      .parseAddress(relay_)
      .then([](kj::Own<kj::NetworkAddress> address) {
        return address->connect().attach(kj::mv(address));
      })
      .then([this](kj::Own<kj::AsyncIoStream> control) {
        auto& c = *control;
        return write_text(c, control_hello(asked_port_))
            .then([this, &c]() {
              return io_->timer().timeoutAfter(kAnswerTimeout, read_relay_line(c));
            })
            .then([this, &c](std::string line) -> kj::Promise<std::string> {
              // A relay that asks for a proof of the secret first (relay_table.h).
              if (line.rfind("challenge ", 0) != 0) return kj::mv(line);
              std::string why;
              auto nonce = parse_challenge_line(line, why);
              if (!nonce) return kj_failure("the relay said " + why);
              if (!credentials_) {
                return kj_failure("the relay asks for a proof of the secret; this node has no "
                                  "secret to prove");
              }
              const RelayNonce mine = fresh_nonce();
              const auto proof = credentials_->gate_proof(GateSide::kClient, *nonce, mine);
              return write_text(c, proof_line(mine, proof)).then([this, &c]() {
                return io_->timer().timeoutAfter(kAnswerTimeout, read_relay_line(c));
              });
            })
            .then([this, &c](std::string line) -> kj::Promise<void> {
              std::string why;
              auto port = parse_allocated_line(line, why);
              if (!port) return kj_failure(why);
              held_port_ = *port;
              say("relay " + relay_ + ": reached at " + relayed_address());
              return follow(c);
            })
            .attach(kj::mv(control));
      });
}

kj::Promise<void> RelayLink::follow(kj::AsyncIoStream& control) {
  return read_relay_line(control).then([this, &control](std::string line) {
    std::string why;
    auto opened = parse_open_line(line, why);
    if (!opened) return kj::Promise<void>(kj_failure("the relay said " + why));
    open(opened->session, opened->peer, opened->nonce);
    return follow(control);
  });
}

void RelayLink::open(uint64_t session, const std::string& peer, const RelayNonce& nonce) {
  // A relay without the secret does not look at the proof; this node without one sends zeros.
  const RelayNonce proof = credentials_ ? Relay::join_proof(*credentials_, nonce) : RelayNonce{};
  tasks_.add(io_->network()
                 .parseAddress(relay_)
                 .then([](kj::Own<kj::NetworkAddress> address) {
                   return address->connect().attach(kj::mv(address));
                 })
                 .then([this, session, peer, proof](kj::Own<kj::AsyncIoStream> stream) {
                   auto& s = *stream;
                   return write_text(s, join_hello(session, proof))
                       .then([this, &s]() {
                         return io_->timer().timeoutAfter(kAnswerTimeout, read_relay_line(s));
                       })
                       .then([this, peer, stream = kj::mv(stream)](std::string line) mutable
                             -> kj::Promise<void> {
                         if (line + "\n" != kJoinedLine) {
                           return kj_failure("the relay answered a join with \"" +
                                             base::printable_quoted(line, 64) + "\"");
                         }
                         adopt_(kj::mv(stream), peer);
                         return kj::READY_NOW;
                       });
                 }));
}

}  // namespace ravnest::wire
