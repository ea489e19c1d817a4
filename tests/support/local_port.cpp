#include "tests/support/local_port.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>

#include "libs/torch_support/eager_numerics.h"
#include "libs/ring/ring_allreduce.h"
#include "libs/ring/ring_local.h"
#include "libs/wire/tensor_codec.h"

namespace ravnest::test {

using worker::WorkerPort;

class LocalPort::Endpoint final : public WorkerPort {
 public:
  Endpoint(LocalPort& hub, int node) : hub_(hub), node_(node) {}
  void send(worker::TransferMessage message) override {
    message.from_node = node_;
    hub_.send(std::move(message));
  }
  void event(const worker::ProgressEventData& data) override { hub_.event(node_, data); }
  void defer(std::function<void()> task) override { hub_.defer(node_, std::move(task)); }
  void reduce_rings(uint64_t round, std::vector<RingWork>& work, bool average) override {
    hub_.reduce_rings(node_, round, work, average);
  }

 private:
  LocalPort& hub_;
  const int node_;
};

struct LocalPort::Node {
  Endpoint port;  // declared first: the worker holds a reference to it
  std::unique_ptr<worker::StageWorker> worker;
  int position = 0;
};

struct LocalPort::Meeting {
  int size = 0;
  bool average = true;
  ring::RingCompression compression;
  std::map<int, std::vector<at::Tensor>*> members;  // by position in the ring
  bool done = false;
  std::string error;
};

LocalPort::LocalPort() = default;
LocalPort::~LocalPort() = default;

worker::StageWorker& LocalPort::add(worker::WorkerSetup setup) {
  const int id = setup.node.node_id;
  if (nodes_.count(id)) throw std::invalid_argument("node " + std::to_string(id) + " twice");
  auto node = std::make_unique<Node>(Node{Endpoint(*this, id), nullptr, setup.node.position});
  node->worker = std::make_unique<worker::StageWorker>(std::move(setup), node->port);
  return *nodes_.emplace(id, std::move(node)).first->second->worker;
}

worker::StageWorker& LocalPort::worker(int node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) throw std::out_of_range("no worker for node " + std::to_string(node));
  return *it->second->worker;
}

void LocalPort::send(worker::TransferMessage message) {
  const int to = message.to_node;
  if (!nodes_.count(to)) {
    throw std::runtime_error("node " + std::to_string(message.from_node) + " sent to node " +
                             std::to_string(to) + ", which is not here");
  }
  auto shared = std::make_shared<worker::TransferMessage>(std::move(message));
  tasks_.push_back({to, [this, to, shared]() {
                      for (auto& [output, value] : shared->values) {
                        if (value.isTensor()) {
                          at::Tensor t = value.toTensor().detach();
                          // What the wire does to it (value_codec.h): compressed when floating.
                          if (shared->codec != wire::TensorCodec::kNone &&
                              at::isFloatingType(t.scalar_type())) {
                            t = wire::decompress_tensor(wire::compress_tensor(t, shared->codec));
                          }
                          value = t.clone(at::MemoryFormat::Contiguous);
                        }
                      }
                      ++deliveries_;
                      worker(to).receive(std::move(*shared));
                    }});
}

void LocalPort::defer(int node, std::function<void()> task) {
  tasks_.push_back({node, std::move(task)});
}

void LocalPort::event(int node, const worker::ProgressEventData& data) {
  events_.push_back({node, data});
  if (data.kind == worker::EventKind::kFailed && failure_.empty()) failure_ = data.message;
}

bool LocalPort::run_one() {
  auto it = std::find_if(tasks_.begin(), tasks_.end(),
                         [&](const Task& t) { return !busy_.count(t.node); });
  if (it == tasks_.end()) return false;
  Task task = std::move(*it);
  tasks_.erase(it);
  busy_.insert(task.node);
  try {
    task.run();
  } catch (...) {
    busy_.erase(task.node);
    throw;
  }
  busy_.erase(task.node);
  return true;
}

void LocalPort::check_deadline(const std::string& while_doing) const {
  if (std::chrono::steady_clock::now() > deadline_) {
    throw std::runtime_error("LocalPort: time limit reached " + while_doing);
  }
}

void LocalPort::run(std::chrono::milliseconds limit) {
  const torch_support::EagerNumerics eager;  // this thread is every worker's compute thread (daemon.cpp)
  deadline_ = std::chrono::steady_clock::now() + limit;
  std::vector<std::pair<int, Node*>> order;
  for (auto& [id, node] : nodes_) order.emplace_back(id, node.get());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return (a.second->position == 0) < (b.second->position == 0);
  });
  for (auto& [id, node] : order) {
    worker::StageWorker* worker = node->worker.get();
    tasks_.push_back({id, [worker]() { worker->start(); }});
  }
  while (failure_.empty() && run_one()) check_deadline("running the job");
  if (!failure_.empty()) throw std::runtime_error("a worker failed: " + failure_);
  std::string unfinished;
  for (auto& [id, node] : nodes_) {
    if (node->worker->status().state != worker::WorkerStatus::State::kFinished) {
      unfinished += " " + std::to_string(id);
    }
  }
  if (!unfinished.empty()) {
    throw std::runtime_error("LocalPort: nothing left to run, but node(s)" + unfinished +
                             " did not finish");
  }
}

void LocalPort::reduce_rings(int node, uint64_t round, std::vector<WorkerPort::RingWork>& work,
                             bool average) {
  std::vector<Meeting*> mine;
  for (auto& item : work) {
    const auto& ring = *item.ring;
    auto& slot = meetings_[{ring.id, round}];
    if (!slot) {
      slot = std::make_unique<Meeting>();
      slot->size = static_cast<int>(ring.peers.size());
      slot->average = average;
      slot->compression = {item.codec, item.stream};
    }
    Meeting& meeting = *slot;
    if (meeting.size != static_cast<int>(ring.peers.size()) || meeting.average != average ||
        meeting.members.count(ring.position)) {
      throw std::runtime_error("ring " + std::to_string(ring.id) + " round " +
                               std::to_string(round) + ": node " + std::to_string(node) +
                               " does not fit the members already there");
    }
    meeting.members[ring.position] = &item.tensors;
    if (static_cast<int>(meeting.members.size()) == meeting.size) {
      run_ring(ring.id, meeting, round);
      ++rings_run_;
    }
    mine.push_back(&meeting);
  }
  auto all_done = [&] {
    return std::all_of(mine.begin(), mine.end(), [](const Meeting* m) { return m->done; });
  };
  while (!all_done()) {
    if (!failure_.empty()) throw std::runtime_error("the job failed: " + failure_);
    check_deadline("while node " + std::to_string(node) + " waits in a ring");
    if (!run_one()) {
      throw std::runtime_error("node " + std::to_string(node) + " waits in a ring round " +
                               std::to_string(round) + " that its other members never join");
    }
  }
  for (const Meeting* m : mine) {
    if (!m->error.empty()) throw std::runtime_error(m->error);
  }
}

struct LocalPort::RingSet {
  explicit RingSet(int size) : ring(size) {
    for (int i = 0; i < size; ++i) {
      members.push_back(std::make_unique<ring::RingAllReduce>(ring.member(i), i, size));
    }
  }
  ring::LocalRing ring;
  std::vector<std::unique_ptr<ring::RingAllReduce>> members;
};

void LocalPort::run_ring(int ring_id, Meeting& meeting, uint64_t round) {
  auto& set = rings_[ring_id];
  if (!set || set->ring.size() != meeting.size || set->ring.aborted()) {
    set = std::make_unique<RingSet>(meeting.size);
  }
  std::vector<std::string> errors(meeting.size);
  std::vector<std::thread> threads;
  for (auto& [position, tensors] : meeting.members) {
    threads.emplace_back([&, position = position, tensors = tensors]() {
      try {
        set->members[position]->run(round, *tensors, meeting.average, meeting.compression);
      } catch (const std::exception& e) {
        errors[position] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& error : errors) {
    if (!error.empty() && meeting.error.empty()) meeting.error = error;
  }
  meeting.done = true;
}

}  // namespace ravnest::test
