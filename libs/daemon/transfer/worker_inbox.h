// WorkerInbox: where what arrives for the node's job goes. It holds the current JobWorker (set
// and cleared by JobControl, on the compute thread) and the route to it, the compute thread's
// io_context, and the two mailboxes a parameter-server worker blocks on.
//
// A received transfer (TransferPlane, on the RPC thread) is either answers a blocked worker waits
// for (psWeights, psRows on a parameter-server worker: into their mailbox, which its compute
// thread is blocked on) or a message for the worker, which receives it on the compute thread.
// A failure (a peer that cannot be reached, the job stopped) wakes both mailboxes, then fails
// the worker on the compute thread.
//
// Threads: deliver(), fail(), with_worker(), current(), addresses(), clear() and abort() from
// any thread, never blocking; set_addresses(), set() and ask() on the compute thread, ask()
// blocking it until every answer arrived or the mailbox is aborted. The inbox's lock is taken
// after JobControl's, never before.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <kj/function.h>

#include "libs/config/plan/node_metadata.h"
#include "libs/daemon/transfer/ps_mailbox.h"
#include "libs/wire/transfer_message.h"
#include "libs/worker/job_worker.h"

namespace ravnest::daemon {

class WorkerInbox {
 public:
  // Where ask() waits: the servers' weights (answers to psGradients) or looked-up rows (answers
  // to psLookup).
  enum class Answers { kWeights, kRows };
  // node id -> host:port, of the job's peers (config::peer_addresses).
  using AddressBook = std::map<int, std::string>;

  explicit WorkerInbox(asio::io_context& compute) : compute_(compute) {}

  // The stored stage's role: a parameter-server worker's weights and rows go to the mailboxes.
  // Whenever the stage changes (JobControl).
  void set_role(config::Role role) { ps_worker_ = role == config::Role::kWorker; }

  // The job that starts: its sends find their peers in `addresses`, computed once when it starts
  // instead of at every send; set before its worker is made, which may send at once. Compute
  // thread.
  void set_addresses(AddressBook addresses);
  // The job's worker receives from now on. Compute thread.
  void set(std::shared_ptr<worker::JobWorker> worker);
  // No worker receives any more (the job was abandoned, a new one is loaded, a new stage
  // pushed); the address book stays for what the last worker still sends. Any thread.
  void clear();
  // The running worker, or null. Any thread.
  std::shared_ptr<worker::JobWorker> current() const;
  // The last started job's address book (empty before any). Any thread.
  std::shared_ptr<const AddressBook> addresses() const;

  // A received transfer, for the running worker (dropped when none runs). Any thread.
  void deliver(wire::TransferMessage message);
  // Wakes the mailboxes with `why`, then fails the running worker. Any thread.
  void fail(const std::string& why);
  // Runs `work` with the running worker on the compute thread, if one runs then. Any thread.
  void with_worker(kj::Function<void(worker::JobWorker&)> work);

  // Sends `requests` (one per server, the same step) with `send`, and waits for every server's
  // answer in the mailbox `answers` names; returns them in the requests' order. Compute thread;
  // blocks. Throws std::runtime_error when the mailbox is aborted.
  std::vector<wire::TransferMessage> ask(
      Answers answers, std::vector<wire::TransferMessage> requests,
      kj::FunctionParam<void(std::vector<wire::TransferMessage>)> send);

  // Wakes whoever waits in a mailbox with `reason` (a stop). Any thread.
  void abort(const std::string& reason);
  // A new job: forget aborts and stale answers. RPC thread, with no job running.
  void reset();

 private:
  asio::io_context& compute_;
  std::atomic<bool> ps_worker_{false};
  PsMailbox weights_;
  PsMailbox rows_;
  mutable std::mutex mutex_;  // guards the two below
  std::shared_ptr<worker::JobWorker> worker_;
  std::shared_ptr<const AddressBook> addresses_ = std::make_shared<AddressBook>();
};

}  // namespace ravnest::daemon
