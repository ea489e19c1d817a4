// Writes the seed corpora of the RPC fuzz targets: one valid message of each kind rpc_params
// decodes (tests/fuzz/rpc_params/), and Node.send params of each value kind, with the bytes of
// their streamed tensors after the message (tests/fuzz/rpc_transfer/); the tracker's calls and
// pool (tracker_calls/), elastic membership's messages (ring_views/), the relay's lines
// (relay_lines/) and sequences of its table's operations (relay_table/); and the inputs of past
// findings among them (regression-*). Not a fuzzer; run it
// after a change of the schema or of the targets' input format:
//   ninja -C build-fuzz fuzz_make_seeds && build-fuzz/tests/fuzz/fuzz_make_seeds tests/fuzz
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/base/sha256.h"
#include "libs/tracker/tracker_codec.h"
#include "libs/wire/membership_codec.h"
#include "libs/wire/node_report_codec.h"
#include "libs/wire/relay_table.h"
#include "schemas/ravnest.capnp.h"
#include "schemas/tracker.capnp.h"

namespace fs = std::filesystem;
using namespace ravnest;
using schema::Node;

namespace {

fs::path g_out;

void write(const std::string& dir, const std::string& name, uint8_t prefix,
           const std::function<void(capnp::MessageBuilder&)>& build, const std::string& tail = "") {
  capnp::MallocMessageBuilder message;
  build(message);
  const auto words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  fs::create_directories(g_out / dir);
  std::ofstream out(g_out / dir / name, std::ios::binary | std::ios::trunc);
  if (dir != "rpc_transfer") out.put(static_cast<char>(prefix));  // the message's kind
  out.write(reinterpret_cast<const char*>(bytes.begin()), static_cast<std::streamsize>(bytes.size()));
  out << tail;
  if (!out) {
    std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
    std::exit(1);
  }
}

// A seed of a target whose input is a byte and text (relay_lines) or bytes (relay_table).
void write_bytes(const std::string& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_out / dir);
  std::ofstream out(g_out / dir / name, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) {
    std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
    std::exit(1);
  }
}

capnp::Data::Reader data(const std::string& bytes) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size());
}

const char* kIdentity = "0123456789abcdef";

std::string metadata_json() {
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
  return config::to_json(m);
}

const char* kJob = R"(
[train]
epochs = 1
batch_size = 8
[data]
format = "csv"
train = "train.csv"
validation = "val.csv"
num_classes = 3
[loss]
name = "cross_entropy"
[optimizer]
name = "sgd"
lr = 0.1
)";

void rpc_params() {
  // The prefixes are rpc_params.cpp's Message values.
  write("rpc_params", "push_stage", 0, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::PushStageParams>();
    p.setMetadataJson(metadata_json());
    p.setSize(5);
    p.setSha256(base::sha256_hex("stage"));
  });
  // A finding kept as a regression: a checksum with a line break was echoed raw into the log.
  write("rpc_params", "regression-sha256-line-break", 0, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::PushStageParams>();
    p.setMetadataJson(metadata_json());
    p.setSize(5);
    p.setSha256("0123\nrefused 10.0.0.1: forged log line");
  });
  const std::string bundle = base::sha256_hex("bundle");
  write("rpc_params", "push_file", 1, [&](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::PushFileParams>();
    p.setName(bundle + "/MNIST/raw/train-images-idx3-ubyte");
    p.setSize(16);
    p.setSha256(base::sha256_hex("x"));
  });
  write("rpc_params", "load_job", 2, [&](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::LoadJobParams>();
    p.setJobToml(kJob);
    p.setJobId(7);
    p.setIdentity(kIdentity);
    p.setResumeFrom(3);
    auto shipped = p.initShipped(2);
    shipped[0].setField("data.train");
    shipped[0].setLocation(bundle + "/train.csv");
    shipped[1].setField("data.validation");
    shipped[1].setLocation(bundle + "/val.csv");
  });
  write("rpc_params", "stop", 3, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::StopParams>();
    p.setReason("node_2: out of memory");
    p.setJobId(7);
  });
  write("rpc_params", "open_ring", 4, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::OpenRingParams>();
    p.setRing(1);
    p.setFromNode(2);
  });
  write("rpc_params", "ring_segment", 5, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<schema::RingSink::SegmentParams>();
    p.setRound(4);
    p.setStep(1);
    p.setSegment(2);
    p.setData(data(std::string(64, '\x01')));
  });
  write("rpc_params", "abort_reduce", 6, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::AbortReduceParams>();
    p.setRing(1);
    p.setReason("node_3: gone");
  });
  write("rpc_params", "bench_all_reduce", 7, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::BenchAllReduceParams>();
    auto peers = p.initPeers(2);
    peers.set(0, "127.0.0.1:8080");
    peers.set(1, "127.0.0.1:8081");
    p.setPosition(1);
    p.setBytes(64 << 20);
    p.setRepetitions(5);
  });
  write("rpc_params", "checkpoints", 8, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::CheckpointsParams>();
    p.setIdentity(kIdentity);
    p.setCluster(1);
    p.setPosition(2);
  });
  write("rpc_params", "store_checkpoint", 9, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::StoreCheckpointParams>();
    p.setIdentity(kIdentity);
    p.setCluster(0);
    p.setPosition(0);
    p.setUpdates(12);
    p.setSize(100);
    p.setSha256(base::sha256_hex("c"));
  });
  write("rpc_params", "fetch_checkpoint", 10, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::FetchCheckpointParams>();
    p.setIdentity(kIdentity);
    p.setCluster(1);
    p.setPosition(0);
    p.setUpdates(12);
  });
  write("rpc_params", "status_results", 11, [](capnp::MessageBuilder& m) {
    wire::NodeStatusData s;
    s.node = "node_1";
    s.has_stage = true;
    s.node_id = 1;
    s.role = "stem";
    s.stage_sha256 = base::sha256_hex("stage");
    s.job_id = 7;
    s.state = wire::NodeState::kTraining;
    s.epoch = 2;
    s.updates = 30;
    s.batches = 31;
    s.last_loss = 0.25;
    s.error = "";
    wire::encode_status(s, m.initRoot<Node::StatusResults>().initStatus());
  });
  write("rpc_params", "event", 12, [](capnp::MessageBuilder& m) {
    wire::NodeEvent e;
    e.node_id = 2;
    e.cluster = 1;
    e.event.kind = wire::EventKind::kValidation;
    e.event.step = 40;
    e.event.loss = 0.5;
    e.event.accuracy = 0.9;
    e.event.message = "";
    wire::encode_event(e, m.initRoot<schema::ProgressListener::EventParams>().initEvent());
  });
  write("rpc_params", "fetch_stage_results", 13, [](capnp::MessageBuilder& m) {
    auto r = m.initRoot<Node::FetchStageResults>();
    r.setSize(5);
    r.setSha256(base::sha256_hex("stage"));
    r.setMetadataJson(metadata_json());
  });
  write("rpc_params", "checkpoints_results", 14, [](capnp::MessageBuilder& m) {
    auto updates = m.initRoot<Node::CheckpointsResults>().initUpdates(3);
    for (unsigned i = 0; i < 3; ++i) updates.set(i, 10 * (i + 1));
  });
  write("rpc_params", "fetch_checkpoint_results", 15, [](capnp::MessageBuilder& m) {
    auto r = m.initRoot<Node::FetchCheckpointResults>();
    r.setSize(10);
    r.setSha256(base::sha256_hex("checkpoint"));
  });
  write("rpc_params", "push_metadata", 16, [](capnp::MessageBuilder& m) {
    m.initRoot<Node::PushMetadataParams>().setMetadataJson(metadata_json());
  });
}

void tensor(schema::Tensor::Builder t, int8_t dtype, std::vector<int64_t> shape,
            const std::string& bytes, bool streamed, bool requires_grad = false) {
  t.setDtype(dtype);
  auto s = t.initShape(static_cast<unsigned>(shape.size()));
  for (size_t i = 0; i < shape.size(); ++i) s.set(static_cast<unsigned>(i), shape[i]);
  t.setRequiresGrad(requires_grad);
  if (streamed) {
    t.setStreamed(bytes.size());
  } else {
    t.setInline(data(bytes));
  }
}

void batch(schema::MicroBatch::Builder b) {
  b.setJobId(7);
  b.setPhase(schema::Phase::TRAIN);
  b.setStep(3);
  b.setIndex(1);
  b.setCount(4);
  b.setSamples(2);
  b.setBatchSamples(8);
  b.setEpoch(0);
  b.setLast(false);
}

void rpc_transfer() {
  const std::string floats(2 * 3 * 4, '\0');  // float32 [2, 3] of zeros
  write("rpc_transfer", "activations_inline", 0, [&](capnp::MessageBuilder& m) {
    auto t = m.initRoot<Node::SendParams>().initTransfer();
    t.setKind(schema::TransferKind::ACTIVATIONS);
    t.setFromNode(0);
    batch(t.initBatch());
    auto values = t.initValues(1);
    values[0].setIndex(0);
    tensor(values[0].initValue().initTensor(), 6, {2, 3}, floats, false, true);
  });
  // The streamed tensors' bytes follow the message (rpc_transfer.cpp).
  write("rpc_transfer", "gradients_streamed", 0, [&](capnp::MessageBuilder& m) {
    auto t = m.initRoot<Node::SendParams>().initTransfer();
    t.setKind(schema::TransferKind::GRADIENTS);
    t.setFromNode(1);
    batch(t.initBatch());
    auto values = t.initValues(2);
    values[0].setIndex(0);
    tensor(values[0].initValue().initTensor(), 6, {2, 3}, floats, true);
    values[1].setIndex(1);
    tensor(values[1].initValue().initTensor(), 11, {3}, std::string("\x01\x00\x01", 3), true);
  }, floats + std::string("\x01\x00\x01", 3));
  write("rpc_transfer", "labels", 0, [&](capnp::MessageBuilder& m) {
    auto t = m.initRoot<Node::SendParams>().initTransfer();
    t.setKind(schema::TransferKind::LABELS);
    t.setFromNode(0);
    batch(t.initBatch());
    auto values = t.initValues(1);
    tensor(values[0].initValue().initTensor(), 4, {2}, std::string(16, '\0'), false);
  });
  write("rpc_transfer", "scalars_and_lists", 0, [&](capnp::MessageBuilder& m) {
    auto t = m.initRoot<Node::SendParams>().initTransfer();
    t.setKind(schema::TransferKind::ACTIVATIONS);
    t.setFromNode(2);
    batch(t.initBatch());
    auto values = t.initValues(9);
    for (unsigned i = 0; i < 9; ++i) values[i].setIndex(i);
    values[0].initValue().setNone();
    values[1].initValue().setUninitialized();
    values[2].initValue().setInt(-3);
    values[3].initValue().setFloat(0.5);
    values[4].initValue().setBool(true);
    values[5].initValue().setText("mean");
    auto ints = values[6].initValue().initInts(2);
    ints.set(0, 4);
    ints.set(1, -1);
    values[7].initValue().initFloats(1).set(0, 1.5);
    values[8].initValue().initBools(2).set(1, true);
  });
  write("rpc_transfer", "random_state", 0, [&](capnp::MessageBuilder& m) {
    auto t = m.initRoot<Node::SendParams>().initTransfer();
    t.setKind(schema::TransferKind::RANDOM_STATE);
    t.setFromNode(1);
    batch(t.initBatch());
    auto values = t.initValues(1);
    tensor(values[0].initValue().initTensor(), 0, {5056}, std::string(5056, '\x07'), false);
  });
}

tracker::Registration registration(int id, const std::string& address) {
  tracker::Registration r;
  r.name = "node_" + std::to_string(id);
  r.addresses = {address, "[fd00::2]:8080"};
  r.hardware.memory_bytes = 8'000'000'000;
  r.hardware.memory_source = "cgroup memory.max";
  r.hardware.declared_memory_bytes = 16'000'000'000;
  r.hardware.gpu_memory_bytes = {24'000'000'000};
  r.hardware.gflops = 41.5;
  r.hardware.bandwidth_mbps = 930;
  return r;
}

void tracker_calls() {
  // The prefixes are tracker_calls.cpp's Message values; a register's prefix / 6 % 8 is its host.
  for (uint8_t host = 0; host < 2; ++host) {
    write("tracker_calls", "register_from_host_" + std::to_string(host),
          static_cast<uint8_t>(0 + 6 * host), [host](capnp::MessageBuilder& m) {
            auto r = registration(host + 1, "10.0.0." + std::to_string(host) + ":8080");
            if (host == 1) r.relay_offered = "10.0.0.1:9000";  // a daemon that relays
            tracker::encode_registration(
                r, m.initRoot<schema::Tracker::RegisterParams>().initRegistration());
          });
  }
  write("tracker_calls", "dial_back_results", 5, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<schema::Tracker::DialBackResults>();
    p.setReached(false);
    p.setWhy("Connection refused");
    auto relays = p.initRelays(2);
    relays.set(0, ":9000");
    relays.set(1, "10.0.0.2:9000");
  });
  write("tracker_calls", "heartbeat", 1, [](capnp::MessageBuilder& m) {
    m.initRoot<schema::Tracker::HeartbeatParams>().setName("node_1");
  });
  write("tracker_calls", "leave", 2, [](capnp::MessageBuilder& m) {
    m.initRoot<schema::Tracker::LeaveParams>().setName("node_1");
  });
  write("tracker_calls", "probe", 3, [](capnp::MessageBuilder& m) {
    m.initRoot<schema::Tracker::ProbeParams>().setPayload(data(std::string(64, '\x5a')));
  });
  write("tracker_calls", "pool_results", 4, [](capnp::MessageBuilder& m) {
    auto pool = m.initRoot<schema::Tracker::PoolResults>();
    pool.setEpoch(7);
    pool.setExpirySeconds(30);
    auto members = pool.initMembers(2);
    for (unsigned i = 0; i < 2; ++i) {
      tracker::Member member;
      member.registration = registration(static_cast<int>(i) + 1, "10.0.0.1:808" + std::to_string(i));
      member.from_host = "10.0.0.1";
      member.registered_at_unix = 1.7e9;
      tracker::encode_member(member, 2.5, members[i]);
    }
  });
  // Findings kept as regressions. A memory source that is not UTF-8 was admitted, and the state
  // file's JSON then could not be written (nlohmann::json threw at every save); one with a line
  // break forged a line of the tracker's log.
  write("tracker_calls", "regression-memory-source-not-utf8", 0, [](capnp::MessageBuilder& m) {
    auto r = registration(3, "10.0.0.3:8080");
    r.hardware.memory_source = "Mem\xff\xfe";
    tracker::encode_registration(r, m.initRoot<schema::Tracker::RegisterParams>().initRegistration());
  });
  write("tracker_calls", "regression-memory-source-line-break", 0, [](capnp::MessageBuilder& m) {
    auto r = registration(4, "10.0.0.3:8080");
    r.hardware.memory_source = "MemAvailable\n2026-01-01 00:00:00.000 info tracker: forged";
    tracker::encode_registration(r, m.initRoot<schema::Tracker::RegisterParams>().initRegistration());
  });
  // Addresses of any length were admitted: one of 9 KiB here; sixteen of 1 MiB made a member of
  // 16 MiB, and a full pool of them (1024 members) 16 GiB.
  write("tracker_calls", "regression-address-of-9-KiB", 0, [](capnp::MessageBuilder& m) {
    auto r = registration(5, std::string(9 << 10, 'a') + ":8080");
    tracker::encode_registration(r, m.initRoot<schema::Tracker::RegisterParams>().initRegistration());
  });
  // A pool member without an address, or with a name shorter than "node_": the requester's
  // pool_json read the first address of an empty list and cut the name past its end.
  write("tracker_calls", "regression-pool-member-without-address", 4, [](capnp::MessageBuilder& m) {
    auto members = m.initRoot<schema::Tracker::PoolResults>().initMembers(1);
    auto r = members[0].initRegistration();
    r.setName("n");
    r.initHardware().setMemoryBytes(1);
  });
}

void ring_views() {
  // The prefixes are ring_views.cpp's Message values.
  write("ring_views", "set_rings", 0, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::SetRingsParams>();
    p.setJobId(7);
    p.setEpoch(2);
    auto views = p.initViews(2);
    membership::RingView view;
    view.ring.id = 4;
    view.ring.size = 3;
    view.ring.position = 2;
    view.ring.next = {1, 0, "10.0.0.1:7000"};
    view.ring.prev = {9, 1, "10.0.0.9:7000"};
    view.run_from = 17;
    wire::encode_ring_view(view, views[0]);
    membership::RingView alone;
    alone.ring.id = 5;
    wire::encode_ring_view(alone, views[1]);
  });
  write("ring_views", "ring_rounds_results", 1, [](capnp::MessageBuilder& m) {
    const std::map<int, uint64_t> completed{{0, 12}, {4, 11}};
    wire::encode_completed_rounds(
        completed, m.initRoot<Node::RingRoundsResults>().initRings(
                       static_cast<unsigned>(completed.size())));
  });
}

void relay_lines() {
  // The first byte is relay_lines.cpp's Line value; the line follows, without its '\n'.
  const auto line = [](uint8_t which, const std::string& text) {
    return std::string(1, static_cast<char>(which)) +
           (text.empty() || text.back() != '\n' ? text : text.substr(0, text.size() - 1));
  };
  wire::RelayNonce nonce{};
  wire::RelayNonce proof{};
  for (size_t i = 0; i < nonce.size(); ++i) {
    nonce[i] = static_cast<uint8_t>(i * 7);
    proof[i] = static_cast<uint8_t>(255 - i);
  }
  write_bytes("relay_lines", "hello_control", line(0, wire::control_hello(8080)));
  write_bytes("relay_lines", "hello_join", line(0, wire::join_hello(42, proof)));
  write_bytes("relay_lines", "proof", line(1, wire::proof_line(nonce, proof)));
  write_bytes("relay_lines", "challenge", line(2, wire::challenge_line(nonce)));
  write_bytes("relay_lines", "allocated", line(3, wire::allocated_line(40001)));
  write_bytes("relay_lines", "refused", line(3, "refused: wrong secret (the proof of the relay's "
                                                "challenge does not match)"));
  write_bytes("relay_lines", "open", line(4, wire::open_line(42, "[fd00::7]:51234", nonce)));
}

void relay_table() {
  // Pairs of relay_table.cpp's Op and its argument: two nodes hold ports, peers open sessions to
  // them, one is joined, one expires, a port is released with its sessions.
  const uint8_t ops[] = {0, 0,  0, 1,  2, 0,  2, 5,  2, 1,  3, 1,   3, 17,
                         5, 48, 5, 200, 2, 4, 4, 3,  1, 0,  2, 2,   0, 4};
  write_bytes("relay_table", "hold_open_join_expire_release",
              std::string(reinterpret_cast<const char*>(ops), sizeof(ops)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s tests/fuzz\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  rpc_params();
  rpc_transfer();
  tracker_calls();
  ring_views();
  relay_lines();
  relay_table();
  return 0;
}
