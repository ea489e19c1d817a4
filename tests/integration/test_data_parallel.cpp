// Data parallelism across clusters on real daemons: every cluster trains its own shard, the
// nodes that hold the same parameters average them over the plan's rings. Compared with the
// same training emulated in one process (training::train_reference_clusters).
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <thread>

#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/base/secret.h"
#include "libs/requester/requester.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

std::string job_text(const std::string& optimizer, const std::string& reduce, int epochs,
                     int max_steps) {
  std::string text = "[train]\nepochs = " + std::to_string(epochs) +
                     "\nbatch_size = 32\nmicro_batches = 2\nseed = 5\nschedule = \"1f1b\"\n" +
                     reduce + "\n";
  if (max_steps > 0) text += "max_steps = " + std::to_string(max_steps) + "\n";
  text += "\n[data]\nformat = \"csv\"\ntrain = \"" + (test::digits_dir() / "digits_train.csv").string() +
          "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\n"
          "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\n" +
          optimizer + "\n";
  return text;
}



// Trains on the cluster, fuses every cluster, and compares each with the one-process emulation.
void train_and_compare(test::LocalCluster& cluster, int clusters, const std::string& job,
                       int max_steps) {
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path, job);
  auto train = cluster.ravnest("train", job_path.string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  auto reference =
      training::train_reference_clusters(test::digits_model(), config::load_job(job_path.string()),
                                        clusters, max_steps);
  for (int c = 0; c < clusters; ++c) {
    const auto out = cluster.dir() / ("trained_" + std::to_string(c));
    auto fuse = cluster.ravnest("fuse", "--cluster " + std::to_string(c) + " --out " + out.string());
    INFO(fuse.out << fuse.err);
    REQUIRE(fuse.exit_code == 0);
    auto trained = test::load_state_dict(out / "trained_state_dict.pt");
    std::string where;
    const double diff = test::largest_difference(reference.state, trained, &where);
    INFO("cluster " << c << ": largest difference " << diff << " in " << where);
    CHECK(diff <= 1e-5);
    // BatchNorm statistics were averaged too: every cluster ends with the same ones.
    CHECK(trained.count("bn1.running_mean") == 1);
    // And training moved the weights: this is not two untouched copies compared.
    const double moved = test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                            trained, &where);
    INFO("moved by " << moved << " in " << where);
    CHECK(moved > 1e-3);
  }
}

}  // namespace

// Compressed rings are lossy, so no exact reference: both clusters must still end bitwise equal
// (every member decodes the same bytes), close to the uncompressed run, and the rings must carry
// the codec's share of its bytes.
TEST_CASE("compressed rings: clusters stay equal, near the uncompressed run, in fewer bytes",
          "[data-parallel][compression]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  test::LocalCluster cluster(test::digits_model(), {cuts, cuts}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto initial = training::state_of(torch::jit::load(test::digits_model()));
  std::map<std::string, std::map<std::string, at::Tensor>> trained;
  std::map<std::string, uint64_t> ring_bytes;
  for (const std::string codec : {"none", "fp16", "int8"}) {
    INFO("rings " << codec);
    const auto job_path = cluster.dir() / ("job_" + codec + ".toml");
    test::write_text(job_path, job_text("name = \"adam\"\nlr = 0.01", "reduce = \"gradients\"", 1,
                                        12) +
                                   "\n[compression]\nrings = \"" + codec + "\"\n");
    auto train = cluster.ravnest("train", job_path.string());
    INFO(train.out << train.err);
    REQUIRE(train.exit_code == 0);
    requester::Requester requester(requester::load_plan(cluster.plan_dir()),
                                 base::read_secret(cluster.secret_file()));
    for (const auto& r : requester.status()) {
      ring_bytes[codec] += r.status.traffic[wire::TrafficKind::kRings].bytes_sent;
      CHECK(r.status.traffic[wire::TrafficKind::kRings].bytes_sent ==
            r.status.traffic[wire::TrafficKind::kRings].bytes_received);  // N = 2: both ways
    }
    for (int c = 0; c < 2; ++c) {
      const auto out = cluster.dir() / ("trained_" + codec + "_" + std::to_string(c));
      auto fuse = cluster.ravnest("fuse", "--cluster " + std::to_string(c) + " --out " + out.string());
      INFO(fuse.out << fuse.err);
      REQUIRE(fuse.exit_code == 0);
      auto state = test::load_state_dict(out / "trained_state_dict.pt");
      if (c == 1) {
        std::string where;
        CHECK(test::largest_difference(trained[codec], state, &where) == 0);
      } else {
        trained[codec] = state;
      }
    }
  }
  std::string where;
  const double moved = test::largest_difference(initial, trained["none"], &where);
  for (const std::string codec : {"fp16", "int8"}) {
    const double diff = test::largest_difference(trained["none"], trained[codec], &where);
    INFO(codec << ": largest difference from the uncompressed run " << diff << " in " << where
               << "; training moved the weights by " << moved);
    CHECK(diff > 0);
    CHECK(diff < 0.2 * moved);
  }
  INFO("ring bytes: none " << ring_bytes["none"] << ", fp16 " << ring_bytes["fp16"] << ", int8 "
                           << ring_bytes["int8"]);
  CHECK(ring_bytes["none"] > 0);
  const double fp16 = double(ring_bytes["fp16"]) / ring_bytes["none"];
  const double int8 = double(ring_bytes["int8"]) / ring_bytes["none"];
  CHECK(fp16 >= 0.5);
  CHECK(fp16 <= 0.53);
  CHECK(int8 >= 0.25);
  CHECK(int8 <= 0.29);
}

// What `ravnest train`, `status` and `losses` show for a run of four clusters: every cluster's
// validation rounds, each leaf's loss, the per-epoch counts.
TEST_CASE("four clusters: every cluster's validation, loss and batches are shown",
          "[data-parallel][cli]") {
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}, {}}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  std::string job = job_text("name = \"adam\"\nlr = 0.01", "reduce = \"parameters\"", 2, 0);
  job.replace(job.find("\nlabel_column"), 0,
              "\nvalidation = \"" + (test::digits_dir() / "digits_val.csv").string() + "\"");
  test::write_text(job_path, job);
  auto train = cluster.ravnest("train", job_path.string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  for (int c = 0; c < 4; ++c) {
    // One round per epoch, each cluster's own.
    const std::string line = "cluster " + std::to_string(c) + " validation: loss ";
    size_t rounds = 0;
    for (size_t at = train.out.find(line); at != std::string::npos; at = train.out.find(line, at + 1)) {
      ++rounds;
    }
    CHECK(rounds == 2);
  }
  // 1437 samples in 4 shards of 359 (+1 left over): 12 batches of 32 per epoch on each.
  auto status = cluster.ravnest("status");
  INFO(status.out);
  REQUIRE(status.exit_code == 0);
  std::smatch match;
  for (int node = 0; node < 4; ++node) {
    // Root and leaf at once: its batches of the run and its last loss, not "-".
    CHECK(std::regex_search(status.out, match,
                            std::regex("node_" + std::to_string(node) +
                                       " [^\n]* 24/24 +[0-9]+\\.[0-9]{4} +[0-9.]+\n")));
  }
  auto losses = cluster.ravnest("losses");
  INFO(losses.out << losses.err);
  REQUIRE(losses.exit_code == 0);
  for (int c = 0; c < 4; ++c) {
    CHECK(losses.out.find("cluster " + std::to_string(c) + " validation after 12 updates (epoch 1)") !=
          std::string::npos);
    CHECK(losses.out.find("cluster " + std::to_string(c) + " validation after 24 updates (epoch 2)") !=
          std::string::npos);
  }
}

TEST_CASE("two clusters of two nodes average parameters (SGD, momentum averaged)",
          "[data-parallel][exact]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  test::LocalCluster cluster(test::digits_model(), {cuts, cuts}, {"32x1x8x8"});
  // The rings' segments through the connections, as between hosts (the other cases here go
  // through shared memory, all daemons being on this host). In the hosts mode the daemons are
  // apart, and refuse each other's shared memory by themselves.
  for (int node = 0; node < cluster.nodes() && !cluster.hosts(); ++node) {
    cluster.set_daemon_flags(node, {"--no-shared-memory"});
  }
  train_and_compare(cluster, 2,
                    job_text("name = \"sgd\"\nlr = 0.05\nmomentum = 0.9",
                             "reduce = \"parameters\"\nreduce_factor = 1\naverage_optim = true", 1,
                             12),
                    12);
  for (int node = 0; node < cluster.nodes(); ++node) {
    CHECK(cluster.log(node).find("through shared memory") == std::string::npos);
  }
}

TEST_CASE("clusters cut at different points average gradients (Adam)", "[data-parallel][exact]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 3),
                              test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  // The plan's rings join nodes at different pipeline positions.
  bool crossing = false;
  for (int node = 0; node < cluster.nodes(); ++node) {
    auto meta = config::load_node_metadata(cluster.plan_dir() + "/nodes/node_" +
                                           std::to_string(node) + ".json");
    for (const auto& ring : meta.rings) {
      for (const config::RingPeer* peer : {&ring.next, &ring.prev}) {
        auto other = config::load_node_metadata(cluster.plan_dir() + "/nodes/node_" +
                                                std::to_string(peer->node) + ".json");
        if (other.position != meta.position) crossing = true;
      }
    }
  }
  CHECK(crossing);
  train_and_compare(cluster, 2,
                    job_text("name = \"adam\"\nlr = 0.01", "reduce = \"gradients\"", 1, 12), 12);
  // Every daemon runs on this host: each ring link took the next member's shared memory. In the
  // hosts mode (test_data_parallel_hosts_*) each runs in a namespace of its own: none did.
  int shared_links = 0;
  for (int node = 0; node < cluster.nodes(); ++node) {
    if (cluster.log(node).find("through shared memory") != std::string::npos) ++shared_links;
  }
  if (cluster.hosts()) {
    CHECK(shared_links == 0);
    // And not for want of an offer: each receiving member refused its sender's shared memory
    // because the sender runs in another network namespace (ring_member.cpp, at debug level).
    int refused = 0;
    for (int node = 0; node < cluster.nodes(); ++node) {
      if (cluster.log(node).find("another network namespace") != std::string::npos) ++refused;
    }
    CHECK(refused >= 4);
  } else {
    CHECK(shared_links >= 4);
  }
  // Either cluster predicts every sample, in order (no shard): cluster 1, two stages, here.
  const std::string val = (test::digits_dir() / "digits_val.csv").string();
  const auto out = cluster.dir() / "predicted_1.pt";
  auto predict = cluster.ravnest("predict", cluster.plan_dir() + " " + val + " --cluster 1 --out " +
                                                out.string());
  INFO(predict.out << predict.err);
  REQUIRE(predict.exit_code == 0);
  auto check = test::run_command(test::python() + " " + test::source_dir() +
                                 "/tests/python/check_predictions.py " + test::digits_model() + " " +
                                 (cluster.dir() / "trained_1/trained_state_dict.pt").string() +
                                 " " + val + " " + out.string());
  INFO(check.out << check.err);
  CHECK(check.exit_code == 0);
}

// [data] order: each epoch's order comes from the file (as the Python package writes a shuffling
// DataLoader's), every cluster trains its contiguous part of it, into the second epoch; a file
// with a repeated index is refused at the requester in one line naming data.order.
TEST_CASE("data.order: two clusters train each epoch's part of the order file",
          "[data-parallel][exact]") {
  test::LocalCluster cluster(test::digits_model(), {{}, {}}, {"32x1x8x8"});
  const std::string csv = (test::digits_dir() / "digits_train.csv").string();
  const auto script = cluster.dir() / "orders.py";
  test::write_text(script, R"(
import sys, torch
n = sum(1 for _ in open(sys.argv[1])) - 1
g = torch.Generator().manual_seed(11)
orders = torch.stack([torch.randperm(n, generator=g) for _ in range(2)])
torch.save(orders, sys.argv[2] + "/order.pt")
orders[1, 5] = orders[1, 4]
torch.save(orders, sys.argv[2] + "/repeated.pt")
print(n)
)");
  auto made = test::run_command(test::python() + " " + script.string() + " " + csv + " " +
                                cluster.dir().string());
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  const int64_t n = std::stoll(made.out);
  const int64_t per_epoch = (n / 2 + 31) / 32;  // each cluster's batches of 32
  const int max_steps = static_cast<int>(per_epoch) + 3;  // into the second epoch
  const std::string job = job_text("name = \"sgd\"\nlr = 0.05\nmomentum = 0.9",
                                   "reduce = \"gradients\"", 2, max_steps);
  const std::string order_line = "format = \"csv\"\norder = \"";
  std::string bad = job;
  bad.replace(bad.find("format = \"csv\""), 14,
              order_line + (cluster.dir() / "repeated.pt").string() + "\"");
  std::string good = job;
  good.replace(good.find("format = \"csv\""), 14,
               order_line + (cluster.dir() / "order.pt").string() + "\"");
  train_and_compare(cluster, 2, good, max_steps);
  // Not the seeded rule's batches: without the file the weights differ.
  auto seeded = training::train_reference_clusters(
      test::digits_model(), config::parse_job(job, (cluster.dir() / "job.toml").string()), 2,
      max_steps);
  auto ordered = test::load_state_dict(cluster.dir() / "trained_0" / "trained_state_dict.pt");
  std::string where;
  CHECK(test::largest_difference(seeded.state, ordered, &where) > 1e-4);
  test::write_text(cluster.dir() / "bad.toml", bad);
  auto refused = cluster.ravnest("train", (cluster.dir() / "bad.toml").string());
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("data.order: " + (cluster.dir() / "repeated.pt").string() +
                         ": epoch 1, position 5: index ") != std::string::npos);
  CHECK(refused.err.find("is repeated") != std::string::npos);
}

TEST_CASE("parameter averaging every few updates with Adam state averaged",
          "[data-parallel][exact]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  test::LocalCluster cluster(test::digits_model(), {cuts, {}}, {"32x1x8x8"});
  train_and_compare(cluster, 2,
                    job_text("name = \"adam\"\nlr = 0.01",
                             "reduce = \"parameters\"\nreduce_factor = 3\naverage_optim = true", 1,
                             10),
                    10);
}

TEST_CASE("a peer killed mid-reduce is named and nobody hangs", "[data-parallel][faults]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  test::LocalCluster cluster(test::digits_model(), {cuts, cuts}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  test::write_text(cluster.dir() / "job.toml",
                   job_text("name = \"sgd\"\nlr = 0.01", "reduce = \"parameters\"", 300, 0));
  // Node 2 is cluster 1's root: it reduces with node 0 after every update.
  // Killed once training runs (however slowly the machine starts the daemons).
  std::chrono::steady_clock::time_point killed_at;
  auto killer = std::thread([&cluster, &killed_at] {
    cluster.wait_for_batches(0, 2);
    killed_at = std::chrono::steady_clock::now();
    cluster.kill(2, SIGKILL);
  });
  auto train = cluster.ravnest("train", (cluster.dir() / "job.toml").string(), 90);
  const auto ended = std::chrono::steady_clock::now();
  killer.join();
  const double seconds = std::chrono::duration<double>(ended - killed_at).count();
  INFO(train.out << train.err);
  CHECK(train.exit_code != 0);
  CHECK(train.err.find("node_2") != std::string::npos);
  CHECK(seconds < 10);  // from the kill to the named failure
  // Its ring partner learned who failed, and everybody still answers.
  CHECK(cluster.log(0).find("node_2") != std::string::npos);
  auto status = cluster.ravnest("status");
  INFO(status.out);
  std::smatch match;
  for (const char* node : {"node_0", "node_1", "node_3"}) {
    CHECK(std::regex_search(status.out, match, std::regex(std::string(node) + " .* idle")));
  }
}

// A node knows only its rings' neighbours (docs/node-metadata.md#rings): in a ring of four
// one-node clusters, node 0's neighbours are nodes 1 and 3, so it learns of node 2's death from
// them (a failed reduce goes round the ring) or from the requester, and still nobody hangs.
// Without shared memory, as between hosts: the segments go over data channels, whose blocked
// reads and writes must notice the death too.
TEST_CASE("a ring member two hops away killed mid-reduce: nobody hangs", "[data-parallel][faults]") {
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}, {}}, {"32x1x8x8"});
  for (int node = 0; node < 4; ++node) cluster.set_daemon_flags(node, {"--no-shared-memory"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto meta = config::load_node_metadata(cluster.plan_dir() + "/nodes/node_0.json");
  REQUIRE(meta.rings.size() == 1);
  REQUIRE(meta.rings[0].size == 4);
  CHECK(meta.rings[0].next.node == 1);
  CHECK(meta.rings[0].prev.node == 3);
  test::write_text(cluster.dir() / "job.toml",
                   job_text("name = \"sgd\"\nlr = 0.01", "reduce = \"parameters\"", 300, 0));
  std::chrono::steady_clock::time_point killed_at;
  auto killer = std::thread([&cluster, &killed_at] {
    cluster.wait_for_batches(0, 2);
    killed_at = std::chrono::steady_clock::now();
    cluster.kill(2, SIGKILL);
  });
  auto train = cluster.ravnest("train", (cluster.dir() / "job.toml").string(), 90);
  const auto ended = std::chrono::steady_clock::now();
  killer.join();
  const double seconds = std::chrono::duration<double>(ended - killed_at).count();
  INFO(train.out << train.err);
  CHECK(train.exit_code != 0);
  CHECK(train.err.find("node_2") != std::string::npos);
  CHECK(seconds < 10);  // from the kill to the named failure
  CHECK(cluster.log(0).find("ring 0: segments to node_1 over a data channel (AES-256-GCM)") !=
        std::string::npos);
  auto status = cluster.ravnest("status");
  INFO(status.out);
  std::smatch match;
  for (const char* node : {"node_0", "node_1", "node_3"}) {
    CHECK(std::regex_search(status.out, match, std::regex(std::string(node) + " .* idle")));
  }
}

// `ravnest bench allreduce` starts its own daemons; each one checks the average it computed (the
// members start from 1, 2, ..., N), so a ring that sums wrongly fails the command. Odd sizes make
// chunks and segments of unequal lengths; every path: shared memory, data channels sealed and
// plain, and segments as RPC calls (RAVNEST_RING_CHANNELS=0). At N = 3 the all-gather relays
// each segment once: sealed channels pass on the sealed bytes they received (with and without a
// codec), which must open to the same average at the member after.
TEST_CASE("bench allreduce: the daemons' rings compute the exact average", "[data-parallel]") {
  const std::string ravnest = test::binary_dir() + "/apps/ravnest/ravnest";
  // The hosts mode (test_data_parallel_hosts_*): the daemons in namespaces, unshaped (data
  // channels sealed and plain), then on links shaped to 1 Gbit/s (whose bound the command
  // measures) under the int8 codec (its average as close as int8 is: each daemon checks it).
  const auto variants =
      test::LocalCluster::hosts_mode_requested()
          ? std::vector<std::string>{" --hosts", " --hosts --insecure",
                                     " --rate 1gbit --codec int8"}
          : std::vector<std::string>{"", " --no-shared-memory", " --no-shared-memory --insecure",
                                     " --no-shared-memory --rpc",
                                     " --no-shared-memory --codec int8"};
  for (const std::string& flags : variants) {
    for (const char* size : {"1000004", "9MiB"}) {
      const bool rpc = flags.find(" --rpc") != std::string::npos;
      const std::string command = (rpc ? "env RAVNEST_RING_CHANNELS=0 " : "") + ravnest +
                                  " bench allreduce --nodes 3 --size " + size +
                                  " --reps 2 --no-gloo" +
                                  (rpc ? flags.substr(0, flags.find(" --rpc")) : flags);
      auto run = test::run_command(command, 120);
      INFO(size << flags << ": " << run.out << run.err);
      CHECK(run.exit_code == 0);
      CHECK(run.out.find("ravnest ring") != std::string::npos);
      CHECK(run.out.find("N=3") != std::string::npos);
      if (flags.find("--rate") != std::string::npos) {
        CHECK(run.out.find("link bound") != std::string::npos);
        CHECK(run.out.find("ravnest/link bound bus bandwidth") != std::string::npos);
      }
    }
  }
}
