// Requester::Impl: the connections to a plan's nodes and the calls over them, shared by the
// requester's sources: requester.cpp (the façade, stopping), job_run.cpp (train, predict, attach
// and their phases), job_watch.cpp (following a job) and node_calls.cpp (one call to one node).
// Private to libs/requester: no other library includes it.
//
// Single-threaded: every call runs the KJ event loop of the calling thread (Requester's contract).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <kj/async-io.h>
#include <kj/timer.h>

#include "libs/requester/job_shipment.h"
#include "libs/requester/job_watch.h"
#include "libs/requester/requester.h"
#include "libs/wire/file_stream.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/transport_security.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::requester {

// A failed call to a node, one line naming it. `disconnected`: the node did not answer (no
// connection, or no answer in time), as opposed to an answer refusing the call.
class NodeCallError : public std::runtime_error {
 public:
  NodeCallError(const std::string& what, std::string reason, bool disconnected)
      : std::runtime_error(what), reason(std::move(reason)), disconnected(disconnected) {}
  std::string reason;  // without the node's name and the call
  bool disconnected;
};

// TrainOptions::interrupted turned true while train() waited.
struct Interrupted {};

// A node's daemon got SIGTERM and asked for the stop every node agrees on (EventKind stopping);
// `why` names the node.
struct NodeStopping {
  std::string why;
};

class Requester::Impl {
 public:
  Impl(Plan plan, const std::string& secret, bool insecure)
      : plan_(std::move(plan)), links_(wire::make_transport_security(secret, insecure)) {
    pin_certificates();
  }
  // The plan's pins on the links (again after the plan changed: the nodes of a cluster taken in).
  // `moved`: plan nodes asked at another address than the plan's (id -> address: a relay that
  // changed, link_rejoin.h), each of which must show there the certificate pinned for it.
  void pin_certificates(const std::map<int, std::string>& moved = {}) {
    // The certificates the pool file pinned, which the plan's nodes must show: each node's own
    // metadata says its own; addresses outside the plan (a spare) come from any node's.
    std::map<std::string, std::string> pins;
    for (const auto& node : plan_.nodes) {
      auto own = node.tls_fingerprints.find(node.address);
      if (own == node.tls_fingerprints.end()) continue;
      pins[node.address] = own->second;
      auto at = moved.find(node.node_id);
      if (at != moved.end()) pins[at->second] = own->second;
    }
    for (const auto& node : plan_.nodes) {
      pins.insert(node.tls_fingerprints.begin(), node.tls_fingerprints.end());
    }
    links_.security()->set_pins(std::move(pins));
  }

  schema::Node::Client node(const config::NodeMetadata& meta) { return links_.node(meta.address); }

  // Every connection runs on this thread's event loop.
  kj::WaitScope& wait_scope() { return links_.wait_scope(); }
  kj::Timer& timer() { return links_.timer(); }

  bool interrupt_requested() const { return interrupted_ && interrupted_(); }
  // Rejects once interrupt_requested(); never resolves otherwise.
  kj::Promise<void> interruption() {
    return timer().afterDelay(100 * kj::MILLISECONDS).then([this]() -> kj::Promise<void> {
      if (interrupt_requested()) return kj::Promise<void>(KJ_EXCEPTION(FAILED, "interrupted"));
      return interruption();
    });
  }

  // `promise` under a time limit of `timeout_seconds` (with `progress`, the bytes a transfer
  // moved so far: on a transfer that stops moving, not on the whole of it), the node's
  // connection dropped when it fails, so the next call connects anew.
  template <typename T>
  kj::Promise<T> bounded(kj::Promise<T>&& promise, const config::NodeMetadata& meta,
                         double timeout_seconds, std::function<uint64_t()> progress = {}) {
    const auto limit = static_cast<uint64_t>(timeout_seconds * 1000) * kj::MILLISECONDS;
    // Measured from now: a transfer that never moves fails after `limit`, not twice it.
    auto timeout = (progress ? stalled(limit, progress, progress())
                             : timer().afterDelay(limit))
                       .then([]() -> T {
                         kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "no answer in time"));
                       });
    return links_.watch(meta.address, promise.exclusiveJoin(kj::mv(timeout)));
  }

  // Waits for `promise` on this thread's loop. While an interruption is watched for, throws
  // Interrupted once it is requested; else a failure throws its kj::Exception.
  template <typename T>
  T wait_interruptible(kj::Promise<T>&& promise) {
    if (interrupted_) {
      promise = promise.exclusiveJoin(interruption().then([]() -> T {
        kj::throwFatalException(KJ_EXCEPTION(FAILED, "interrupted"));
      }));
    }
    try {
      return promise.wait(wait_scope());
    } catch (const kj::Exception&) {
      if (interrupt_requested()) throw Interrupted();
      throw;
    }
  }

  // Waits for `promise`, failing with a NodeCallError naming the node; a call that fails (or
  // does not answer in time) drops the node's connection, so the next call connects anew. While
  // an interruption is watched for, throws Interrupted once it is requested.
  // With `progress` (the bytes a transfer moved so far), the time limit is on a transfer that
  // stops moving, not on the whole of it: a stage of GB over a slow link takes what it takes.
  template <typename T>
  T await(kj::Promise<T>&& promise, const config::NodeMetadata& meta, const std::string& what,
          double timeout_seconds = 120, std::function<uint64_t()> progress = {}) {
    try {
      return wait_interruptible(
          bounded(kj::mv(promise), meta, timeout_seconds, std::move(progress)));
    } catch (const kj::Exception& e) {
      const std::string reason = wire::kj_reason(e);
      throw NodeCallError(meta.name + " (" + meta.address + "): " + what + ": " + reason, reason,
                          e.getType() == kj::Exception::Type::DISCONNECTED);
    }
  }

  // Calls `call(i, nodes[i])` on each of `nodes`, at most `at_once` calls in flight (on this thread's
  // event loop, no threads), each awaited as await() awaits one: its own time limit, its node's
  // connection dropped when it fails. Returns, by node, "" or why its call failed ("NAME
  // (ADDRESS): WHAT: reason"). Throws Interrupted once an interruption is requested.
  std::vector<std::string> fan_out(
      const std::vector<config::NodeMetadata>& nodes, const std::string& what,
      const std::function<kj::Promise<void>(size_t, const config::NodeMetadata&)>& call,
      size_t at_once = 16, double timeout_seconds = 120) {
    std::vector<std::string> failed(nodes.size());
    for (size_t begin = 0; begin < nodes.size(); begin += at_once) {
      const size_t end = std::min(nodes.size(), begin + at_once);
      auto calls = kj::heapArrayBuilder<kj::Promise<void>>(end - begin);
      for (size_t i = begin; i < end; ++i) {
        const auto& meta = nodes[i];
        calls.add(bounded(call(i, meta), meta, timeout_seconds)
                      .then([]() {},
                            [&failed, &meta, &what, i](kj::Exception&& e) {
                              failed[i] = meta.name + " (" + meta.address + "): " + what + ": " +
                                          wire::kj_reason(e);
                            }));
      }
      wait_interruptible(kj::joinPromises(calls.finish()));
    }
    return failed;
  }

  // Resolves once `progress` stayed at one value for `limit`.
  kj::Promise<void> stalled(kj::Duration limit, std::function<uint64_t()> progress, uint64_t last) {
    return timer().afterDelay(limit).then(
        [this, limit, progress = std::move(progress), last]() mutable -> kj::Promise<void> {
          const uint64_t now = progress();
          if (now == last) return kj::READY_NOW;
          return stalled(limit, std::move(progress), now);
        });
  }

  // Streams the file at `path` into the sink `call` returns (pushStage, pushFile,
  // storeCheckpoint), a chunk at a time; fails like await(), naming the node and `what`.
  template <typename Request>
  wire::SentFile send_file(Request&& call, const std::string& path,
                           const config::NodeMetadata& meta, const std::string& what) {
    auto sent = std::make_shared<uint64_t>(0);
    auto sink = call.send().getSink();
    return await(wire::stream_file(sink, path, wire::kDefaultChunkBytes, sent.get())
                     .attach(std::shared_ptr<uint64_t>(sent)),
                 meta, what, 120, [sent]() { return *sent; });
  }

  // The node's status; fails like await().
  wire::NodeStatusData status_of(const config::NodeMetadata& meta, double timeout_seconds) {
    auto response = await(node(meta).statusRequest().send(), meta, "status", timeout_seconds);
    return wire::decode_status(response.getStatus());
  }

  // A node's call that failed in one of the phases below (their `on_failure`): true when the
  // caller goes on without the node's cluster (it dropped it, and put it in the phase's `skip`,
  // which the phase reads again before each node), false to fail the phase (the call's
  // NodeCallError is thrown on). None given: every failure fails the phase. A followed job that
  // resumes at a take-in goes on without a cluster whose node is lost meanwhile
  // (running_plan_change.cpp); the first start of a job fails instead.
  using NodeFailure = std::function<bool(const config::NodeMetadata&, const NodeCallError&)>;

  // The phases of Requester::train(), in order. `skip`: clusters left out (dropped ones that
  // stay dropped when a followed job resumes at a take-in: their nodes may be gone).
  void check_nodes();
  void ship_job_files(const std::vector<JobShipment>& shipments, const Log& log,
                      const std::set<int>& skip = {}, const NodeFailure& on_failure = {});
  // `resume_identity` (not empty): the identity whose checkpoints of `resume_from` the nodes
  // resume from, when the plan grew (running_plan_change.cpp); empty: `identity`'s own.
  void load_job(const std::string& job_text, uint64_t job_id, const std::string& identity,
                uint64_t resume_from, const std::vector<JobShipment>& shipments,
                const std::string& resume_identity = "", const std::set<int>& skip = {},
                const NodeFailure& on_failure = {});
  void subscribe(const std::shared_ptr<Watch>& watch, const Log& on_log,
                 const std::set<int>& skip = {}, const NodeFailure& on_failure = {});
  void start(uint64_t job_id, const std::set<int>& skip = {},
             const NodeFailure& on_failure = {});
  void watch_until_done(Watch& watch, uint64_t job_id, double unresponsive_seconds,
                        const Log& log = nullptr);
  // The same, the job id `*job_id` changing when clusters are taken in (Watch::take_in).
  void watch_until_done(Watch& watch, uint64_t* job_id, double unresponsive_seconds,
                        const Log& log = nullptr);
  // TrainOptions::drop_failed_clusters (ring_coordination.cpp): tells every ring member that
  // this requester coordinates the job's membership (setRings epoch 0); false when the plan has
  // one cluster or no rings (nothing to drop). Throws like await() when a node refuses (unless
  // `on_failure` takes it). Called before the nodes start: a node lost between its start and
  // this word would fail its neighbours' first reduce uncoordinated.
  bool coordinate_rings(uint64_t job_id, const std::set<int>& skip = {},
                        const NodeFailure& on_failure = {});
  // Sends each ring member of the clusters `live` its rings without the other clusters' members
  // (membership::ring_views), as membership `epoch`, with the round each ring runs from where
  // `run_from` names one. A member that refuses is said on `log` (its own failure, if it failed,
  // drops its cluster at the next status poll).
  void set_live_rings(uint64_t job_id, uint64_t epoch, const std::set<int>& live,
                      const std::map<int, uint64_t>& run_from, const Log& log);
  // Drops `cluster` (its node failed: `why`): leave_out_cluster, then sends each member of the
  // other clusters its rings without it (a new epoch).
  void drop_cluster(Watch& watch, uint64_t job_id, int cluster, const std::string& why,
                    const Log& log);
  // The plan's clusters that `watch` has not dropped.
  std::set<int> live_clusters(const Watch& watch) const;
  // The first half of drop_cluster, all of it before job `job_id` started (no ring membership
  // names the cluster yet): marks `cluster` dropped in `watch` and in the plan's .following,
  // says so on `log`, stops its nodes' job `job_id` (those that have it).
  void leave_out_cluster(Watch& watch, uint64_t job_id, int cluster, const std::string& why,
                         const Log& log);
  // Whether `on_failure` takes the failure of `meta`'s call (NodeFailure).
  static bool taken(const NodeFailure& on_failure, const config::NodeMetadata& meta,
                    const NodeCallError& e) {
    return on_failure && on_failure(meta, e);
  }
  // The phases around them: `load` (when given), the listeners, `start` (when given), then
  // following the job until it ends (unless detached). A failure or an interruption stops the
  // job `result.job_id` on every node. With `update_frequency` > 0 (not a prediction), the
  // events followed are recorded under <plan dir>/metrics/job_<id> (metrics_files.h).
  // `take_in` (train only): Watch::take_in, given the watch.
  TrainResult run_job(TrainResult& result, const TrainOptions& options,
                      const std::function<void()>& load, const std::function<void()>& start,
                      int update_frequency = 0,
                      const std::function<uint64_t(const std::shared_ptr<Watch>&, uint64_t)>&
                          take_in = nullptr);

  std::vector<std::string> stop_all(const std::string& reason, uint64_t job_id,
                                    double timeout_seconds = 3);
  // The first half of a stop every node agrees on (docs/faults.md#stopping): each cluster's root
  // holds the job `job_id` (0: whatever runs) at an update boundary, the furthest of the nearest
  // ones the roots can reach, and this waits until every node has made that many updates (or no
  // longer trains), so that the stop that follows checkpoints every node at the same update.
  // Returns the boundary, or nothing when no job runs, the plan has parameter servers, or a
  // node does not answer or reach it within `timeout_seconds` (the stop then checkpoints each
  // node at its own last update, as a stop after a failure does).
  // The nodes of the clusters in `skip` (dropped ones) are neither held nor waited for.
  std::optional<uint64_t> hold_at_boundary(uint64_t job_id, double timeout_seconds,
                                           const std::set<int>& skip = {});
  // Every node reports the job `job_id` finished (any that does not answer: false).
  bool finished_everywhere(uint64_t job_id);
  // Where a resume of the job `identity` continues: the newest update after which every node
  // holds a checkpoint that still matches its checksum, its own or, where its own is damaged or
  // gone, the copy its keeper holds (`repairs`: to be stored on the node first); 0 (the job's
  // start, which every node holds: its pushed stage) when there is none, `why_none` then saying
  // which node has none. Throws when every node finished the job.
  struct ResumePoint {
    uint64_t updates = 0;
    std::string why_none;
    struct Repair {
      config::NodeMetadata node, keeper;
    };
    std::vector<Repair> repairs;
    // Checkpoints newer than `updates` that a node or its keeper lists but that are damaged or
    // not this job's, slot's and update's, one line a node: what the resume passed over.
    std::vector<std::string> skipped;
  };
  ResumePoint resume_point(const std::string& identity, const std::string& job_path);
  // The intact checkpoints `at` holds of the slot (cluster, position; -1: its own) and whether it
  // finished the job; with `verify` false, every one it lists, unread.
  std::vector<uint64_t> intact_checkpoints(const config::NodeMetadata& at,
                                           const std::string& identity, int cluster,
                                           int position, bool* finished = nullptr,
                                           bool verify = true);

  Plan plan_;
  wire::PeerLinks links_;  // one connection per node, kept until a call over it fails
  std::function<bool()> interrupted_;  // set while train() watches for an interruption
};

}  // namespace ravnest::requester
