#include "libs/tracker/tracker_client.h"

#include <map>
#include <stdexcept>
#include <utility>

#include <capnp/capability.h>
#include <spdlog/spdlog.h>

#include "libs/base/clock.h"
#include "libs/tracker/tracker_gate.h"
#include "libs/tracker/tracker_state.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/rpc_connection.h"
#include "libs/wire/thread_io.h"

namespace ravnest::tracker {

namespace {

kj::Duration seconds(double s) { return static_cast<int64_t>(s * 1e3) * kj::MILLISECONDS; }

wire::ConnectionOptions connection_options(
    const std::shared_ptr<wire::TransportSecurity>& security) {
  wire::ConnectionOptions options;
  options.security = security;
  options.max_message_bytes = uint64_t{64} << 20;
  return options;
}

}  // namespace

PoolSnapshot fetch_pool(const std::string& address,
                        const std::shared_ptr<wire::TransportSecurity>& security,
                        double timeout_seconds) {
  auto io = wire::ThreadIo::get();
  PoolSnapshot snapshot;
  try {
    wire::RpcClient client(address, connection_options(security));
    auto tracker = open_tracker_gate(client.main<schema::TrackerGate>(),
                                     security->credentials(), client.trust());
    std::string malformed;
    auto answer = tracker.poolRequest().send().then(
        [&snapshot, &malformed](capnp::Response<schema::Tracker::PoolResults>&& pool) {
          try {
            snapshot = decode_pool(pool);
          } catch (const wire::WireError& e) {
            malformed = e.what();
          }
          return true;
        });
    const bool answered =
        answer
            .exclusiveJoin(io->timer().afterDelay(seconds(timeout_seconds)).then([]() {
              return false;
            }))
            .wait(io->wait_scope());
    if (!answered) {
      throw std::runtime_error("tracker " + address + ": no answer in " +
                               std::to_string(static_cast<int>(timeout_seconds)) + " s");
    }
    if (!malformed.empty()) throw std::runtime_error("tracker " + address + ": " + malformed);
  } catch (const kj::Exception& e) {
    throw std::runtime_error("tracker " + address + ": " + wire::kj_reason(e));
  }
  return snapshot;
}

struct TrackerLink::Session {
  kj::Own<wire::RpcClient> client;
  schema::Tracker::Client tracker = nullptr;
};

TrackerLink::TrackerLink(std::string address, std::shared_ptr<wire::TransportSecurity> security,
                         Registration registration, kj::Timer& timer, uint64_t probe_bytes,
                         double retry_seconds)
    : address_(std::move(address)),
      security_(std::move(security)),
      registration_(std::move(registration)),
      timer_(timer),
      probe_bytes_(probe_bytes),
      retry_seconds_(retry_seconds) {}

TrackerLink::~TrackerLink() = default;

kj::Promise<void> TrackerLink::run() {
  return kj::evalNow([this]() { return session(); })
      .then([]() {}, [this](kj::Exception&& e) {
        registered_.reset();
        const std::string problem = wire::kj_reason(e);
        if (problem != last_problem_) {
          spdlog::warn("tracker {}: {}; trying again every {} s", address_, problem,
                       retry_seconds_);
          last_problem_ = problem;
        }
      })
      .then([this]() { return timer_.afterDelay(seconds(retry_seconds_)); })
      .then([this]() { return run(); });
}

// One connection: probe, the dial-back when asked for (`--relay auto`), register, heartbeat until
// something fails.
kj::Promise<void> TrackerLink::session() {
  auto s = std::make_shared<Session>();
  s->client = kj::heap<wire::RpcClient>(address_, connection_options(security_));
  s->tracker = open_tracker_gate(s->client->main<schema::TrackerGate>(), security_->credentials(),
                                 s->client->trust());
  // A small call first, so that the timed upload does not count the handshake.
  auto warm = s->tracker.heartbeatRequest();
  warm.setName(registration_.name);
  return warm.send()
      .then([this, s](auto&&) {
        auto probe = s->tracker.probeRequest();
        probe.initPayload(static_cast<unsigned>(probe_bytes_));
        const double start = base::now_seconds();
        return probe.send().then([this, start](auto&&) {
          const double elapsed = std::max(base::now_seconds() - start, 1e-6);
          registration_.hardware.bandwidth_mbps =
              static_cast<double>(probe_bytes_) * 8 / elapsed / 1e6;
        });
      })
      .then([this, s]() { return reach(s); })
      .then([this, s]() {
        auto request = s->tracker.registerRequest();
        encode_registration(registration_, request.initRegistration());
        return request.send();
      })
      .then([this, s](capnp::Response<schema::Tracker::RegisterResults>&& registered) {
        registered_ = s;
        const double interval = registered.getHeartbeatSeconds();
        spdlog::info("registered with tracker {} as {} (epoch {}; {:.0f} Mbit/s to it); "
                     "heartbeat every {} s",
                     address_, registration_.name, registered.getEpoch(),
                     registration_.hardware.bandwidth_mbps, interval);
        last_problem_.clear();
        return heartbeats(s, interval > 0 ? interval : 10);
      });
}

kj::Promise<void> TrackerLink::reach(std::shared_ptr<Session> s) {
  if (!reach_.decide) return kj::READY_NOW;
  auto request = s->tracker.dialBackRequest();
  request.setPort(reach_.port);
  return request.send()
      .then([this](capnp::Response<schema::Tracker::DialBackResults>&& answer) {
        DialBack dial_back;
        dial_back.reached = answer.getReached();
        dial_back.why = answer.getWhy();
        for (auto relay : answer.getRelays()) dial_back.relays.emplace_back(relay);
        return reach_.decide(dial_back);
      })
      .then([this](std::vector<std::string> addresses) {
        registration_.addresses = std::move(addresses);
      });
}

void TrackerLink::ask_again() {
  if (!reach_.decide) return;
  if (again_ && again_->isWaiting()) {
    again_->fulfill();
  } else {
    again_asked_ = true;
  }
}

kj::Promise<void> TrackerLink::reach_again(std::shared_ptr<Session> s) {
  const std::vector<std::string> before = registration_.addresses;
  return reach(s)
      .then([this, s, before]() -> kj::Promise<void> {
        if (registration_.addresses == before) return kj::READY_NOW;
        auto request = s->tracker.registerRequest();
        encode_registration(registration_, request.initRegistration());
        return request.send().then([this](auto&&) {
          spdlog::info("registered with tracker {} as {} at {} now", address_, registration_.name,
                       registration_.addresses.front());
        });
      })
      .catch_([this](kj::Exception&& e) {
        spdlog::warn("tracker {}: asked again: {}; registered as before", address_,
                     wire::kj_reason(e));
      });
}

kj::Promise<void> TrackerLink::leave() {
  if (!registered_) return kj::READY_NOW;
  auto request = registered_->tracker.leaveRequest();
  request.setName(registration_.name);
  return request.send()
      .then([this](capnp::Response<schema::Tracker::LeaveResults>&& left) {
        if (left.getLeft()) spdlog::info("left tracker {}", address_);
      })
      .catch_([](kj::Exception&&) {});
}

kj::Promise<void> TrackerLink::heartbeats(std::shared_ptr<Session> s, double interval) {
  // The wait ends early when ask_again() is called: a dial-back and maybe a new registration
  // first, then the heartbeat.
  auto asked = kj::newPromiseAndFulfiller<void>();
  again_ = kj::mv(asked.fulfiller);
  if (std::exchange(again_asked_, false)) again_->fulfill();
  return timer_.afterDelay(seconds(interval))
      .then([]() { return false; })
      .exclusiveJoin(asked.promise.then([]() { return true; }))
      .then([this, s](bool again) -> kj::Promise<void> {
        if (again) return reach_again(s);
        return kj::READY_NOW;
      })
      .then([this, s]() {
        auto request = s->tracker.heartbeatRequest();
        request.setName(registration_.name);
        return request.send();
      })
      .then([this, s, interval](
                capnp::Response<schema::Tracker::HeartbeatResults>&& beat) -> kj::Promise<void> {
        if (!beat.getKnown()) {
          spdlog::warn("tracker {} no longer knows {} (expired): registering again", address_,
                       registration_.name);
          auto request = s->tracker.registerRequest();
          encode_registration(registration_, request.initRegistration());
          return request.send().then([this, s, interval](auto&&) {
                return heartbeats(s, interval);
          });
        }
        return heartbeats(s, interval);
      });
}

}  // namespace ravnest::tracker
