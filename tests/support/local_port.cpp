#include "tests/support/local_port.h"

#include <algorithm>
#include <stdexcept>
#include <thread>
#include <utility>

#include <ATen/ATen.h>

#include "libs/torch_support/eager_numerics.h"
#include "libs/worker/job_setup.h"
#include "libs/ring/ring_allreduce.h"
#include "libs/ring/ring_local.h"
#include "libs/training/random_state.h"
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
  std::vector<worker::TransferMessage> exchange_with_servers(
      std::vector<worker::TransferMessage> pushes) override;
  std::vector<worker::TransferMessage> lookup_rows(
      std::vector<worker::TransferMessage> lookups) override;

 private:
  LocalPort& hub_;
  const int node_;
};

struct LocalPort::Mailbox {
  std::map<uint64_t, std::map<int, worker::TransferMessage>> waiting;  // step -> server -> answer
  uint64_t taken_below = 0;  // steps before this one were taken
};

struct LocalPort::Thread {
  std::thread thread;
  bool busy = false;              // a task of its node is under way (maybe blocked)
  std::function<void()> task;     // handed over by run_one
  std::function<bool()> waiting;  // blocked: what the call waits for
  bool stalled = false;           // blocked, and nothing else can run
  bool quit = false;
  std::exception_ptr error;       // escaped a task
  at::Tensor generator;           // its CPU generator's state while others run
};

struct LocalPort::Node {
  Node(LocalPort& hub, int id, const config::NodeMetadata& node)
      : port(hub, id), position(node.position), ps_worker(node.role == config::Role::kWorker) {}
  Endpoint port;  // declared first: the worker holds a reference to it
  std::shared_ptr<worker::JobWorker> worker;
  int position = 0;
  bool ps_worker = false;  // a plan's worker: its servers' answers go to its mailboxes
  Mailbox weights, rows;   // psWeights, psRows
  std::unique_ptr<Thread> thread;  // while run() runs
};

std::vector<worker::TransferMessage> LocalPort::Endpoint::exchange_with_servers(
    std::vector<worker::TransferMessage> pushes) {
  return hub_.ask_servers(node_, hub_.nodes_.at(node_)->weights, std::move(pushes));
}

std::vector<worker::TransferMessage> LocalPort::Endpoint::lookup_rows(
    std::vector<worker::TransferMessage> lookups) {
  return hub_.ask_servers(node_, hub_.nodes_.at(node_)->rows, std::move(lookups));
}

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

worker::JobWorker& LocalPort::add(worker::JobSetup setup) {
  const int id = setup.common.node.node_id;
  if (nodes_.count(id)) throw std::invalid_argument("node " + std::to_string(id) + " twice");
  auto node = std::make_unique<Node>(*this, id, setup.common.node);
  node->worker = worker::make_job_worker(std::move(setup), node->port);
  return *nodes_.emplace(id, std::move(node)).first->second->worker;
}

worker::JobWorker& LocalPort::worker(int node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) throw std::out_of_range("no worker for node " + std::to_string(node));
  return *it->second->worker;
}

worker::StageWorker& LocalPort::stage_worker(int node) {
  auto* stage = dynamic_cast<worker::StageWorker*>(&worker(node));
  if (!stage) throw std::invalid_argument("node " + std::to_string(node) + " is no pipeline stage");
  return *stage;
}

void LocalPort::send(worker::TransferMessage message) {
  const int to = message.to_node;
  if (!nodes_.count(to)) {
    throw std::runtime_error("node " + std::to_string(message.from_node) + " sent to node " +
                             std::to_string(to) + ", which is not here");
  }
  // A worker's answers from its servers go to its mailbox: its compute thread waits there.
  Node& receiver = *nodes_.at(to);
  Mailbox* mailbox = !receiver.ps_worker                               ? nullptr
                     : message.kind == worker::TransferKind::kPsWeights ? &receiver.weights
                     : message.kind == worker::TransferKind::kPsRows    ? &receiver.rows
                                                                        : nullptr;
  auto shared = std::make_shared<worker::TransferMessage>(std::move(message));
  tasks_.push_back({mailbox ? kNoWorker : to, [this, to, shared, mailbox]() {
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
                      if (!mailbox) return worker(to).receive(std::move(*shared));
                      const uint64_t step = shared->batch.step;
                      if (step < mailbox->taken_below) return;
                      mailbox->waiting[step][shared->from_node] = std::move(*shared);
                    }});
}

void LocalPort::defer(int node, std::function<void()> task) {
  tasks_.push_back({node, std::move(task)});
}

void LocalPort::event(int node, const worker::ProgressEventData& data) {
  events_.push_back({node, data});
  if (data.kind == worker::EventKind::kFailed && failure_.empty()) failure_ = data.message;
}

// Runs on node `id`'s own thread: each task it is handed, while it holds the baton.
void LocalPort::thread_main(int id, Thread& thread) {
  const torch_support::EagerNumerics eager;  // a daemon's compute thread computes so (daemon.cpp)
  std::unique_lock<std::mutex> lock(baton_mutex_);
  while (true) {
    baton_.wait(lock, [&] { return running_ == id; });
    if (thread.quit) break;
    std::function<void()> task = std::move(thread.task);
    lock.unlock();
    try {
      own_generator(thread, [&] { task(); });
    } catch (...) {
      thread.error = std::current_exception();
    }
    lock.lock();
    thread.busy = false;
    running_ = kNoWorker;
    baton_.notify_all();
  }
  running_ = kNoWorker;
  baton_.notify_all();
}

// The process's CPU generator holds the running node's state, as if the node were a process.
void LocalPort::own_generator(Thread& thread, const std::function<void()>& task) {
  const c10::Device cpu(c10::kCPU);
  if (thread.generator.defined()) training::set_random_state(cpu, thread.generator);
  try {
    task();
  } catch (...) {
    thread.generator = training::random_state(cpu);
    throw;
  }
  thread.generator = training::random_state(cpu);
}

void LocalPort::switch_to(int id) {
  Thread& thread = *nodes_.at(id)->thread;
  {
    std::unique_lock<std::mutex> lock(baton_mutex_);
    running_ = id;
    baton_.notify_all();
    baton_.wait(lock, [&] { return running_ == kNoWorker; });
  }
  if (thread.error) std::rethrow_exception(std::exchange(thread.error, nullptr));
}

void LocalPort::block_until(int node, const std::function<bool()>& done,
                            const std::string& while_doing, const std::string& stalled) {
  Thread& thread = *nodes_.at(node)->thread;
  while (!done()) {
    if (!failure_.empty()) throw std::runtime_error("the job failed: " + failure_);
    if (aborting_) throw std::runtime_error("LocalPort: the run stopped " + while_doing);
    check_deadline(while_doing);
    if (std::exchange(thread.stalled, false)) throw std::runtime_error(stalled);
    thread.generator = training::random_state(c10::Device(c10::kCPU));
    {
      std::unique_lock<std::mutex> lock(baton_mutex_);
      thread.waiting = done;
      running_ = kNoWorker;
      baton_.notify_all();
      baton_.wait(lock, [&] { return running_ == node; });
      thread.waiting = nullptr;
    }
    training::set_random_state(c10::Device(c10::kCPU), thread.generator);
  }
}

bool LocalPort::run_one() {
  // A blocked call whose wait is over goes on first.
  for (auto& [id, node] : nodes_) {
    if (node->thread->waiting && node->thread->waiting()) {
      switch_to(id);
      return true;
    }
  }
  auto it = std::find_if(tasks_.begin(), tasks_.end(), [&](const Task& t) {
    return t.node == kNoWorker || !nodes_.at(t.node)->thread->busy;
  });
  if (it != tasks_.end()) {
    Task task = std::move(*it);
    tasks_.erase(it);
    if (task.node == kNoWorker) {
      task.run();
      return true;
    }
    Thread& thread = *nodes_.at(task.node)->thread;
    thread.busy = true;
    thread.task = std::move(task.run);
    switch_to(task.node);
    return true;
  }
  // Nothing can run: a blocked call learns that what it waits for will never come.
  for (auto& [id, node] : nodes_) {
    if (node->thread->waiting) {
      node->thread->stalled = true;
      switch_to(id);
      return true;
    }
  }
  return false;
}

void LocalPort::check_deadline(const std::string& while_doing) const {
  if (std::chrono::steady_clock::now() > deadline_) {
    throw std::runtime_error("LocalPort: time limit reached " + while_doing);
  }
}

void LocalPort::run(std::chrono::milliseconds limit) {
  deadline_ = std::chrono::steady_clock::now() + limit;
  std::vector<std::pair<int, Node*>> order;
  for (auto& [id, node] : nodes_) order.emplace_back(id, node.get());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return (a.second->position == 0) < (b.second->position == 0);
  });
  for (auto& [id, node] : order) {
    worker::JobWorker* worker = node->worker.get();
    tasks_.push_back({id, [worker]() { worker->start(); }});
  }
  for (auto& [id, node] : nodes_) {
    node->thread = std::make_unique<Thread>();
    node->thread->thread = std::thread([this, id = id, t = node->thread.get()] { thread_main(id, *t); });
  }
  std::exception_ptr error;
  try {
    while (failure_.empty() && run_one()) check_deadline("running the job");
  } catch (...) {
    error = std::current_exception();
  }
  // Calls still blocked end (throwing), then every thread.
  aborting_ = true;
  for (auto& [id, node] : nodes_) {
    while (node->thread->busy) {
      try {
        switch_to(id);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    node->thread->quit = true;
    switch_to(id);
    node->thread->thread.join();
  }
  if (error) std::rethrow_exception(error);
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
      slot->size = ring.size;
      slot->average = average;
      slot->compression = {item.codec, item.stream};
    }
    Meeting& meeting = *slot;
    if (meeting.size != ring.size || meeting.average != average ||
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
  block_until(
      node,
      [&] { return std::all_of(mine.begin(), mine.end(), [](const Meeting* m) { return m->done; }); },
      "while node " + std::to_string(node) + " waits in a ring",
      "node " + std::to_string(node) + " waits in a ring round " + std::to_string(round) +
          " that its other members never join");
  for (const Meeting* m : mine) {
    if (!m->error.empty()) throw std::runtime_error(m->error);
  }
}

std::vector<worker::TransferMessage> LocalPort::ask_servers(
    int node, Mailbox& mailbox, std::vector<worker::TransferMessage> requests) {
  if (requests.empty()) return {};
  const uint64_t step = requests.front().batch.step;
  std::vector<int> servers;
  for (auto& request : requests) {
    servers.push_back(request.to_node);
    request.from_node = node;
    send(std::move(request));
  }
  auto complete = [&] {
    auto it = mailbox.waiting.find(step);
    return it != mailbox.waiting.end() &&
           std::all_of(servers.begin(), servers.end(),
                       [&](int s) { return it->second.count(s) > 0; });
  };
  block_until(node, complete, "while node " + std::to_string(node) + " waits for its servers",
              "node " + std::to_string(node) + " waits for servers that never answer step " +
                  std::to_string(step));
  std::vector<worker::TransferMessage> out;
  auto& from = mailbox.waiting[step];
  for (int s : servers) out.push_back(std::move(from[s]));
  mailbox.waiting.erase(mailbox.waiting.begin(), mailbox.waiting.upper_bound(step));
  mailbox.taken_below = step + 1;
  return out;
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
