// Fuzz target: what a peer can send in a call, and what a daemon answers to a requester, decoded
// as the daemon's handlers (libs/daemon: job_control, ring_member, bench_service,
// checkpoint_service) and the requester (libs/requester) decode it. Node.send's tensors have
// their own target (rpc_transfer), which needs LibTorch; this one does not.
//
// Input: one byte choosing the message (Message below, modulo their number), then the message
// as Cap'n Proto's standard serialization (segment table, segments), read with bounded
// ReaderOptions as a connection would, with the functions a handler runs once the
// connection's gate has opened its Node: node metadata and
// stage checks (NodeStore::check_stage_push), shipped file names (NodeStore::shipped_file), the job
// text and its shipped paths (config::parse_job, NodeStore::locate_shipped), job identities
// and checkpoint slots (checkpoint_names.h), ring segments (RingMailbox), the benchmark's
// request (check_bench_request), node status and progress events (node_report_codec.h).
//
// Accepted errors: kj::Exception (a message capnp cannot read, or over the limits), and
// std::runtime_error / std::invalid_argument with a one-line message, as the handlers turn them
// into the call's rejection. Anything else is a finding.
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/base/sha256.h"
#include "libs/daemon/rings/bench_request.h"
#include "libs/store/checkpoint_names.h"
#include "libs/store/node_store.h"
#include "libs/daemon/rings/ring_mailbox.h"
#include "libs/wire/node_report_codec.h"
#include "schemas/ravnest.capnp.h"
#include "tests/fuzz/fuzz_capnp.h"
#include "tests/fuzz/fuzz_support.h"

namespace fs = std::filesystem;
using namespace ravnest;
using schema::Node;

namespace {

// The messages, by the first byte of the input (tests/fuzz/make_seeds.cpp writes one of each).
enum Message : uint8_t {
  kPushStage,          // Node.pushStage params
  kPushFile,           // Node.pushFile params
  kLoadJob,            // Node.loadJob params
  kStop,               // Node.stop params
  kOpenRing,           // Node.openRing params
  kRingSegment,        // RingSink.segment params
  kAbortReduce,        // Node.abortReduce params
  kBenchAllReduce,     // Node.benchAllReduce params
  kCheckpoints,        // Node.checkpoints params
  kStoreCheckpoint,    // Node.storeCheckpoint params
  kFetchCheckpoint,    // Node.fetchCheckpoint params
  kStatusResults,      // Node.status results (requester)
  kEvent,              // ProgressListener.event params (requester)
  kFetchStageResults,  // Node.fetchStage results (requester)
  kCheckpointsResults, // Node.checkpoints results (requester)
  kFetchCheckpointResults,  // Node.fetchCheckpoint results (requester)
  kPushMetadata,       // Node.pushMetadata params
  kMessageCount
};

// A daemon's storage with a stage stored, as a daemon has when a job is loaded.
struct Daemon {
  Daemon() : store(ravnest::fuzz::scratch_dir() / "data", "node_0") {
    config::NodeMetadata m;
    m.node_id = 0;
    m.name = "node_0";
    m.address = "127.0.0.1:1";
    m.role = config::Role::kRootLeaf;
    m.returns_model_output = true;
    m.pipeline = {0};
    m.addresses = {{0, m.address}};
    m.stage_file = "stages/node_0.pt";
    m.stage_sha256 = base::sha256_hex("stage");
    store.store_stage(config::to_json(m), "stage", m.stage_sha256);
    metadata = store.metadata();
  }
  store::NodeStore store;
  config::NodeMetadata metadata;
  daemon::RingMailbox mailbox;
};

Daemon& fuzzed_daemon() {
  static Daemon d;
  return d;
}

// CheckpointService: a slot of -1 or this node's own is the node's own checkpoints.
fs::path checkpoint_place(const std::string& identity, int cluster, int position) {
  const auto dir = fuzzed_daemon().store.checkpoints_dir();
  const auto& self = fuzzed_daemon().metadata;
  if (cluster < 0 || (self.cluster == cluster && self.position == position)) {
    return store::checkpoint_file(dir, identity, 0).parent_path();
  }
  return store::kept_checkpoint_dir(dir, identity, cluster, position);
}

void decode(Message which, capnp::MessageReader& message) {
  Daemon& d = fuzzed_daemon();
  switch (which) {
    case kPushStage: {
      auto p = message.getRoot<Node::PushStageParams>();
      (void)p.getSize();
      d.store.check_stage_push(p.getMetadataJson(), p.getSha256());
      break;
    }
    case kPushFile: {
      auto p = message.getRoot<Node::PushFileParams>();
      (void)p.getSize();
      (void)std::string(p.getSha256());
      const auto [dir, file] = d.store.shipped_file(p.getName());
      if (dir.string().rfind(d.store.dataset_dir().string() + "/", 0) != 0 || file.empty()) {
        std::abort();  // a shipped file outside datasets/
      }
      break;
    }
    case kLoadJob: {
      auto p = message.getRoot<Node::LoadJobParams>();
      const std::string identity = p.getIdentity();
      std::map<std::string, std::string> shipped;
      for (auto path : p.getShipped()) shipped[path.getField()] = path.getLocation();
      if (!identity.empty()) store::check_identity(identity);
      (void)p.getJobId();
      (void)p.getResumeFrom();
      if (p.getResumeIdentity().size() > 0) store::check_identity(p.getResumeIdentity());
      const auto job = config::parse_job(p.getJobToml(), "job");
      const auto located = d.store.locate_shipped(job, shipped);
      for (const auto* path : {&located.data.train, &located.data.validation, &located.loss.path}) {
        if (!path->empty() &&
            path->resolved.rfind(d.store.dataset_dir().string() + "/", 0) != 0) {
          std::abort();  // a job path the daemon opens outside datasets/
        }
      }
      break;
    }
    case kStop: {
      auto p = message.getRoot<Node::StopParams>();
      (void)std::string(p.getReason());
      (void)p.getJobId();
      break;
    }
    case kOpenRing: {
      auto p = message.getRoot<Node::OpenRingParams>();
      (void)p.getRing();
      (void)p.getFromNode();
      break;
    }
    case kRingSegment: {
      // RingSinkServer leaves the bytes in the mailbox; the all-reduce takes them with the size it
      // expects (here: the one sent, or 64 bytes when the round is odd).
      auto p = message.getRoot<schema::RingSink::SegmentParams>();
      auto data = p.getData();
      const daemon::RingMailbox::Key key{0, p.getRound(), p.getStep(), p.getSegment()};
      bool released = false;
      d.mailbox.deposit_borrowed(key, data.begin(), data.size(), [&released] { released = true; });
      const size_t expected = key.round % 2 ? 64 : data.size();
      std::vector<kj::byte> out(expected);
      try {
        d.mailbox.take(key, out.data(), expected, [] { throw std::runtime_error("no sender"); });
        if (expected > 0 && std::memcmp(out.data(), data.begin(), expected) != 0) std::abort();
      } catch (const std::runtime_error&) {
        if (expected == data.size()) std::abort();  // the right size is taken
      }
      if (!released) std::abort();  // the message would be held forever
      d.mailbox.reset();
      break;
    }
    case kAbortReduce: {
      auto p = message.getRoot<Node::AbortReduceParams>();
      d.mailbox.abort(p.getRing(), p.getReason());
      d.mailbox.reset();
      break;
    }
    case kBenchAllReduce: {
      auto p = message.getRoot<Node::BenchAllReduceParams>();
      daemon::check_bench_request(p.getPeers().size(), p.getPosition(), p.getBytes(),
                                   p.getRepetitions());
      for (auto peer : p.getPeers()) (void)std::string(peer);
      break;
    }
    case kCheckpoints: {
      auto p = message.getRoot<Node::CheckpointsParams>();
      (void)checkpoint_place(p.getIdentity(), p.getCluster(), p.getPosition());
      break;
    }
    case kStoreCheckpoint: {
      auto p = message.getRoot<Node::StoreCheckpointParams>();
      const auto dir = checkpoint_place(p.getIdentity(), p.getCluster(), p.getPosition());
      const auto file = dir / store::checkpoint_file_name(p.getUpdates());
      if (file.string().rfind(d.store.checkpoints_dir().string() + "/", 0) != 0) std::abort();
      (void)p.getSize();
      (void)std::string(p.getSha256());
      break;
    }
    case kFetchCheckpoint: {
      auto p = message.getRoot<Node::FetchCheckpointParams>();
      const auto dir = checkpoint_place(p.getIdentity(), p.getCluster(), p.getPosition());
      (void)(dir / store::checkpoint_file_name(p.getUpdates()));
      break;
    }
    case kStatusResults: {
      const auto status = wire::decode_status(message.getRoot<Node::StatusResults>().getStatus());
      (void)wire::state_name(status.state);
      break;
    }
    case kEvent: {
      (void)wire::decode_event(message.getRoot<schema::ProgressListener::EventParams>().getEvent());
      break;
    }
    case kFetchStageResults: {
      auto r = message.getRoot<Node::FetchStageResults>();
      (void)config::node_metadata_from_json(r.getMetadataJson(), "node_0 metadata");
      (void)r.getSize();
      (void)std::string(r.getSha256());
      break;
    }
    case kCheckpointsResults: {
      uint64_t sum = 0;
      for (uint64_t u : message.getRoot<Node::CheckpointsResults>().getUpdates()) sum += u;
      (void)sum;
      break;
    }
    case kFetchCheckpointResults: {
      auto r = message.getRoot<Node::FetchCheckpointResults>();
      (void)r.getSize();
      (void)std::string(r.getSha256());
      break;
    }
    case kPushMetadata: {
      // Checked as the daemon checks it, and not stored: the next input finds the same daemon.
      d.store.check_metadata_push(message.getRoot<Node::PushMetadataParams>().getMetadataJson());
      break;
    }
    case kMessageCount: break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  (void)fuzzed_daemon();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ravnest::fuzz::decode_after_first_byte(data, size, [](uint8_t first, capnp::MessageReader& m) {
      decode(static_cast<Message>(first % kMessageCount), m);
    });
  } catch (const std::runtime_error& e) {
    ravnest::fuzz::check_one_line(e.what());
  } catch (const std::invalid_argument& e) {
    ravnest::fuzz::check_one_line(e.what());
  }
  // What a pushFile may have created stays within datasets/; drop it, so runs stay independent.
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(fuzzed_daemon().store.dataset_dir(), ignored)) {
    fs::remove_all(entry.path(), ignored);
  }
  return 0;
}
