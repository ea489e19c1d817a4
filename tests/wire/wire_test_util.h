// Helpers for the wire tests: byte-exact tensor comparison, and a Node server (only `send` and
// `pushFile`) running on its own KJ thread, reachable over TCP on 127.0.0.1: plain, or over TLS
// behind the gate of a secret (as a daemon serves its Node).
#pragma once

#include <ATen/ATen.h>
#include <kj/async-io.h>
#include <kj/async.h>
#include <kj/debug.h>
#include <kj/thread.h>
#include <kj/timer.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "libs/wire/gate.h"
#include "libs/wire/rpc_connection.h"
#include "libs/wire/tensor_stream.h"
#include "libs/wire/value_codec.h"

namespace ravnest::wire::test {

// Same strides wherever a dimension has more than one element (a size-1 dimension's stride
// means nothing).
inline bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() != b.dim()) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

// Same dtype, shape, requires_grad and bytes (compared on the contiguous CPU form).
inline bool same_tensor(const at::Tensor& sent, const at::Tensor& got, std::string* why = nullptr) {
  auto say = [&](const std::string& s) {
    if (why != nullptr) *why = s;
    return false;
  };
  if (sent.scalar_type() != got.scalar_type()) {
    return say(std::string("dtype ") + c10::toString(sent.scalar_type()) + " vs " +
               c10::toString(got.scalar_type()));
  }
  if (sent.sizes() != got.sizes()) return say("shape differs");
  if (sent.requires_grad() != got.requires_grad()) return say("requires_grad differs");
  // A dense tensor arrives with its layout (channels-last stays channels-last), any other one
  // row-major: compared in row-major order either way.
  if (sent.is_non_overlapping_and_dense() && !same_layout(sent, got)) {
    return say("the layout (strides) differs");
  }
  if (!sent.is_non_overlapping_and_dense() && !got.is_contiguous()) {
    return say("received tensor is not contiguous");
  }
  at::Tensor a = sent.detach().resolve_conj().resolve_neg().contiguous();
  at::Tensor b = got.detach().contiguous();
  uint64_t bytes = tensor_bytes(a);
  if (bytes != tensor_bytes(b)) return say("byte count differs");
  if (bytes > 0 && std::memcmp(a.data_ptr(), b.data_ptr(), bytes) != 0) {
    return say("bytes differ");
  }
  return true;
}

// Compares two IValues of the kinds the wire carries (tensors byte-exactly, floats bitwise).
inline bool same_value(const c10::IValue& sent, const c10::IValue& got, std::string* why = nullptr) {
  auto say = [&](const std::string& s) {
    if (why != nullptr) *why = s;
    return false;
  };
  if (sent.tagKind() != got.tagKind()) return say("kind " + sent.tagKind() + " vs " + got.tagKind());
  if (sent.isTensor()) return same_tensor(sent.toTensor(), got.toTensor(), why);
  if (sent.isDouble()) {
    double a = sent.toDouble(), b = got.toDouble();
    return std::memcmp(&a, &b, sizeof a) == 0 || say("float differs");
  }
  if (sent.isDoubleList()) {
    auto a = sent.toDoubleVector(), b = got.toDoubleVector();
    return (a.size() == b.size() &&
            (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0)) ||
           say("float list differs");
  }
  if (sent.isBoolList()) {
    auto a = sent.toBoolList(), b = got.toBoolList();
    if (a.size() != b.size()) return say("bool list size differs");
    for (size_t i = 0; i < a.size(); ++i) {
      if (a.get(i) != b.get(i)) return say("bool list differs");
    }
    return true;
  }
  if (sent.tagKind() == "Uninitialized" || sent.isNone()) return true;
  return sent == got || say("value differs");
}

// What the test server received: decoded values once their streamed bytes arrived, errors, files.
struct ServerEvent {
  std::string kind;  // "values", "error", "file"
  std::vector<IndexedIValue> values;
  std::string text;  // error description or file name
};

class EventQueue {
 public:
  void push(ServerEvent e) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }
  std::optional<ServerEvent> pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    ServerEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<ServerEvent> events_;
};

class TestNode final : public schema::Node::Server, private kj::TaskSet::ErrorHandler {
 public:
  TestNode(EventQueue& events, std::filesystem::path files_dir, DecodeLimits limits)
      : events_(events), files_dir_(std::move(files_dir)), limits_(limits), tasks_(*this) {}

 protected:
  kj::Promise<void> send(SendContext context) override {
    std::vector<at::Tensor> pending;
    std::vector<IndexedIValue> values;
    try {
      values = decode_values(context.getParams().getTransfer(), pending, limits_);
    } catch (const std::exception& e) {
      events_.push({"error", {}, e.what()});
      throw;
    }
    if (pending.empty()) {
      events_.push({"values", std::move(values), ""});
      return kj::READY_NOW;
    }
    auto opened = TensorSink::open(std::move(pending));
    context.getResults().setSink(kj::mv(opened.sink));
    tasks_.add(opened.completion.then(
        [this, values = std::move(values)]() mutable {
          events_.push({"values", std::move(values), ""});
        },
        [this](kj::Exception&& e) { events_.push({"error", {}, e.getDescription().cStr()}); }));
    return kj::READY_NOW;
  }

  kj::Promise<void> pushFile(PushFileContext context) override {
    auto params = context.getParams();
    std::string name = params.getName();
    auto opened = FileSink::open(files_dir_, name, params.getSize(), params.getSha256());
    context.getResults().setSink(kj::mv(opened.sink));
    tasks_.add(opened.completion.then(
        [this, name]() { events_.push({"file", {}, name}); },
        [this](kj::Exception&& e) { events_.push({"error", {}, e.getDescription().cStr()}); }));
    return kj::READY_NOW;
  }

 private:
  void taskFailed(kj::Exception&& e) override {
    events_.push({"error", {}, e.getDescription().cStr()});
  }

  EventQueue& events_;
  std::filesystem::path files_dir_;
  DecodeLimits limits_;
  kj::TaskSet tasks_;
};

// The server on its own thread with its own event loop; stopped and joined on destruction.
class ServerThread {
 public:
  // `port` 0: a free one. With `secret`: TLS and the gate of that secret, as a daemon.
  explicit ServerThread(std::filesystem::path files_dir, DecodeLimits limits = {},
                        ConnectionOptions options = {}, uint16_t listen_port = 0,
                        std::optional<std::string> secret = std::nullopt) {
    std::promise<uint16_t> port;
    auto port_future = port.get_future();
    thread_ = kj::heap<kj::Thread>([this, &port, files_dir, limits, options, listen_port,
                                    secret]() {
      bool published = false;
      try {
        auto make_server = [&]() {
          if (!secret) {
            return kj::heap<RpcServer>(kj::heap<TestNode>(events, files_dir, limits), "127.0.0.1",
                                       listen_port, options);
          }
          auto node = std::make_shared<schema::Node::Client>(
              kj::heap<TestNode>(events, files_dir, limits));
          RpcServer::Options gated;
          gated.connection = options;
          gated.connection.security = make_transport_security(*secret);
          auto credentials = gated.connection.security->credentials();
          return kj::heap<RpcServer>(
              [node, credentials](std::shared_ptr<ConnectionTrust> trust) {
                return capnp::Capability::Client(
                    kj::heap<GateServer>(credentials, *node, std::move(trust), nullptr));
              },
              "127.0.0.1", listen_port, gated);
        };
        auto owned = make_server();
        RpcServer& server = *owned;
        auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
        {
          std::lock_guard<std::mutex> lock(mutex_);
          stop_ = kj::mv(paf.fulfiller);
        }
        published = true;
        port.set_value(server.port());
        paf.promise.wait(server.wait_scope());
      } catch (...) {
        if (!published) port.set_exception(std::current_exception());
      }
    });
    if (port_future.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      throw std::runtime_error("test server did not start");
    }
    port_ = port_future.get();
  }

  ~ServerThread() noexcept(false) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_.get() != nullptr) stop_->fulfill();
    }
    thread_ = nullptr;  // joins
  }

  uint16_t port() const { return port_; }
  EventQueue events;

 private:
  std::mutex mutex_;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> stop_;
  kj::Own<kj::Thread> thread_;
  uint16_t port_ = 0;
};

// Waits for `promise` on the client's loop, failing after `seconds`.
template <typename T>
T wait_bounded(kj::Promise<T>&& promise, RpcClient& client, int seconds = 120) {
  auto& timer = client.timer();
  return promise
      .exclusiveJoin(timer.afterDelay(seconds * kj::SECONDS).then([seconds]() -> kj::Promise<T> {
        return KJ_EXCEPTION(FAILED, "test timed out", seconds);
      }))
      .wait(client.wait_scope());
}

// The next server event, turning the client's event loop meanwhile (releases and other messages
// the client queued go out only while its loop runs). Empty after `seconds`.
inline std::optional<ServerEvent> next_event(ServerThread& server, RpcClient& client,
                                             int seconds = 120) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  auto& timer = client.timer();
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto e = server.events.pop(std::chrono::milliseconds(0))) return e;
    timer.afterDelay(2 * kj::MILLISECONDS).wait(client.wait_scope());
  }
  return std::nullopt;
}

inline std::filesystem::path make_temp_dir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ravnest-wire-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

struct TempDir {
  std::filesystem::path path = make_temp_dir();
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace ravnest::wire::test
