#include "libs/wire/relay.h"

#include <kj/debug.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "libs/wire/kj_reason.h"
#include "libs/wire/rpc_connection.h"

namespace ravnest::wire {
namespace {

constexpr size_t kSpliceBufferBytes = 64 * 1024;

kj::Promise<std::string> read_line_from(kj::AsyncIoStream& stream, kj::Own<std::string> line) {
  auto byte = kj::heap<kj::byte>(0);
  auto& b = *byte;
  return stream.tryRead(&b, 1, 1).then(
      [&stream, line = kj::mv(line), byte = kj::mv(byte)](size_t n) mutable
      -> kj::Promise<std::string> {
        if (n == 0) {
          return kj_failure(line->empty() ? "closed before a line"
                                          : "closed in the middle of a line",
                            kj::Exception::Type::DISCONNECTED);
        }
        if (*byte == '\n') return std::string(kj::mv(*line));
        if (line->size() >= kRelayLineBytes) {
          return kj_failure("a line longer than " + std::to_string(kRelayLineBytes) + " bytes");
        }
        line->push_back(static_cast<char>(*byte));
        return read_line_from(stream, kj::mv(line));
      });
}

kj::Promise<void> write_line(kj::AsyncIoStream& stream, const std::string& line) {
  auto owned = kj::heap<std::string>(line);
  auto& text = *owned;
  return stream.write(text.data(), text.size()).attach(kj::mv(owned));
}

}  // namespace

kj::Promise<std::string> read_relay_line(kj::AsyncIoStream& stream) {
  return read_line_from(stream, kj::heap<std::string>());
}

// A node's relayed port: its control connection, the listener peers dial, its queue of lines.
struct Relay::Held {
  uint16_t port = 0;
  std::string host;  // of the control connection
  kj::Own<kj::AsyncIoStream> control;
  kj::Own<kj::ConnectionReceiver> listener;
  kj::Promise<void> writes = kj::READY_NOW;  // "open" lines, one after the other
  kj::Promise<void> accepting = nullptr;     // after `listener`: cancelled before it goes
};

// Two streams spliced: each direction's buffer, the time of the last byte either way.
struct Relay::Splice {
  uint64_t session = 0;
  kj::Own<kj::AsyncIoStream> peer;
  kj::Own<kj::AsyncIoStream> node;
  kj::Array<kj::byte> up = kj::heapArray<kj::byte>(kSpliceBufferBytes);    // peer -> node
  kj::Array<kj::byte> down = kj::heapArray<kj::byte>(kSpliceBufferBytes);  // node -> peer
  uint64_t towards_node = 0;
  double last_byte = 0;
  bool stalled = false;  // a stall tamper happened: nothing more is read or forwarded
};

Relay::Relay(const std::string& host, uint16_t port, Options options)
    : io_(ThreadIo::get()), host_(host), options_(std::move(options)), table_(options_.limits),
      tasks_(*this) {
  auto address = io_->network().parseAddress(host, port).wait(io_->wait_scope());
  listener_ = address->listen();
  port_ = static_cast<uint16_t>(listener_->getPort());
  tasks_.add(accept_loop());
  tasks_.add([this]() -> kj::Promise<void> {
    // Once a second: sessions whose node did not join in time go.
    struct Tick {
      static kj::Promise<void> run(Relay* relay) {
        return relay->io_->timer().afterDelay(1 * kj::SECONDS).then([relay]() {
          for (uint64_t session : relay->table_.expire(relay->now())) {
            relay->pending_.erase(session);
            relay->say("relay: session " + std::to_string(session) + ": the node did not join in " +
                       std::to_string(static_cast<int>(relay->options_.limits.join_seconds)) +
                       " s; the peer is closed");
          }
          return run(relay);
        });
      }
    };
    return Tick::run(this);
  }());
}

Relay::~Relay() noexcept(false) = default;

double Relay::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Relay::say(const std::string& line) {
  if (!options_.on_event || !log_budget_.take(now())) return;
  if (const uint64_t left_out = log_budget_.left_out(); left_out > 0) {
    options_.on_event("relay: " + std::to_string(left_out) + " lines not logged (more than " +
                      std::to_string(static_cast<int>(log_budget_.per_second())) + " a second)");
  }
  options_.on_event(line);
}

void Relay::taskFailed(kj::Exception&& exception) {
  say("relay: " + kj_reason(exception));
}

kj::Promise<void> Relay::accept_loop() {
  return listener_->accept()
      .then([this](kj::Own<kj::AsyncIoStream> stream) {
        tasks_.add(greet(kj::mv(stream)));
        return accept_loop();
      })
      .catch_([this](kj::Exception&& e) {
        say("relay: accept failed: " + kj_reason(e));
        return io_->timer().afterDelay(100 * kj::MILLISECONDS).then([this]() {
          return accept_loop();
        });
      });
}

kj::Promise<void> Relay::refuse(kj::Own<kj::AsyncIoStream> stream, const std::string& peer,
                                const std::string& refusal) {
  say("relay: " + peer + " " + refusal);
  auto& s = *stream;
  return io_->timer()
      .timeoutAfter(2 * kj::SECONDS, write_line(s, refusal + "\n"))
      .then([&s]() { s.shutdownWrite(); }, [](kj::Exception&&) {})
      .attach(kj::mv(stream));
}

kj::Promise<void> Relay::greet(kj::Own<kj::AsyncIoStream> stream) {
  const std::string peer = peer_address(*stream);
  auto& s = *stream;
  auto line = io_->timer().timeoutAfter(options_.hello_timeout, read_relay_line(s));
  return line.then(
      [this, stream = kj::mv(stream), peer](std::string text) mutable -> kj::Promise<void> {
        std::string why;
        auto hello = parse_relay_hello(text, why);
        if (!hello) return refuse(kj::mv(stream), peer, "refused: " + why);
        if (hello->kind == RelayHello::Kind::kControl) {
          if (options_.credentials) return challenge(kj::mv(stream), peer, hello->port);
          return hold(kj::mv(stream), peer_host(peer), hello->port);
        }
        return join(kj::mv(stream), peer_host(peer), hello->session, hello->proof);
      },
      [this, peer](kj::Exception&& e) -> kj::Promise<void> {
        // A port probe that connects and leaves is no refusal.
        if (e.getType() != kj::Exception::Type::DISCONNECTED) {
          say("relay: " + peer + " refused: no hello line: " + kj_reason(e));
        }
        return kj::READY_NOW;
      });
}

kj::Promise<void> Relay::challenge(kj::Own<kj::AsyncIoStream> control, const std::string& peer,
                                   uint16_t asked) {
  const RelayNonce nonce = fresh_nonce();
  auto& c = *control;
  return write_line(c, challenge_line(nonce))
      .then([this, &c]() {
        return io_->timer().timeoutAfter(options_.hello_timeout, read_relay_line(c));
      })
      .then(
          [this, control = kj::mv(control), peer, asked, nonce](std::string text) mutable
          -> kj::Promise<void> {
            std::string why;
            auto answer = parse_proof_line(text, why);
            if (!answer) return refuse(kj::mv(control), peer, "refused: " + why);
            const auto expected =
                options_.credentials->gate_proof(GateSide::kClient, nonce, answer->client_nonce);
            if (!proof_matches(expected, answer->proof.data(), answer->proof.size())) {
              return refuse(kj::mv(control), peer,
                            "refused: wrong secret (the proof of the relay's challenge does not "
                            "match)");
            }
            return hold(kj::mv(control), peer_host(peer), asked);
          },
          [this, peer](kj::Exception&& e) -> kj::Promise<void> {
            say("relay: " + peer + " refused: no proof of the secret: " + kj_reason(e));
            return kj::READY_NOW;
          });
}

kj::Promise<void> Relay::hold(kj::Own<kj::AsyncIoStream> control, const std::string& host,
                              uint16_t asked) {
  std::string refusal = table_.may_hold(host);
  if (!refusal.empty()) return refuse(kj::mv(control), host, refusal);
  auto kept = std::make_shared<kj::Own<kj::AsyncIoStream>>(kj::mv(control));
  return io_->network()
      .parseAddress(host_, asked)
      .then([](kj::Own<kj::NetworkAddress> address) { return address->listen(); })
      .then(
          [this, kept, host](kj::Own<kj::ConnectionReceiver> listener) -> kj::Promise<void> {
            // Asked again: another node of this host may have been admitted meanwhile.
            std::string refusal = table_.may_hold(host);
            if (!refusal.empty()) return refuse(kj::mv(*kept), host, refusal);
            return serve_held(kj::mv(*kept), host, kj::mv(listener));
          },
          [this, kept, host, asked](kj::Exception&& e) -> kj::Promise<void> {
            return refuse(kj::mv(*kept), host,
                          "refused: cannot open port " + std::to_string(asked) + ": " +
                              kj_reason(e));
          });
}

kj::Promise<void> Relay::serve_held(kj::Own<kj::AsyncIoStream> control, const std::string& host,
                                    kj::Own<kj::ConnectionReceiver> listener) {
  auto held = kj::heap<Held>();
  held->port = static_cast<uint16_t>(listener->getPort());
  held->host = host;
  held->control = kj::mv(control);
  held->listener = kj::mv(listener);
  table_.hold(held->port, host);
  const uint16_t port = held->port;
  say("relay: holds port " + std::to_string(port) + " for a node at " + host);
  Held& h = *held;
  held_[port] = kj::mv(held);
  h.writes = write_line(*h.control, allocated_line(port)).eagerlyEvaluate(nullptr);
  h.accepting = accept_peers(h).eagerlyEvaluate(nullptr);
  // The node says nothing more: its connection ending (or a byte from it) releases the port.
  auto byte = kj::heap<kj::byte>(0);
  auto& b = *byte;
  return h.control->tryRead(&b, 1, 1)
      .then([](size_t) {}, [](kj::Exception&&) {})
      .then([this, port]() {
        const auto ended = table_.release(port);
        for (uint64_t session : ended) pending_.erase(session);
        held_.erase(port);
        say("relay: released port " + std::to_string(port) +
            " (its node's control connection ended)");
      })
      .attach(kj::mv(byte));
}

kj::Promise<void> Relay::accept_peers(Held& held) {
  return held.listener->accept().then([this, &held](kj::Own<kj::AsyncIoStream> peer) {
    peer_arrived(held, kj::mv(peer));
    return accept_peers(held);
  });
}

void Relay::peer_arrived(Held& held, kj::Own<kj::AsyncIoStream> peer) {
  const std::string address = peer_address(*peer);
  auto opened = table_.open(held.port, peer_host(address), now());
  if (opened.session == 0) {
    // The peer speaks TLS, not this protocol: it sees its connection closed.
    say("relay: " + address + " to port " + std::to_string(held.port) + " " + opened.refusal);
    return;
  }
  const RelayNonce nonce = fresh_nonce();
  pending_[opened.session] = Pending{kj::mv(peer), nonce};
  const std::string line = open_line(opened.session, address, nonce);
  held.writes = held.writes.then([&held, line]() { return write_line(*held.control, line); })
                    .eagerlyEvaluate([this, port = held.port](kj::Exception&& e) {
                      say("relay: port " + std::to_string(port) + ": cannot tell its node: " +
                          kj_reason(e));
                    });
}

kj::Promise<void> Relay::join(kj::Own<kj::AsyncIoStream> node, const std::string& host,
                              uint64_t session, const RelayNonce& proof) {
  auto it = pending_.find(session);
  // Checked before the table takes the join: a wrong proof leaves the session to its node.
  if (it != pending_.end() && options_.credentials &&
      !proof_matches(join_proof(*options_.credentials, it->second.nonce), proof.data(),
                     proof.size())) {
    return refuse(kj::mv(node), host,
                  "refused: wrong secret (the proof of joining session " +
                      std::to_string(session) + " does not match)");
  }
  std::string refusal = table_.join(session, host);
  if (refusal.empty() && it == pending_.end()) {
    refusal = "refused: session " + std::to_string(session) + " has no peer waiting";
    table_.end(session);
  }
  if (!refusal.empty()) return refuse(kj::mv(node), host, refusal);
  auto peer = kj::mv(it->second.peer);
  pending_.erase(it);
  auto& n = *node;
  return write_line(n, kJoinedLine)
      .then([this, session, peer = kj::mv(peer), node = kj::mv(node)]() mutable {
        return splice(session, kj::mv(peer), kj::mv(node));
      })
      .attach(kj::defer([this, session]() { table_.end(session); }));
}

namespace {

// One direction of a splice, until its source ends (then the other side's write is shut).
// `seen` is given each read and returns what of it is forwarded (all of it, but for a tamper);
// once `held` says so (a stall tamper), the direction reads and forwards nothing more. A write
// waits for its bytes to be taken before the next read: a side that stops reading holds at most
// the buffer here (and the kernels' socket buffers), never more.
kj::Promise<void> pump(kj::AsyncIoStream& from, kj::AsyncIoStream& to, kj::ArrayPtr<kj::byte> buffer,
                       std::function<kj::ArrayPtr<kj::byte>(kj::ArrayPtr<kj::byte>)> seen,
                       std::function<bool()> held) {
  return from.tryRead(buffer.begin(), 1, buffer.size())
      .then([&from, &to, buffer, seen = std::move(seen),
             held = std::move(held)](size_t n) mutable -> kj::Promise<void> {
        if (held()) return kj::NEVER_DONE;
        if (n == 0) {
          to.shutdownWrite();
          return kj::READY_NOW;
        }
        const auto forwarded = seen(buffer.slice(0, n));
        return to.write(forwarded.begin(), forwarded.size())
            .then([&from, &to, buffer, seen = std::move(seen),
                   held = std::move(held)]() mutable -> kj::Promise<void> {
              if (held()) return kj::NEVER_DONE;
              return pump(from, to, buffer, std::move(seen), std::move(held));
            });
      });
}

// What a tampering relay (Options::tamper) forwards of `bytes`, the stream's bytes from place
// `before` + 1 on; `said` is called once, when the tamper happens; `stall` is set when a stall
// tamper happens (what comes before byte `at` is still forwarded).
kj::ArrayPtr<kj::byte> tampered(const Relay::Options::Tamper& tamper, uint64_t before,
                                kj::ArrayPtr<kj::byte> bytes,
                                const std::function<void(const std::string&)>& said, bool& stall) {
  if (tamper.at == 0) return bytes;
  const uint64_t first = before + 1, last = before + bytes.size();
  using Kind = Relay::Options::Tamper::Kind;
  if (tamper.kind == Kind::stall) {
    if (tamper.at > last) return bytes;
    stall = true;
    said("stalled from byte " + std::to_string(tamper.at) +
         " towards the node: nothing more forwarded either way");
    return bytes.slice(0, tamper.at > first ? tamper.at - first : 0);
  }
  if (tamper.kind == Kind::flip) {
    if (tamper.at < first || tamper.at > last) return bytes;
    bytes[tamper.at - first] ^= 0x01;
    said("byte " + std::to_string(tamper.at) + " towards the node flipped");
    return bytes;
  }
  // drop: the places [at, at + count) that fall in [first, last] are cut out.
  const uint64_t from = std::max(first, tamper.at);
  const uint64_t to = std::min(last, tamper.at + tamper.count - 1);
  if (from > to) return bytes;
  const size_t cut_begin = from - first, cut_end = to - first + 1;
  std::memmove(bytes.begin() + cut_begin, bytes.begin() + cut_end, bytes.size() - cut_end);
  if (from == tamper.at) {
    said(std::to_string(tamper.count) + " bytes from byte " + std::to_string(tamper.at) +
         " towards the node dropped");
  }
  return bytes.slice(0, bytes.size() - (cut_end - cut_begin));
}

}  // namespace

kj::Promise<void> Relay::splice(uint64_t session, kj::Own<kj::AsyncIoStream> peer,
                                kj::Own<kj::AsyncIoStream> node) {
  auto s = kj::heap<Splice>();
  s->session = session;
  s->peer = kj::mv(peer);
  s->node = kj::mv(node);
  s->last_byte = now();
  Splice& sp = *s;
  auto held = [&sp]() { return sp.stalled; };
  auto up = pump(*sp.peer, *sp.node, sp.up, [this, &sp](kj::ArrayPtr<kj::byte> bytes) {
    sp.last_byte = now();
    const auto forwarded = tampered(
        options_.tamper, sp.towards_node, bytes,
        [this, &sp](const std::string& what) {
          say("relay: session " + std::to_string(sp.session) + ": " + what + " (tamper, for tests)");
        },
        sp.stalled);
    sp.towards_node += bytes.size();
    return forwarded;
  }, held);
  auto down = pump(*sp.node, *sp.peer, sp.down, [this, &sp](kj::ArrayPtr<kj::byte> bytes) {
    sp.last_byte = now();
    return bytes;
  }, held);
  // Idle: checked a few times per idle period; a session quiet for all of it ends.
  struct Idle {
    static kj::Promise<void> watch(Relay* relay, Splice* sp) {
      const double idle = relay->options_.limits.idle_seconds;
      const auto step = static_cast<int64_t>(idle * 250) * kj::MILLISECONDS;
      return relay->io_->timer().afterDelay(step).then([relay, sp, idle]() -> kj::Promise<void> {
        if (relay->now() - sp->last_byte >= idle) {
          relay->say("relay: session " + std::to_string(sp->session) + " idle for " +
                     std::to_string(static_cast<int>(idle)) + " s: closed");
          return kj::READY_NOW;
        }
        return watch(relay, sp);
      });
    }
  };
  auto both = kj::joinPromises(kj::arr(kj::mv(up), kj::mv(down)));
  return both.exclusiveJoin(Idle::watch(this, &sp))
      .catch_([](kj::Exception&&) {})  // either side reset: the session ends
      .attach(kj::mv(s));
}

}  // namespace ravnest::wire
