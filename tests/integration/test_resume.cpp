// Checkpoint and resume on real daemons: a synchronous job interrupted by kill -9 (of one daemon,
// or of all) and resumed with `ravnest train --resume` ends with the same weights, and the same
// losses.txt, as the same job run without interruption; with one cluster and with two, SGD with
// momentum and Adam, and Lamb with one cluster. The same when the killed daemon stays dead and a
// spare takes its place (`ravnest replace`, with the checkpoint its keeper holds), validation.txt
// included. Also: what resume and replace refuse.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <thread>

#include "libs/base/secret.h"
#include "libs/requester/requester.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

constexpr int kEpochs = 8;
constexpr int kSaveEvery = 4;

// `train_keys` go into [train] (schedule, accumulation, reduction...).
std::string job_text(const std::string& optimizer, const std::string& train_keys = "") {
  return "[train]\nepochs = " + std::to_string(kEpochs) +
         "\nbatch_size = 32\nseed = 5\nval_freq = 6\nsave_every = " + std::to_string(kSaveEvery) + "\n" +
         (train_keys.empty() ? std::string("micro_batches = 2") : train_keys) +
         "\n\n[data]\nformat = \"csv\"\ntrain = \"" +
         (test::digits_dir() / "digits_train.csv").string() +
         "\"\nvalidation = \"" + (test::digits_dir() / "digits_val.csv").string() +
         "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\n"
         "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\n" +
         optimizer + "\n\n[scheduler]\nname = \"step\"\nstep_size = 3\ngamma = 0.5\n"
         "per = \"epoch\"\n";
}


requester::Requester requester_of(const test::LocalCluster& cluster) {
  return requester::Requester(requester::load_plan(cluster.plan_dir()),
                            base::read_secret(cluster.secret_file()));
}

// Waits until the root of cluster 0 has done at least `updates` updates; returns its count.
uint64_t wait_for_updates(const test::LocalCluster& cluster, uint64_t updates) {
  auto requester = requester_of(cluster);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& report : requester.status()) {
      if (report.node.node_id == 0 && report.status.updates >= updates) {
        return report.status.updates;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("the job never reached " << updates << " updates");
  return 0;
}

using Outcome = test::LocalCluster::Outcome;

// kOne: one daemon is killed and started again; kAll: every daemon; kReplace: one daemon is
// killed for good and the spare (the node after the plan's) takes its place (`ravnest replace`).
enum class Kill { kOne, kAll, kReplace };

// Runs the job without interruption, then again interrupted by kill -9 after some updates and
// resumed, and compares.
void check_resume(const std::vector<int>& stages, const std::string& optimizer, Kill kill,
                  int victim, const std::string& train_keys = "") {
  std::vector<std::vector<size_t>> cuts;
  for (int n : stages) cuts.push_back(test::LocalCluster::even_cuts(test::digits_model(), n));
  test::LocalCluster cluster(test::digits_model(), cuts, {"32x1x8x8"},
                             kill == Kill::kReplace ? 1 : 0);
  const int clusters = static_cast<int>(cuts.size());
  int leaf = static_cast<int>(cuts[0].size());  // node ids run in cluster order
  const int spare = cluster.nodes() - 1;
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path, job_text(optimizer, train_keys));

  auto whole = cluster.ravnest("train", job_path.string());
  INFO(whole.out << whole.err);
  REQUIRE(whole.exit_code == 0);
  const Outcome expected = cluster.fuse_all(clusters, leaf, "whole");

  auto detached = cluster.ravnest("train", job_path.string() + " --detach");
  INFO(detached.out << detached.err);
  REQUIRE(detached.exit_code == 0);
  const uint64_t reached = wait_for_updates(cluster, 3 * kSaveEvery + 1);
  if (kill == Kill::kOne) {
    cluster.kill(victim, SIGKILL);
    cluster.wait_exit(victim, 10);
    cluster.start(victim);
  } else if (kill == Kill::kReplace) {
    cluster.kill(victim, SIGKILL);
    cluster.wait_exit(victim, 10);
    const std::string old_name = "node_" + std::to_string(victim);
    const std::string spare_name = "node_" + std::to_string(spare);
    const std::string plan_before = test::read_text(fs::path(cluster.plan_dir()) / "plan.json");
    auto replaced = cluster.ravnest("replace", old_name + " --with " + spare_name + " --nodes " +
                                                   cluster.pool_file());
    INFO(replaced.out << replaced.err);
    REQUIRE(replaced.exit_code == 0);
    CHECK(std::regex_search(replaced.out, std::regex(spare_name + " replaces " + old_name +
                                                     " \\(cluster [0-9]+, position [0-9]+\\); "
                                                     "`ravnest resume` continues the job after "
                                                     "update [0-9]+")));
    CHECK(replaced.out.find("from node_") != std::string::npos);  // the keeper's copy
    CHECK(!fs::exists(fs::path(cluster.plan_dir()) / "nodes" / (old_name + ".json")));
    CHECK(fs::exists(fs::path(cluster.plan_dir()) / "nodes" / (spare_name + ".json")));
    CHECK(test::read_text(fs::path(cluster.plan_dir()) / "plan.json") != plan_before);
    if (victim == leaf) leaf = spare;
  } else {
    for (int n = 0; n < cluster.nodes(); ++n) cluster.kill(n, SIGKILL);
    for (int n = 0; n < cluster.nodes(); ++n) cluster.wait_exit(n, 10);
    for (int n = 0; n < cluster.nodes(); ++n) cluster.start(n);
  }

  // `ravnest resume` without a job file takes the one trained last with the plan.
  auto resumed = kill != Kill::kOne ? cluster.ravnest("resume")
                                    : cluster.ravnest("train", job_path.string() + " --resume");
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  std::smatch match;
  const std::string said = resumed.out + resumed.err;
  REQUIRE(std::regex_search(said, match, std::regex("resuming after update (\\d+)")));
  const uint64_t from = std::stoull(match[1]);
  INFO("killed at about update " << reached << ", resumed after update " << from);
  CHECK(from >= kSaveEvery);
  // Not after a checkpoint the job had not made when it was killed: `reached` was read just
  // before the kill, and on a loaded machine (2 cores, ctest -j2) the job has gone on for up to
  // a few updates by then.
  CHECK(from <= reached + 3);

  const Outcome got = cluster.fuse_all(clusters, leaf, "resumed");
  for (int c = 0; c < clusters; ++c) {
    std::string where;
    const double diff = test::largest_difference(expected.clusters[c], got.clusters[c], &where);
    INFO("cluster " << c << ": largest difference " << diff << " in " << where);
    CHECK(diff <= 1e-6);
  }
  CHECK(got.losses == expected.losses);
  CHECK(!expected.losses.empty());
  // Every validation round, once: the resumed leaf (or the spare in its place) has the rounds
  // its checkpoint kept, and the root runs the round that followed the checkpoint's update again.
  CHECK(got.validation == expected.validation);
  CHECK(!expected.validation.empty());
  // The hosts mode (test_resume_hosts_*): daemons in namespaces of their own, rings over TCP.
  if (cluster.hosts()) CHECK(cluster.shared_memory_lines() == 0);
}

}  // namespace

TEST_CASE("resume: one_cluster_sgd, one daemon killed", "[resume][faults]") {
  check_resume({3}, "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9", Kill::kOne, 1);
}

TEST_CASE("resume: one_cluster_adam, every daemon killed", "[resume][faults]") {
  check_resume({2}, "name = \"adam\"\nlr = 0.002", Kill::kAll, 0);
}

TEST_CASE("resume: one_cluster_lamb, every daemon killed", "[resume][faults][lamb]") {
  // Ravnest's BERT example's torch_optimizer.Lamb options: its moments and step count travel in
  // the checkpoints (LambParamState).
  check_resume({2}, "name = \"lamb\"\nlr = 0.00176\neps = 1e-6\ndebias = true\nweight_decay = 0.01\n"
                    "clamp_value = 10000.0", Kill::kAll, 0);
}

TEST_CASE("resume: two_clusters_adam, one daemon killed", "[resume][faults]") {
  check_resume({2, 2}, "name = \"adam\"\nlr = 0.002", Kill::kOne, 3);
}

TEST_CASE("resume: two_clusters_sgd (cut differently), every daemon killed", "[resume][faults]") {
  check_resume({2, 3}, "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9", Kill::kAll, 0);
}

TEST_CASE("resume: accumulate_1f1b, update_frequency 2, reduce_factor 3, 1F1B", "[resume][faults]") {
  check_resume({2, 2}, "name = \"adam\"\nlr = 0.002", Kill::kOne, 2,
               "micro_batches = 2\nschedule = \"1f1b\"\nupdate_frequency = 2\nreduce_factor = 3");
}

TEST_CASE("resume: reduce_gradients, every daemon killed", "[resume][faults]") {
  check_resume({1, 2}, "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9\nweight_decay = 0.001",
               Kill::kAll, 0, "micro_batches = 2\nreduce = \"gradients\"");
}

// DiLoCo: checkpoints every 4 updates fall inside outer rounds of 5, so the resumed job needs
// theta_global and the outer momentum from the checkpoint (docs/data-parallel.md#diloco).
TEST_CASE("resume: diloco, outer steps every 5 updates, every daemon killed", "[resume][faults][diloco]") {
  check_resume({2, 2}, "name = \"adam\"\nlr = 0.002\n\n[outer]\nlr = 0.7\nevery = 5", Kill::kAll, 0);
}

TEST_CASE("resume: replace_stem, a spare takes a killed stem's place and the job resumes", "[replace][faults]") {
  check_resume({3}, "name = \"adam\"\nlr = 0.002", Kill::kReplace, 1);
}

TEST_CASE("resume: replace_two_clusters, the second's root replaced (its rings too)", "[replace][faults]") {
  check_resume({2, 2}, "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9", Kill::kReplace, 2);
}

TEST_CASE("resume: replace_leaf, a cluster's leaf replaced", "[replace][faults]") {
  check_resume({2}, "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9", Kill::kReplace, 1);
}

TEST_CASE("resume: replace_refused, what it refuses, leaving the plan as it was", "[replace][errors]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)}, {"32x1x8x8"},
                             1);
  cluster.start(0);
  cluster.start(1);  // the spare, node_2, is not started
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto plan_json = fs::path(cluster.plan_dir()) / "plan.json";
  const std::string before = test::read_text(plan_json);
  const std::string pool = " --nodes " + cluster.pool_file();
  struct Refusal {
    std::string args, says;
  };
  const std::vector<Refusal> refusals = {
      {"node_1 --with node_0" + pool, "node_0 is already in the plan"},
      {"node_7 --with node_2" + pool, "node_7 is not in the plan"},
      {"node_1 --with node_9" + pool, "no node \"node_9\" in the pool"},
      {"node_1 --with node_2" + pool, "node_2 (127.0.0.1:" + std::to_string(cluster.port(2))},
      {"node_1 --with node_2 --nodes " + (cluster.dir() / "missing.json").string(), "missing.json"},
  };
  for (const auto& refusal : refusals) {
    auto result = cluster.ravnest("replace", refusal.args);
    INFO(refusal.args << ": " << result.out << result.err);
    CHECK(result.exit_code != 0);
    CHECK(result.err.find(refusal.says) != std::string::npos);
    CHECK(std::count(result.err.begin(), result.err.end(), '\n') == 1);
    CHECK(test::read_text(plan_json) == before);
  }
  // With the spare up, and no job trained yet: the plan takes it, with nothing to resume.
  cluster.start(2);
  auto accepted = cluster.ravnest("replace", "node_1 --with node_2" + pool);
  INFO(accepted.out << accepted.err);
  CHECK(accepted.exit_code == 0);
  CHECK(accepted.out.find("node_2 replaces node_1 (cluster 0, position 1); `ravnest train` starts "
                          "a job") != std::string::npos);
  const auto plan = requester::load_plan(cluster.plan_dir());
  REQUIRE(plan.nodes.size() == 2);
  CHECK(plan.nodes[1].name == "node_2");
  CHECK(plan.nodes[0].forward_neighbours == std::vector<int>{2});
}

TEST_CASE("resume: from_start, when no checkpoint is held by every node", "[resume][errors]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  // `ravnest resume` without a job names the one trained last; none was.
  auto nothing = cluster.ravnest("resume");
  CHECK(nothing.exit_code != 0);
  CHECK(nothing.err.find("name the job file") != std::string::npos);

  // A job killed before its first checkpoint resumes from its start: the update every node holds
  // (its pushed stage), with the weights of the job run afresh.
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path, job_text("name = \"sgd\"\nlr = 0.05"));
  auto resumed = cluster.ravnest("train", job_path.string() + " --resume");
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.out.find("no checkpoint of this job that every node holds (node_0 holds none): it "
                         "starts from the beginning") != std::string::npos);
  const Outcome from_start = cluster.fuse_all(1, 1, "from_start");
  auto afresh = cluster.ravnest("train", job_path.string());
  REQUIRE(afresh.exit_code == 0);
  const Outcome fresh = cluster.fuse_all(1, 1, "fresh");
  std::string where;
  CHECK(test::largest_difference(fresh.clusters[0], from_start.clusters[0], &where) == 0);
  CHECK(fresh.losses == from_start.losses);
}
