// Writes the seed corpora of the RPC fuzz targets: one valid message of each kind rpc_params
// decodes (tests/fuzz/rpc_params/), and Node.send params of each value kind, with the bytes of
// their streamed tensors after the message (tests/fuzz/rpc_transfer/), and one of each kind
// tracker_messages decodes (tests/fuzz/tracker_messages/). Not a fuzzer; run it
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
#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/base/sha256.h"
#include "libs/tracker/tracker_codec.h"
#include "libs/wire/membership_codec.h"
#include "libs/wire/node_report_codec.h"
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
  if (dir == "rpc_params" || dir == "tracker_messages") out.put(static_cast<char>(prefix));
  out.write(reinterpret_cast<const char*>(bytes.begin()), static_cast<std::streamsize>(bytes.size()));
  out << tail;
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

tracker::Registration registration(const std::string& name, const std::string& address) {
  tracker::Registration r;
  r.name = name;
  r.addresses = {address};
  r.hardware.memory_bytes = 8'000'000'000;
  r.hardware.memory_source = "MemAvailable";
  r.hardware.declared_memory_bytes = 4'000'000'000;
  r.hardware.gpu_memory_bytes = {80'000'000'000};
  r.hardware.gflops = 12.5;
  r.hardware.bandwidth_mbps = 940;
  return r;
}

void tracker_messages() {
  // The prefixes are tracker_messages.cpp's Message values.
  write("tracker_messages", "register", 0, [](capnp::MessageBuilder& m) {
    auto r = registration("node_3", "10.0.0.3:8083");
    r.relay_offered = "10.0.0.3:9000";
    tracker::encode_registration(
        r, m.initRoot<schema::Tracker::RegisterParams>().initRegistration());
  });
  write("tracker_messages", "pool_results", 1, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<schema::Tracker::PoolResults>();
    p.setEpoch(7);
    p.setExpirySeconds(30);
    auto members = p.initMembers(2);
    tracker::Member a;
    a.registration = registration("node_1", "10.0.0.1:8081");
    a.from_host = "10.0.0.1";
    tracker::Member b;
    b.registration = registration("node_2", "[fd00::2]:8082");
    b.from_host = "fd00::2";
    tracker::encode_member(a, 1.5, members[0]);
    tracker::encode_member(b, 0.2, members[1]);
  });
  write("tracker_messages", "dial_back_results", 2, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<schema::Tracker::DialBackResults>();
    p.setReached(false);
    p.setWhy("Connection refused");
    auto relays = p.initRelays(2);
    relays.set(0, ":9000");
    relays.set(1, "10.0.0.2:9000");
  });
  write("tracker_messages", "set_rings", 3, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::SetRingsParams>();
    p.setJobId(5);
    p.setEpoch(2);
    membership::RingView view;
    view.ring.id = 1;
    view.ring.size = 3;
    view.ring.position = 1;
    view.ring.next = {2, 2, "10.0.0.2:8082"};
    view.ring.prev = {0, 0, "10.0.0.1:8081"};
    view.run_from = 4;
    wire::encode_ring_view(view, p.initViews(1)[0]);
  });
  write("tracker_messages", "ring_rounds_results", 4, [](capnp::MessageBuilder& m) {
    auto p = m.initRoot<Node::RingRoundsResults>();
    wire::encode_completed_rounds({{0, 3}, {1, 4}}, p.initRings(2));
  });
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
  tracker_messages();
  return 0;
}
