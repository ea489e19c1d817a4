// The daemon's control plane through its schema, in one process (InProcessNode,
// libs/daemon/in_process_node.h): JobControl's refusals and stop, TransferPlane and WorkerInbox
// delivering to the running worker, RpcThread's post and call, and the harness's shutdown.
// ATen before Catch2: LibTorch's headers bring glog's CHECK, which would replace Catch2's.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <asio/post.hpp>
#include <kj/exception.h>

#include "libs/daemon/in_process_node.h"
#include "libs/daemon/rpc/rpc_thread.h"
#include "libs/wire/transfer_codec.h"
#include "libs/wire/value_codec.h"
#include "tests/support/test_env.h"

using namespace ravnest;

namespace {

// Runs the node's event loop until `done` holds; false after `seconds`.
template <typename Done>
bool run_until(daemon::InProcessNode& node, Done&& done, double seconds = 5) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    node.timer().afterDelay(2 * kj::MILLISECONDS).wait(node.wait_scope());
  }
  return true;
}

// The reason a call was refused with ("" when it was answered).
template <typename Request>
std::string refusal(daemon::InProcessNode& node, Request& request) {
  try {
    request.send().wait(node.wait_scope());
    return "";
  } catch (const kj::Exception& e) {
    return std::string(e.getDescription().cStr());
  }
}

schema::NodeState state_of(daemon::InProcessNode& node) {
  return node.node().statusRequest().send().wait(node.wait_scope()).getStatus().getState();
}

// A worker that keeps what it receives (on the compute thread).
class RecordingWorker final : public worker::JobWorker {
 public:
  void start() override {}
  void receive(wire::TransferMessage message) override {
    std::lock_guard<std::mutex> lock(mutex);
    received.push_back(std::move(message));
  }
  void fail(const std::string& why) override {
    std::lock_guard<std::mutex> lock(mutex);
    failures.push_back(why);
  }
  void checkpoint_on_stop() override { ++checkpoints; }
  worker::WorkerStatus status() const override { return {}; }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return received.size();
  }

  std::mutex mutex;
  std::vector<wire::TransferMessage> received;
  std::vector<std::string> failures;
  std::atomic<int> checkpoints{0};
};

// Sets `worker` as the node's running worker, on its compute thread, as JobControl::start does.
void run_worker(daemon::InProcessNode& node, std::shared_ptr<worker::JobWorker> worker) {
  std::atomic<bool> set{false};
  asio::post(node.compute(), [&]() {
    node.service().inbox().set(worker);
    set = true;
  });
  REQUIRE(run_until(node, [&] { return set.load(); }));
}

wire::TransferMessage activations(const at::Tensor& tensor) {
  auto message = wire::addressed(wire::TransferKind::kActivations, /*from=*/1, /*to=*/0, {});
  message.batch.step = 3;
  message.batch.index = 2;
  message.batch.count = 4;
  message.values.emplace_back(0, c10::IValue(tensor));
  return message;
}

}  // namespace

TEST_CASE("in-process node: a fresh node answers its status", "[daemon][in_process]") {
  test::TempDir dir;
  daemon::InProcessNode node(dir / "node");
  auto status = node.node().statusRequest().send().wait(node.wait_scope()).getStatus();
  CHECK(status.getState() == schema::NodeState::IDLE);
  CHECK_FALSE(status.getHasStage());
}

TEST_CASE("JobControl: a malformed job is refused in one line and the node still answers",
          "[daemon][in_process]") {
  test::TempDir dir;
  daemon::InProcessNode node(dir / "node");

  auto bad_identity = node.node().loadJobRequest();
  bad_identity.setJobToml("[train]\n");
  bad_identity.setJobId(7);
  bad_identity.setIdentity("not hex!");
  const std::string identity_refused = refusal(node, bad_identity);
  INFO(identity_refused);
  CHECK_THAT(identity_refused, Catch::Contains("identity"));
  CHECK(state_of(node) == schema::NodeState::IDLE);

  auto resume_without_identity = node.node().loadJobRequest();
  resume_without_identity.setJobToml("[train]\n");
  resume_without_identity.setJobId(7);
  resume_without_identity.setResumeFrom(4);
  CHECK_THAT(refusal(node, resume_without_identity),
             Catch::Contains("a job to resume needs its identity"));

  auto no_stage = node.node().loadJobRequest();
  no_stage.setJobToml("this is not toml [[[");
  no_stage.setJobId(7);
  CHECK_THAT(refusal(node, no_stage), Catch::Contains("no stage stored"));

  auto start = node.node().startRequest();
  start.setJobId(7);
  CHECK_THAT(refusal(node, start), Catch::Contains("no job 7 loaded"));

  // Still serving, and nothing changed.
  CHECK(state_of(node) == schema::NodeState::IDLE);
}

TEST_CASE("JobControl: a stop ends the running worker after its checkpoint, once; another "
          "job's stop is ignored", "[daemon][in_process]") {
  test::TempDir dir;
  daemon::InProcessNode node(dir / "node");
  auto worker = std::make_shared<RecordingWorker>();
  run_worker(node, worker);
  auto stop = [&](uint64_t job_id) {
    auto request = node.node().stopRequest();
    request.setReason("the test stops it");
    request.setJobId(job_id);
    return refusal(node, request);
  };

  CHECK(stop(99) == "");  // not this node's job (0): nothing happens
  CHECK(node.service().inbox().current() == worker);
  CHECK(worker->checkpoints == 0);

  CHECK(stop(0) == "");
  CHECK(node.service().inbox().current() == nullptr);
  CHECK(worker->checkpoints == 1);
  CHECK(stop(0) == "");  // idempotent
  CHECK(worker->checkpoints == 1);
  CHECK(state_of(node) == schema::NodeState::IDLE);

  // What arrives after the stop reaches no worker.
  auto late = node.node().sendRequest();
  wire::encode_transfer(activations(at::ones({2})), late.initTransfer(),
                        wire::kDefaultInlineLimit);
  CHECK(refusal(node, late) == "");
  node.timer().afterDelay(50 * kj::MILLISECONDS).wait(node.wait_scope());
  CHECK(worker->count() == 0);
}

TEST_CASE("TransferPlane: a tensor sent to the node arrives at its running worker",
          "[daemon][in_process]") {
  test::TempDir dir;
  daemon::InProcessNode node(dir / "node");
  auto worker = std::make_shared<RecordingWorker>();
  run_worker(node, worker);

  const at::Tensor sent = at::arange(12, at::kFloat).reshape({3, 4});
  auto request = node.node().sendRequest();
  auto encoded = wire::encode_transfer(activations(sent), request.initTransfer(),
                                       wire::kDefaultInlineLimit);
  REQUIRE(encoded.streamed.empty());
  CHECK(refusal(node, request) == "");
  REQUIRE(run_until(node, [&] { return worker->count() == 1; }));

  const auto& got = worker->received.at(0);
  CHECK(got.kind == wire::TransferKind::kActivations);
  CHECK(got.from_node == 1);
  CHECK(got.batch.step == 3);
  CHECK(got.batch.index == 2);
  CHECK(got.batch.count == 4);
  REQUIRE(got.values.size() == 1);
  CHECK(got.values[0].first == 0);
  const at::Tensor arrived = got.values[0].second.toTensor();
  CHECK(arrived.sizes() == sent.sizes());
  CHECK(at::equal(arrived, sent));
  CHECK(arrived.data_ptr() != sent.data_ptr());
  CHECK(worker->failures.empty());
}

TEST_CASE("TransferPlane: a tensor whose bytes do not match its shape is refused",
          "[daemon][in_process]") {
  test::TempDir dir;
  daemon::InProcessNode node(dir / "node");
  auto worker = std::make_shared<RecordingWorker>();
  run_worker(node, worker);

  auto request = node.node().sendRequest();
  wire::encode_transfer(activations(at::ones({4})), request.initTransfer(),
                        wire::kDefaultInlineLimit);
  // 4 floats' bytes claimed as 1000 floats.
  request.getTransfer().getValues()[0].getValue().getTensor().getShape().set(0, 1000);
  CHECK_FALSE(refusal(node, request).empty());

  // The node goes on: a good one after it arrives, alone.
  auto good = node.node().sendRequest();
  wire::encode_transfer(activations(at::ones({4})), good.initTransfer(),
                        wire::kDefaultInlineLimit);
  CHECK(refusal(node, good) == "");
  REQUIRE(run_until(node, [&] { return worker->count() == 1; }));
  CHECK(worker->received.at(0).values.at(0).second.toTensor().size(0) == 4);
}

TEST_CASE("RpcThread: post and call from another thread run on the RPC thread",
          "[daemon][in_process]") {
  test::TempDir dir;
  daemon::InProcessNode node(dir / "node");
  auto& rpc = node.service().rpc();
  const auto rpc_thread = std::this_thread::get_id();

  std::vector<int> posted;  // RPC thread only
  std::thread::id posted_on;
  std::atomic<bool> called{false};
  int answer = 0;
  std::thread other([&]() {
    for (int i = 1; i <= 3; ++i) {
      CHECK(rpc.post([&posted, &posted_on, i]() {
        posted_on = std::this_thread::get_id();
        posted.push_back(i);
      }));
    }
    // call() blocks until its work ran, and returns the work's result. It does not go through
    // post()'s queue (kj::Executor::executeSync): a call may run before posts made before it.
    answer = rpc.call([&]() { return std::this_thread::get_id() == rpc_thread ? 42 : -1; });
    called = true;
  });
  const bool finished =
      run_until(node, [&] { return called.load() && posted.size() == 3; });
  other.join();
  REQUIRE(finished);
  CHECK(answer == 42);
  CHECK(posted_on == rpc_thread);
  CHECK(posted == std::vector<int>{1, 2, 3});  // posts keep their order
}

TEST_CASE("RpcThread: before attach a call throws and a post is dropped", "[daemon][in_process]") {
  daemon::RpcThread rpc;
  CHECK_FALSE(rpc.attached());
  CHECK_FALSE(rpc.post([]() {}));
  bool threw = false;
  try {
    rpc.call([]() {});
  } catch (const kj::Exception& e) {
    threw = e.getType() == kj::Exception::Type::DISCONNECTED;
  }
  CHECK(threw);
}

TEST_CASE("InProcessNode: shutdown lets the compute thread finish its work, then joins it",
          "[daemon][in_process]") {
  test::TempDir dir;
  std::atomic<bool> finished{false};
  {
    daemon::InProcessNode node(dir / "node");
    asio::post(node.compute(), [&]() {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      finished = true;
    });
  }
  CHECK(finished);
}
