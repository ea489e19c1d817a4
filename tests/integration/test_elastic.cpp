// Elastic jobs without a person (docs/tracker.md#elastic-jobs): `ravnest tracker`, three one-node
// clusters and an idle node, every daemon registered with the tracker; `ravnest train --elastic
// --tracker` follows the job. node_2 is killed with -9 mid-job: the requester drops its cluster,
// the tracker expires it, and the follower gives its slot to node_3 through replace_node, as the
// manual `ravnest replace` of test_churn's "a killed cluster rejoins after ravnest replace" does;
// the job ends without a command, with the reference that case checks: every cluster, the
// rejoined one too, the same weights at the end, trained, and the rejoined cluster's first loss
// near the survivors' at the update it rejoined after. Without an idle node, the lost node's
// cluster stays dropped and the others train to the end. A provider that registers mid-job joins
// as one more cluster, with the weights of `ravnest join` at that update (the join's reference).
// A provider stopped with SIGTERM hands its slot over at the agreed update, the weights those of
// the uninterrupted job. The tracker killed with -9 mid-job and started again on its state and
// address: the job goes on, said once each way, the daemons register again and nothing is judged
// lost, and a node killed after it is still replaced (the first case). Two nodes of different
// clusters killed together: with two idle nodes both are replaced and both clusters rejoin, every
// cluster alike at the end; with one, one cluster rejoins and the other stays dropped. The flags'
// misuse is refused in one line. A provider registering while a cluster stays dropped joins
// beside it; a node killed after another cluster's rejoin drops its cluster in the resumed job;
// a relay that dies for good under `--relay auto` is swapped and the cluster rejoins at its node's
// new address: each the reference of its events. Two clusters of two stages cut at different
// points: the lost node's cluster rejoins from the other's checkpoint re-cut to its stages, the
// reference of its drop and rejoin. Bounded in time; every process stopped.
// A plan of one cluster whose second stage is killed with -9: the job fails, an idle node takes
// the stage's place, and the job resumes from the newest checkpoint every node holds, the weights
// those of the uninterrupted job.
// In network namespaces (hidden; the test_elastic_hosts_nat entry): hosts behind NAT and on a
// slow link, through a relay, the tracker restarted, a node killed, a newcomer joining.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "libs/base/secret.h"
#include "libs/graph/cut_model.h"
#include "libs/config/job/job_spec.h"
#include "libs/config/plan/plan_file.h"
#include "libs/local/local_daemons.h"
#include "libs/requester/requester.h"
#include "libs/tracker/tracker_client.h"
#include "libs/training/reference_trainer.h"
#include "libs/wire/transport_security.h"
#include "tests/support/child_process.h"
#include "tests/support/digits.h"
#include "tests/support/drop_reference.h"
#include "tests/support/local_cluster.h"
#include "tests/support/rejoin_checks.h"
#include "tests/support/zoo.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

size_t pool_size(const std::string& address, const std::string& secret) {
  try {
    return tracker::fetch_pool(address, wire::make_transport_security(secret), 5).members.size();
  } catch (const std::exception&) {
    return 0;
  }
}

std::string job_text(int max_steps) {
  return "[train]\nepochs = 300\nbatch_size = 32\nmicro_batches = 2\nseed = 5\n"
         "schedule = \"1f1b\"\nreduce = \"parameters\"\nmax_steps = " +
         std::to_string(max_steps) + "\n\n[data]\nformat = \"csv\"\ntrain = \"" +
         (test::digits_dir() / "digits_train.csv").string() +
         "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\n"
         "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\n"
         "name = \"sgd\"\nlr = 0.05\n";
}

// `ravnest tracker` on `address`, its state under the cluster's folder (heartbeat 1 s, expiry 3 s).
std::vector<std::string> tracker_command(test::LocalCluster& cluster, const std::string& address) {
  return {test::binary_dir() + "/apps/ravnest/ravnest", "tracker", "--listen", address,
          "--state-dir", (cluster.dir() / "tracker").string(), "--secret-file",
          cluster.secret_file(), "--heartbeat-seconds", "1", "--expiry-seconds", "3"};
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Waits (at most 300 x 100 ms) for the follower's marker: the job is followed.
void wait_for_following(test::LocalCluster& cluster) {
  for (int i = 0; i < 300; ++i) {
    if (fs::exists(cluster.dir() / "plan" / ".following")) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// A tracker on a free loopback port (its address returned), living in `*tracker`; every daemon
// of `cluster` gets --tracker (heartbeat 1 s, expiry 3 s); the first `started` (all when
// negative) start, and it returns once they are in its pool, the plan pushed.
std::string start_with_tracker(test::LocalCluster& cluster,
                               std::unique_ptr<test::ChildProcess>* tracker, int started = -1) {
  const std::string secret = base::read_secret(cluster.secret_file());
  const std::string address = "127.0.0.1:" + std::to_string(local::free_loopback_port());
  *tracker = std::make_unique<test::ChildProcess>(tracker_command(cluster, address),
                                                  (cluster.dir() / "tracker.log").string());
  for (int node = 0; node < cluster.nodes(); ++node) {
    cluster.set_daemon_flags(node, {"--tracker", address});
  }
  if (started < 0) started = cluster.nodes();
  for (int node = 0; node < started; ++node) cluster.start(node);
  const size_t all = static_cast<size_t>(started);
  for (int i = 0; i < 150 && pool_size(address, secret) < all; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  INFO(test::read_text(cluster.dir() / "tracker.log"));
  REQUIRE(pool_size(address, secret) == all);
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  return address;
}

// The lines of `said` about the elastic changes and cluster `about`.
std::string change_lines(const std::string& said, int about = 2) {
  std::istringstream lines(said);
  std::string line, changes;
  while (std::getline(lines, line)) {
    if (line.find("elastic:") != std::string::npos ||
        line.find("cluster " + std::to_string(about) + " ") != std::string::npos)
      changes += line + "\n";
  }
  return changes;
}

// The job's elastic.csv, from the metrics folder train names.
std::string elastic_rows(const std::string& said) {
  std::smatch metrics;
  if (!std::regex_search(said, metrics, std::regex("metrics \\(CSV, TensorBoard\\): (\\S+)"))) {
    return "";
  }
  const fs::path path = fs::path(metrics[1].str()) / "elastic.csv";
  return fs::exists(path) ? test::read_text(path) : "";
}

// `ravnest fuse` of clusters 0 .. count - 1, their state dicts by cluster.
std::map<int, std::map<std::string, at::Tensor>> fused(test::LocalCluster& cluster, int count) {
  std::map<int, std::map<std::string, at::Tensor>> trained;
  for (int c = 0; c < count; ++c) trained[c] = cluster.fused(c);
  return trained;
}


// The batches node `node_id` of the plan in `plan_dir` reports, waiting until at least `batches`
// (false after `limit_seconds`); those it reported then in `*seen`. A node that resumed a job
// reports the batches of the checkpoint it resumed from at once.
bool wait_for_batches(const std::string& plan_dir, const std::string& secret, int node_id,
                      uint64_t batches, double limit_seconds, uint64_t* seen = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(limit_seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      requester::Requester requester(requester::load_plan(plan_dir), secret, false);
      for (const auto& report : requester.status()) {
        if (report.node.node_id == node_id && report.status.batches >= batches) {
          if (seen) *seen = report.status.batches;
          return true;
        }
      }
    } catch (const std::exception&) {
      // plan.json being rewritten, a node not answering yet: ask again
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

// Whether a daemon's `log` says it heard that the requester coordinates the rings (setRings
// epoch 0) before each job it started, and started one. A node lost between a start and that word
// failed its neighbours' first reduce uncoordinated (a resumed job's comes at once), and the
// requester dropped their cluster, which was healthy.
bool coordinated_before_started(const std::string& log) {
  const std::regex coordinated_line("job ([0-9]+): the requester coordinates the rings");
  const std::regex started_line("job ([0-9]+) started");
  std::set<std::string> coordinated;
  int started = 0;
  std::istringstream lines(log);
  std::string line;
  std::smatch job;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, job, coordinated_line)) {
      coordinated.insert(job[1].str());
    } else if (std::regex_search(line, job, started_line)) {
      if (!coordinated.count(job[1].str())) return false;
      ++started;
    }
  }
  return started > 0;
}

// Waits (at most `seconds`) until daemon `node`'s log has a line with `text`, looking every
// millisecond at what was written since the last look (a log at debug level grows fast): false
// when none came.
bool wait_for_log_line(const test::LocalCluster& cluster, int node, const std::string& text,
                       double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(seconds * 1000));
  std::streamoff read = 0;
  std::string unread;  // from the last line that had not ended
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(cluster.log_path(node), std::ios::binary);
    if (in && in.seekg(read)) {
      const std::string more((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      read += static_cast<std::streamoff>(more.size());
      unread += more;
      if (unread.find(text) != std::string::npos) return true;
      const auto line_end = unread.rfind('\n');
      if (line_end != std::string::npos) unread.erase(0, line_end + 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

bool plan_names(const std::string& plan_dir, int node_id) {
  try {
    for (const auto& meta : requester::load_plan(plan_dir).nodes) {
      if (meta.node_id == node_id) return true;
    }
  } catch (const std::exception&) {
  }
  return false;
}

// From `since` until plan.json (`plan_dir`) names node `node_id` (at most 120 s) and
// `first_batch` says it trained a batch: seconds, or -1 when either never comes. The time a
// replacement (or a newcomer) takes to train.
double seconds_until_training(const std::string& plan_dir, int node_id,
                              const std::function<bool()>& first_batch,
                              std::chrono::steady_clock::time_point since) {
  for (int i = 0; i < 1200 && !plan_names(plan_dir, node_id); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!plan_names(plan_dir, node_id) || !first_batch()) return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Checks `trained` against the reference of what `said` and the survivors' logs tell of the
// drops and rejoins in `cluster`'s job of `clusters` clusters of `model` (test::drop_reference):
// to 1e-5, or a warning where no single reference fixes the weights.
// Another run of the same job, for check_drop_reference to show that its check can fail: what
// `train` would have said, and the newcomers.
struct OtherRun {
  std::string said;
  std::vector<training::ReferenceJoin> joins;
};

// The reference of the drops `said` tells, against `trained`. With `other` (the same events with
// one moved): where this run has a single reference, that run has one too, and it differs from
// `trained` (where none fixes the weights, a kill at a round's end, neither has one).
void check_drop_reference(const std::string& said, test::LocalCluster& cluster, int clusters,
                          int steps, const std::vector<int>& survivors,
                          const std::map<std::string, at::Tensor>& trained,
                          const std::string& model = test::digits_model(),
                          const std::vector<training::ReferenceJoin>& joins = {},
                          const std::optional<OtherRun>& other = std::nullopt) {
  std::vector<std::string> logs;
  for (int node : survivors) logs.push_back(cluster.log(node));
  auto reference_of = [&](const std::string& text,
                          const std::vector<training::ReferenceJoin>& newcomers,
                          std::string* why) {
    return test::drop_reference(text, model, cluster.plan_dir(),
                                (cluster.dir() / "job.toml").string(), clusters, steps, logs,
                                newcomers, why);
  };
  std::string why;
  const auto reference = reference_of(said, joins, &why);
  test::check_against_reference(reference, why, trained);
  if (!other) return;
  std::string other_why;
  const auto other_reference = reference_of(other->said, other->joins, &other_why);
  INFO(other_why);
  CHECK(other_reference.has_value() == reference.has_value());
  std::string where;
  if (reference && other_reference) {
    CHECK(test::largest_difference(other_reference->state, trained, &where) > 1e-6);
  }
}

}  // namespace

TEST_CASE("elastic: the tracker restarted mid-job (kill -9, the same state and address), then a "
          "node killed with -9 is replaced by an idle registered node, without a command; the "
          "job ends with all three clusters alike", "[elastic][e_tracker_restart]") {
  // Three one-node clusters and an idle node (node_3), all registered with a tracker.
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}}, {"32x1x8x8"}, 1);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);

  // Long enough for the restart (about 7 s) and then the kill and the rejoin (about 8 s): 400
  // updates took 6 s here unloaded.
  const int steps = 1500;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  // From the kill to the replacement's first batch: the time the job trains without cluster 2.
  double back_after = -1;
  bool registered_again = false;
  auto killer = std::thread([&cluster, &back_after, &tracker, &address, &registered_again] {
    cluster.wait_for_batches(0, 4);
    wait_for_following(cluster);
    // The tracker dies mid-job and a new one starts on its state and address after a few of the
    // follower's polls (1 s) and past the expiry (3 s) it would have judged by: it counts each
    // member as heard from at its start, and every daemon registers again.
    tracker->kill(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
    tracker = std::make_unique<test::ChildProcess>(tracker_command(cluster, address),
                                                   (cluster.dir() / "tracker.log").string());
    for (int i = 0; i < 200 && !registered_again; ++i) {
      registered_again = true;
      for (int node = 0; node < 4; ++node) {
        registered_again = registered_again &&
                           count_of(cluster.log(node), "registered with tracker") >= 2;
      }
      if (!registered_again) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the follower reads it again
    cluster.kill(2, SIGKILL);
    const auto killed = std::chrono::steady_clock::now();
    cluster.wait_exit(2, 10);
    // wait_for_batches asks the plan's nodes: once plan.json names node_3.
    back_after = seconds_until_training(
        cluster.plan_dir(), 3, [&cluster] { return cluster.wait_for_batches(3, 1, 120); },
        killed);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  killer.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said) << "the replacement's first batch " << back_after
                          << " s after the kill");
  // The restart: said once each way, every daemon registered again, nothing judged lost but the
  // node killed after it.
  CHECK(registered_again);
  CHECK(count_of(said, "elastic: tracker " + address + " does not answer (") == 1);
  CHECK(count_of(said, "elastic: tracker " + address + " answers again") == 1);
  CHECK(count_of(said, " lost (") == 1);
  for (const std::string node : {"node_0", "node_1", "node_3"}) {
    CHECK(said.find(node + " has no heartbeat at tracker") == std::string::npos);
  }
  CHECK(test::read_text(cluster.dir() / "tracker.log").find("node(s); each has 3 s to heartbeat "
                                                            "again") != std::string::npos);
  CHECK(back_after > 0);
  CHECK(said.find("cluster 2 dropped (node_2") != std::string::npos);
  CHECK(said.find("elastic: node_2 lost (no heartbeat for 3 s); node_3 takes its place in "
                  "cluster 2, which rejoins at the next update boundary") != std::string::npos);
  std::smatch match;
  REQUIRE(std::regex_search(said, match, std::regex("cluster 2 rejoined after update ([0-9]+)")));
  const int rejoined_at = std::stoi(match[1].str());
  CHECK(rejoined_at > 0);
  CHECK(rejoined_at < steps);

  // The change's row in the job's metrics folder.
  const std::string rows = elastic_rows(said);
  CHECK(rows.rfind("wall_time,job,kind,lost,replacement,cluster,line\n", 0) == 0);
  CHECK(rows.find(",replace,node_2,node_3,2,\"elastic: node_2 lost") != std::string::npos);

  // The plan names node_3 in node_2's place; every cluster trained to the last update and
  // averaged after each: the same weights everywhere, not the untrained ones.
  auto trained = fused(cluster, 3);
  std::string where;
  for (int c = 1; c < 3; ++c) {
    const double apart = test::largest_difference(trained[0], trained[c], &where);
    INFO("clusters 0 and " << c << " differ by " << apart << " in " << where);
    CHECK(apart <= 1e-6);
  }
  CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                 trained[2], &where) > 1e-3);
  CHECK(cluster.log(3).find("job finished") != std::string::npos);
  const std::string losses =
      test::check_rejoined_losses(cluster.data_dir(3), cluster.data_dir(0), steps, rejoined_at);
  WARN("elastic: rejoined after update " << rejoined_at << "; " << losses);
  // Exactly the reference of that sequence (docs/faults.md#a-dropped-cluster-rejoins): cluster 2
  // averaged in the rounds before its drop, clusters 0 and 1 alone until the rejoin, cluster 2
  // back from the source's checkpoint on its own shard.
  check_drop_reference(said, cluster, 3, steps, {0, 1}, trained[0]);
}

// Another model family: the zoo's transformer (causal_lm: a token embedding, causal
// self-attention reading its mask buffer, dropout) on its tensors data, three one-node clusters
// and an idle node. node_2 killed with -9 once the job is followed: node_3 takes its place
// without a command, cluster 2 rejoins from a survivor's checkpoint (its random state too), and
// the weights are the reference of that drop and rejoin.
TEST_CASE("elastic: a transformer (causal_lm), a node killed with -9: replaced without a command, "
          "its cluster rejoins, the weights the reference of that sequence",
          "[elastic][torch2][e_causal_lm]") {
  const test::ModelFiles files = test::model_files("causal_lm");
  test::LocalCluster cluster(files.model, {{}, {}, {}}, files.example_inputs, 1);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  // Cluster 2 rejoined after update 108 to 241 in runs here (loaded and not): 800 is more than 3
  // times the latest.
  const int steps = 800;
  test::write_text(cluster.dir() / "job.toml",
                   "[train]\nepochs = 2000\nbatch_size = 2\nseed = 5\nreduce = \"parameters\"\n"
                   "max_steps = " + std::to_string(steps) + "\n\n[data]\nformat = \"tensors\"\n"
                   "train = \"" + files.train_file + "\"\n\n[loss]\nname = \"" + files.loss +
                   "\"\n\n[optimizer]\nname = \"sgd\"\nlr = 0.05\n");
  double back_after = -1;
  auto killer = std::thread([&cluster, &back_after] {
    cluster.wait_for_batches(0, 4);
    wait_for_following(cluster);
    cluster.kill(2, SIGKILL);
    const auto killed = std::chrono::steady_clock::now();
    cluster.wait_exit(2, 10);
    back_after = seconds_until_training(
        cluster.plan_dir(), 3, [&cluster] { return cluster.wait_for_batches(3, 1, 120); },
        killed);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  killer.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said) << "causal_lm: the replacement's first batch " << back_after
                          << " s after the kill");
  CHECK(back_after > 0);
  CHECK(said.find("elastic: node_2 lost (no heartbeat for 3 s); node_3 takes its place in "
                  "cluster 2, which rejoins at the next update boundary") != std::string::npos);
  std::smatch match;
  REQUIRE(std::regex_search(said, match, std::regex("cluster 2 rejoined after update ([0-9]+)")));
  CHECK(std::stoi(match[1].str()) < steps);
  auto trained = fused(cluster, 3);
  std::string where;
  for (int c = 1; c < 3; ++c) CHECK(test::largest_difference(trained[0], trained[c], &where) <= 1e-6);
  CHECK(test::largest_difference(training::state_of(torch::jit::load(files.model)), trained[0],
                                 &where) > 1e-3);
  check_drop_reference(said, cluster, 3, steps, {0, 1}, trained[0], files.model);
}

TEST_CASE("elastic: a node killed with -9 mid-job and no idle node registered: its cluster stays "
          "dropped, the others train to the end", "[elastic][e_no_idle]") {
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}}, {"32x1x8x8"});
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  const int steps = 400;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  auto killer = std::thread([&cluster] {
    cluster.wait_for_batches(0, 4);
    cluster.kill(2, SIGKILL);
    cluster.wait_exit(2, 10);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  killer.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said));
  CHECK(said.find("cluster 2 dropped (node_2") != std::string::npos);
  CHECK(said.find("elastic: node_2 lost (no heartbeat for 3 s); no idle node fits, cluster 2 "
                  "dropped; the others train on") != std::string::npos);
  CHECK(said.find("rejoined") == std::string::npos);
  CHECK(elastic_rows(said).find(",drop_cluster,node_2,,2,\"elastic: node_2 lost") !=
        std::string::npos);
  // Clusters 0 and 1 trained to the end, averaging between them: the same weights, those of the
  // reference where cluster 2 averaged in the rounds before its drop.
  auto trained = fused(cluster, 2);
  std::string where;
  CHECK(test::largest_difference(trained[0], trained[1], &where) <= 1e-6);
  check_drop_reference(said, cluster, 3, steps, {0, 1}, trained[0]);
}

// A drop after a rejoin, in one command: the take-in resumed the job under a new id, which counts
// its membership epochs anew (test::drop_reference reads each drop in its job's part of the logs).
TEST_CASE("elastic: a node killed with -9 is replaced and its cluster rejoins; another killed after "
          "the rejoin with no idle node left stays dropped; the weights the reference of all three",
          "[elastic][e_rejoin_then_drop]") {
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}}, {"32x1x8x8"}, 1);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  // Cluster 2 rejoined after update 94 to 124 in runs here, and cluster 1 dropped a few updates
  // later (its drop blocks the rings until the requester drops it): 600 is 4 times that.
  const int steps = 600;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  const std::string secret = base::read_secret(cluster.secret_file());
  bool rejoined_first = false;
  auto killer = std::thread([&] {
    cluster.wait_for_batches(0, 4);
    wait_for_following(cluster);
    cluster.kill(2, SIGKILL);
    cluster.wait_exit(2, 10);
    // node_3 takes node_2's place; once it trained in the resumed job, node_1 is killed: two
    // batches past the update it resumed from, which its status says as soon as it loaded.
    uint64_t resumed_at = 0;
    rejoined_first = wait_for_batches(cluster.plan_dir(), secret, 3, 1, 120, &resumed_at) &&
                     wait_for_batches(cluster.plan_dir(), secret, 3, resumed_at + 2, 120);
    cluster.kill(1, SIGKILL);
    cluster.wait_exit(1, 10);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 300);
  killer.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said, 1) << change_lines(said, 2));
  CHECK(rejoined_first);
  CHECK(said.find("elastic: node_2 lost (no heartbeat for 3 s); node_3 takes its place in "
                  "cluster 2, which rejoins at the next update boundary") != std::string::npos);
  CHECK(std::regex_search(said, std::regex("cluster 2 rejoined after update [0-9]+")));
  CHECK(said.find("elastic: node_1 lost (no heartbeat for 3 s); no idle node fits, cluster 1 "
                  "dropped; the others train on") != std::string::npos);
  CHECK(said.find("cluster 1 rejoined") == std::string::npos);
  // Both jobs (the first and the resumed one) were coordinated from their start.
  for (int node : {0, 3}) {
    INFO(cluster.log(node));
    CHECK(coordinated_before_started(cluster.log(node)));
  }
  // Clusters 0 and 2 trained to the end alike: the reference of cluster 2's drop (epoch 1 of the
  // first job), its rejoin, and cluster 1's drop (epoch 1 of the resumed job).
  std::map<int, std::map<std::string, at::Tensor>> trained;
  for (int c : {0, 2}) trained[c] = cluster.fused(c);
  std::string where;
  CHECK(test::largest_difference(trained[0], trained[2], &where) <= 1e-6);
  check_drop_reference(said, cluster, 3, steps, {0, 3}, trained[0]);
}

// A node lost while a take-in resumes the job (between the hold and the start) fails one call of
// the take-in, not the job: its cluster is left out and the others resume without it. node_1 is
// frozen (SIGSTOP) as soon as its log says the rejoin stopped the job there, long before the
// take-in's calls reach it (it still writes its checkpoint and answers the stop), and killed
// 1.5 s later: whichever call of the take-in waited for it then fails.
TEST_CASE("elastic: a node lost while a rejoin resumes the job leaves its cluster out; the "
          "rejoined cluster and the other train on; the weights the reference",
          "[elastic][e_lost_at_resume]") {
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}}, {"32x1x8x8"}, 1);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  const int steps = 600;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  bool frozen_at_rejoin = false;
  auto killer = std::thread([&cluster, &frozen_at_rejoin] {
    cluster.wait_for_batches(0, 4);
    wait_for_following(cluster);
    cluster.kill(2, SIGKILL);
    cluster.wait_exit(2, 10);
    frozen_at_rejoin = wait_for_log_line(
        cluster, 1, "job stopped by the requester: cluster 2 rejoins the job", 120);
    cluster.kill(1, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    cluster.kill(1, SIGKILL);
    cluster.wait_exit(1, 10);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 300);
  killer.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said, 1) << change_lines(said, 2));
  CHECK(frozen_at_rejoin);
  CHECK(said.find("elastic: node_2 lost (no heartbeat for 3 s); node_3 takes its place in "
                  "cluster 2, which rejoins at the next update boundary") != std::string::npos);
  std::smatch left;
  REQUIRE(std::regex_search(
      said, left,
      std::regex("cluster 1 dropped \\(node_1 \\([^)]*\\): [^\n]*, when the job resumed after "
                 "update ([0-9]+)\\); clusters 0, 2 go on without it")));
  std::smatch rejoined;
  REQUIRE(
      std::regex_search(said, rejoined, std::regex("cluster 2 rejoined after update ([0-9]+)")));
  CHECK(left[1].str() == rejoined[1].str());
  CHECK(said.find("cluster 1 rejoined") == std::string::npos);
  for (int node : {0, 3}) {
    INFO(cluster.log(node));
    CHECK(coordinated_before_started(cluster.log(node)));
  }
  // Clusters 0 and 2 trained to the end alike: the reference of cluster 2's drop, its rejoin
  // after update U, and cluster 1 out from the round after update U.
  std::map<int, std::map<std::string, at::Tensor>> trained;
  for (int c : {0, 2}) trained[c] = cluster.fused(c);
  std::string where;
  CHECK(test::largest_difference(trained[0], trained[2], &where) <= 1e-6);
  // The check can fail: cluster 1 left out one round later is another run.
  const std::string said_later = std::regex_replace(
      said, std::regex("when the job resumed after update " + left[1].str()),
      "when the job resumed after update " + std::to_string(std::stoll(left[1].str()) + 1));
  check_drop_reference(said, cluster, 3, steps, {0, 1}, trained[0], test::digits_model(), {},
                       OtherRun{said_later, {}});
}

// A provider that registers while a cluster stays dropped (no idle node took the killed node's
// place): it joins as one more cluster and the dropped one stays out; the data is dealt four ways,
// the dropped cluster's shard read by nobody (docs/faults.md#providers-that-join).
TEST_CASE("elastic: a node killed with -9 and no idle node, then a provider that registers joins "
          "as one more cluster while the dropped one stays out; the weights are the reference",
          "[elastic][join][e_join_while_dropped]") {
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}}, {"32x1x8x8"}, 1);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker, 3);
  const int steps = 600;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  bool dropped_first = false;
  auto events = std::thread([&cluster, &dropped_first] {
    cluster.wait_for_batches(0, 4);
    wait_for_following(cluster);
    cluster.kill(2, SIGKILL);
    cluster.wait_exit(2, 10);
    // node_3 registers only once the follower has dropped cluster 2 for good (its elastic.csv
    // row): registered before, it would take node_2's place instead.
    for (int i = 0; i < 600 && !dropped_first; ++i) {
      try {
        for (const auto& e : fs::recursive_directory_iterator(cluster.dir() / "plan")) {
          if (e.path().filename() == "elastic.csv" &&
              test::read_text(e.path()).find(",drop_cluster,node_2,") != std::string::npos) {
            dropped_first = true;
          }
        }
      } catch (const std::exception&) {
        // a file renamed while listed (plan.json written anew): look again
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    cluster.start(3);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 300);
  events.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said, 3));
  CHECK(dropped_first);
  CHECK(said.find("elastic: node_2 lost (no heartbeat for 3 s); no idle node fits, cluster 2 "
                  "dropped; the others train on") != std::string::npos);
  CHECK(said.find("elastic: node_3 registered; it joins as cluster 3 at the next update "
                  "boundary") != std::string::npos);
  CHECK(said.find("rejoined") == std::string::npos);
  std::smatch match;
  REQUIRE(std::regex_search(said, match,
                            std::regex("cluster 3 joined after update ([0-9]+): .*cluster 3 from "
                                       "cluster ([0-9]+)'s checkpoint")));
  training::ReferenceJoin newcomer;
  newcomer.after_update = std::stoll(match[1].str());
  newcomer.source = std::stoi(match[2].str());
  CHECK(newcomer.after_update < steps);
  // Clusters 0, 1 and 3 trained to the end, averaging among them; cluster 2 is out.
  std::map<int, std::map<std::string, at::Tensor>> trained;
  for (int c : {0, 1, 3}) trained[c] = cluster.fused(c);
  std::string where;
  CHECK(test::largest_difference(trained[0], trained[1], &where) <= 1e-6);
  CHECK(test::largest_difference(trained[0], trained[3], &where) <= 1e-6);
  CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                 trained[0], &where) > 1e-3);
  // The check can fail: the same events with the join one update later are another run.
  training::ReferenceJoin later = newcomer;
  ++later.after_update;
  check_drop_reference(said, cluster, 3, steps, {0, 1}, trained[0], test::digits_model(),
                       {newcomer}, OtherRun{said, {later}});
}

TEST_CASE("elastic: a provider that registers mid-job joins as one more cluster at the next "
          "update boundary; the weights are the join's reference", "[elastic][join][e_join]") {
  // Two one-node clusters train; node_2's daemon starts (and registers) once the job runs.
  test::LocalCluster cluster(test::digits_model(), {{}, {}}, {"32x1x8x8"}, 1);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker, 2);
  const int steps = 600;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  auto newcomer = std::thread([&cluster] {
    cluster.wait_for_batches(0, 4);
    // The follower saw the job start (its marker) without node_2: node_2 is no spare.
    for (int i = 0; i < 300; ++i) {
      if (fs::exists(cluster.dir() / "plan" / ".following")) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    cluster.start(2);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  newcomer.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said));
  CHECK(said.find("elastic: node_2 registered; it joins as cluster 2 at the next update "
                  "boundary") != std::string::npos);
  std::smatch match;
  REQUIRE(std::regex_search(said, match, std::regex("cluster 2 joined after update ([0-9]+)")));
  const int joined_at = std::stoi(match[1].str());
  CHECK(joined_at > 0);
  CHECK(joined_at < steps);
  CHECK(elastic_rows(said).find(",join,,node_2,2,\"elastic: node_2 registered") !=
        std::string::npos);

  // Exactly what `ravnest join` at that update gives (test_churn's reference): two clusters for
  // `joined_at` updates, then a third from cluster 0's state, the data dealt in three.
  auto trained = fused(cluster, 3);
  std::string where;
  CHECK(test::largest_difference(trained[0], trained[2], &where) <= 1e-6);
  const auto job = config::load_job((cluster.dir() / "job.toml").string());
  std::vector<std::vector<std::string>> rings;
  for (const auto& ring : config::load_plan_file(cluster.plan_dir() + "/plan.json").rings) {
    rings.push_back(ring.parameters);
  }
  auto reference = training::train_reference_clusters(test::digits_model(), job, 2, steps, {}, {},
                                                      {{joined_at, 0}}, rings);
  const double diff = test::largest_difference(reference.state, trained[0], &where);
  INFO("joined after update " << joined_at << ": " << diff << " from the reference in " << where);
  CHECK(diff <= 1e-5);
  auto unjoined =
      training::train_reference_clusters(test::digits_model(), job, 2, steps, {}, {}, {}, rings);
  CHECK(test::largest_difference(unjoined.state, trained[0], &where) > 1e-4);
  WARN("joined after update " << joined_at << ": " << diff << " from the join's reference");
}

// Issue 45's "2 new providers register mid-job -> one more cluster from the next boundary":
// two clusters of two stages train; node_4 and node_5 start (and register) once the job is
// followed: the follower joins them as cluster 2, cut like cluster 0, without a command, and the
// weights are the join's reference (a ring per stage).
TEST_CASE("elastic: two providers that register mid-job join as one more cluster of two stages at "
          "the next update boundary; the weights are the join's reference",
          "[elastic][join][e_join_two_stages]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  test::LocalCluster cluster(test::digits_model(), {cuts, cuts}, {"32x1x8x8"}, 2);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker, 4);
  // The newcomers joined after update 238 unloaded here: 800 is more than 3 times that.
  const int steps = 800;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  auto newcomers = std::thread([&cluster] {
    cluster.wait_for_batches(1, 4);
    wait_for_following(cluster);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    cluster.start(4);
    cluster.start(5);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  newcomers.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said));
  std::smatch match;
  REQUIRE(std::regex_search(said, match,
                            std::regex("cluster 2 joined after update ([0-9]+): .*cluster 2 from "
                                       "cluster ([0-9]+)'s checkpoint")));
  const int joined_at = std::stoi(match[1].str());
  const int source = std::stoi(match[2].str());
  CHECK(joined_at > 0);
  CHECK(joined_at < steps);
  CHECK(elastic_rows(said).find(",join,,node_4;node_5,2,") != std::string::npos);
  // cluster 2 is node_4 -> node_5, cut like cluster 0.
  const auto plan = requester::load_plan(cluster.plan_dir());
  std::map<std::string, std::pair<int, int>> place;  // name -> (cluster, position)
  for (const auto& meta : plan.nodes) place[meta.name] = {meta.cluster, meta.position};
  CHECK(place["node_4"] == std::make_pair(2, 0));
  CHECK(place["node_5"] == std::make_pair(2, 1));

  auto trained = fused(cluster, 3);
  std::string where;
  CHECK(test::largest_difference(trained[0], trained[2], &where) <= 1e-6);
  const auto rings = test::plan_rings(cluster.plan_dir()).names;
  const auto job = config::load_job((cluster.dir() / "job.toml").string());
  auto reference = training::train_reference_clusters(test::digits_model(), job, 2, steps, {}, {},
                                                      {{joined_at, source}}, rings);
  const double diff = test::largest_difference(reference.state, trained[0], &where);
  INFO("joined after update " << joined_at << ": " << diff << " from the reference in " << where);
  CHECK(diff <= 1e-5);
  auto unjoined =
      training::train_reference_clusters(test::digits_model(), job, 2, steps, {}, {}, {}, rings);
  CHECK(test::largest_difference(unjoined.state, trained[0], &where) > 1e-4);
  CHECK(cluster.log(5).find("job finished") != std::string::npos);
  WARN("two providers joined as cluster 2 after update " << joined_at << ": " << diff
                                                         << " from the join's reference");
}

TEST_CASE("elastic: a provider stopped with SIGTERM mid-job hands its slot to an idle node at "
          "the update every node stopped after; no update is lost",
          "[elastic][handover][e_handover]") {
  // Three one-node clusters and an idle node (node_3), all registered with a tracker.
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}}, {"32x1x8x8"}, 1);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  const int steps = 400;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  auto stopper = std::thread([&cluster] {
    cluster.wait_for_batches(0, 4);
    for (int i = 0; i < 300; ++i) {  // the rings agreed: the stop is the agreed one
      if (fs::exists(cluster.dir() / "plan" / ".following")) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    cluster.kill(2, SIGTERM);
    cluster.wait_exit(2, 30);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  stopper.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said));
  std::smatch match;
  REQUIRE(std::regex_search(
      said, match,
      std::regex("elastic: node_2 left \\(SIGTERM\\) after update ([0-9]+); node_3 takes its "
                 "place in cluster 2, the job resumes from there")));
  const int boundary = std::stoi(match[1].str());
  CHECK(boundary > 0);
  CHECK(boundary < steps);
  CHECK(said.find("resuming after update " + std::to_string(boundary)) != std::string::npos);
  CHECK(said.find("dropped") == std::string::npos);

  // Nothing lost: exactly the uninterrupted job of three clusters (the reference adding in the
  // ring's order), every cluster alike.
  auto trained = fused(cluster, 3);
  std::string where;
  for (int c = 1; c < 3; ++c) CHECK(test::largest_difference(trained[0], trained[c], &where) <= 1e-6);
  const auto job = config::load_job((cluster.dir() / "job.toml").string());
  auto reference = training::train_reference_clusters(test::digits_model(), job, 3, steps);
  const double diff = test::largest_difference(reference.state, trained[0], &where);
  INFO("handed over after update " << boundary << ": " << diff << " from the reference in "
                                   << where);
  CHECK(diff <= 1e-5);
  CHECK(cluster.log(3).find("job finished") != std::string::npos);
  WARN("handed over after update " << boundary << ": " << diff << " from the reference");
}

// Nodes 2 and 3 (clusters 2 and 3 of four one-node clusters, or both stages of cluster 1 of two
// clusters of two stages) killed with -9 together once the job is followed; returns train's
// output (stdout and stderr), exit 0 required.
std::string train_losing_two(test::LocalCluster& cluster, const std::string& address, int steps) {
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  auto killer = std::thread([&cluster] {
    cluster.wait_for_batches(0, 4);
    wait_for_following(cluster);
    cluster.kill(2, SIGKILL);
    cluster.kill(3, SIGKILL);
    cluster.wait_exit(2, 10);
    cluster.wait_exit(3, 10);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 300);
  killer.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  return train.out + train.err;
}

// The lines about clusters 2 and 3 and the elastic changes.
std::string lines_about_two(const std::string& said) {
  std::istringstream lines(said);
  std::string line, changes;
  while (std::getline(lines, line)) {
    if (line.find("elastic:") != std::string::npos || line.find("cluster 2") != std::string::npos ||
        line.find("cluster 3") != std::string::npos)
      changes += line + "\n";
  }
  return changes;
}

TEST_CASE("elastic: two nodes of different clusters killed with -9 together, two idle nodes: "
          "both replaced, both clusters rejoin, every cluster alike at the end",
          "[elastic][two][e_two_killed]") {
  // Four one-node clusters and two idle nodes (node_4, node_5), all registered.
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}, {}}, {"32x1x8x8"}, 2);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  const int steps = 300;
  const std::string said = train_losing_two(cluster, address, steps);
  WARN(lines_about_two(said));
  std::set<std::string> replacements;
  for (const int lost : {2, 3}) {
    const std::string c = std::to_string(lost);
    CHECK(said.find("cluster " + c + " dropped (node_" + c) != std::string::npos);
    std::smatch match;
    CHECK(std::regex_search(said, match,
                            std::regex("elastic: node_" + c + " lost \\(no heartbeat for 3 s\\); "
                                       "(node_[45]) takes its place in cluster " + c +
                                       ", which rejoins at the next update boundary")));
    if (!match.empty()) replacements.insert(match[1].str());
    CHECK(std::regex_search(said, std::regex("cluster " + c + " rejoined after update [0-9]+")));
  }
  CHECK(replacements == std::set<std::string>{"node_4", "node_5"});
  // Every cluster, both rejoined ones too, trained to the end with the same weights.
  auto trained = fused(cluster, 4);
  std::string where;
  for (int c = 1; c < 4; ++c) {
    const double apart = test::largest_difference(trained[0], trained[c], &where);
    INFO("clusters 0 and " << c << " differ by " << apart << " in " << where);
    CHECK(apart <= 1e-6);
  }
  CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                 trained[0], &where) > 1e-3);
  CHECK(cluster.log(4).find("job finished") != std::string::npos);
  CHECK(cluster.log(5).find("job finished") != std::string::npos);
  // The reference of two drops (membership epochs 1 and 2, in the order said) and both rejoins.
  check_drop_reference(said, cluster, 4, steps, {0, 1}, trained[0]);
}

TEST_CASE("elastic: two nodes of different clusters killed with -9 together, one idle node: one "
          "cluster replaced and rejoins, the other stays dropped",
          "[elastic][two][e_two_killed_one_idle]") {
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}, {}}, {"32x1x8x8"}, 1);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  const int steps = 300;
  const std::string said = train_losing_two(cluster, address, steps);
  WARN(lines_about_two(said));
  // Lost nodes are decided in name order when both are lost at one poll; either may come first.
  std::smatch replaced, dropped;
  REQUIRE(std::regex_search(said, replaced,
                            std::regex("elastic: node_([23]) lost \\(no heartbeat for 3 s\\); "
                                       "node_4 takes its place in cluster ([23]), which rejoins")));
  REQUIRE(std::regex_search(said, dropped,
                            std::regex("elastic: node_([23]) lost \\(no heartbeat for 3 s\\); no "
                                       "idle node fits, cluster ([23]) dropped; the others train "
                                       "on")));
  const int back = std::stoi(replaced[2].str());
  const int out = std::stoi(dropped[2].str());
  CHECK(back != out);
  CHECK(std::regex_search(said, std::regex("cluster " + std::to_string(back) +
                                           " rejoined after update [0-9]+: .*; cluster " +
                                           std::to_string(out) + " stays dropped")));
  CHECK(said.find("cluster " + std::to_string(out) + " rejoined") == std::string::npos);
  // Clusters 0, 1 and the rejoined one trained to the end, averaging among them.
  std::map<int, std::map<std::string, at::Tensor>> trained;
  for (const int c : {0, 1, back}) {
    const auto dir = cluster.dir() / ("trained_" + std::to_string(c));
    auto fuse = cluster.ravnest("fuse", "--cluster " + std::to_string(c) + " --out " + dir.string());
    INFO(fuse.out << fuse.err);
    REQUIRE(fuse.exit_code == 0);
    trained[c] = test::load_state_dict(dir / "trained_state_dict.pt");
  }
  std::string where;
  CHECK(test::largest_difference(trained[0], trained[1], &where) <= 1e-6);
  CHECK(test::largest_difference(trained[0], trained[back], &where) <= 1e-6);
  CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                 trained[back], &where) > 1e-3);
  CHECK(cluster.log(4).find("job finished") != std::string::npos);
  // The reference of two drops (membership epochs 1 and 2, in the order said) and one rejoin.
  check_drop_reference(said, cluster, 4, steps, {0, 1}, trained[0]);
}

// Two clusters of two stages (node_0 -> node_1, node_2 -> node_3) and an idle node (node_4), all
// registered; node `killed` of cluster 0 is killed with -9 once the job is followed. The idle
// node takes its stage without a command and cluster 0 rejoins from cluster 1's checkpoint: the
// lines, the row, both clusters alike at the end and trained, and the leaf of cluster 0 (the
// replacement when the leaf was killed) starting after the rejoin near cluster 1's loss there.
// `cut_apart`: cluster 1 is cut one unit earlier than cluster 0 (as the planner cuts clusters of
// nodes that measured differently), so cluster 1's checkpoint is re-cut to cluster 0's stages.
// The allowed cut nearest before `cut` (cuts after unit i) whose first stage holds other
// tensors than the cut at `cut` does: two clusters cut apart in what they hold.
size_t cut_holding_less(const std::string& model_path, size_t cut) {
  const auto model = graph::load_cut_model(model_path);
  const size_t units = model->unit_count();
  auto first_holds = [&](size_t c) { return model->cut({{0, c + 1}, {c + 1, units}}).front().held; };
  const auto holds = first_holds(cut);
  for (size_t c = cut; c-- > 0;) {
    if (model->cut_allowed()[c] && first_holds(c) != holds) return c;
  }
  throw std::runtime_error("no cut before unit " + std::to_string(cut) + " holds less");
}

void replaced_stage_rejoins(int killed, bool cut_apart) {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  auto other = cuts;
  if (cut_apart) other[0] = cut_holding_less(test::digits_model(), cuts[0]);
  test::LocalCluster cluster(test::digits_model(), {cuts, other}, {"32x1x8x8"}, 1);
  if (cut_apart) {
    // Apart in what each stage holds, not only in its bytes: the re-cut moves tensors.
    std::map<int, std::vector<std::string>> root_holds;  // cluster -> its root's tensors
    for (const auto& m : requester::load_plan(cluster.plan_dir()).nodes) {
      if (m.position == 0) root_holds[m.cluster] = m.parameters;
    }
    INFO("cluster 0's root holds " << root_holds[0].size() << " tensors, cluster 1's "
                                   << root_holds[1].size());
    REQUIRE(root_holds[0] != root_holds[1]);
  }
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  // Cluster 0 rejoined after update 116 to 356 in runs here (cut alike or apart, loaded and
  // not): 1000 is almost 3 times the latest.
  const int steps = 1000;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  const std::string lost = "node_" + std::to_string(killed);
  double back_after = -1;
  auto killer = std::thread([&cluster, &back_after, killed] {
    cluster.wait_for_batches(3, 4);
    wait_for_following(cluster);
    cluster.kill(killed, SIGKILL);
    const auto at = std::chrono::steady_clock::now();
    cluster.wait_exit(killed, 10);
    back_after = seconds_until_training(
        cluster.plan_dir(), 4, [&cluster] { return cluster.wait_for_batches(4, 1, 120); }, at);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  killer.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said, 0) << "stage " << killed << " of cluster 0 killed: the "
                                 << "replacement's first batch " << back_after
                                 << " s after the kill");
  CHECK(back_after > 0);
  // The requester names the node that failed or the one that could not reach it.
  CHECK(std::regex_search(said, std::regex("cluster 0 dropped \\([^\n]*" + lost)));
  CHECK(said.find("elastic: " + lost + " lost (no heartbeat for 3 s); node_4 takes its place in "
                  "cluster 0, which rejoins at the next update boundary") != std::string::npos);
  std::smatch match;
  REQUIRE(std::regex_search(
      said, match,
      std::regex("cluster 0 rejoined after update ([0-9]+): .*cluster 0 from cluster 1's "
                 "checkpoint")));
  const int rejoined_at = std::stoi(match[1].str());
  CHECK(rejoined_at > 0);
  CHECK(rejoined_at < steps);
  CHECK((said.find("cluster 0 from cluster 1's checkpoint, re-cut to its stages") !=
         std::string::npos) == cut_apart);
  CHECK(elastic_rows(said).find(",replace," + lost + ",node_4,0,\"elastic: " + lost + " lost") !=
        std::string::npos);
  // node_4 holds the lost node's stage, with its neighbour in cluster 0 and its ring peer.
  const auto plan = requester::load_plan(cluster.plan_dir());
  std::map<std::string, int> position;
  for (const auto& meta : plan.nodes) position[meta.name] = meta.position;
  CHECK(position.count(lost) == 0);
  REQUIRE(position.count("node_4") == 1);
  CHECK(position["node_4"] == killed);

  // Both clusters trained to the last update and averaged after each: alike, trained. The drop
  // of a cluster of several stages lands at each ring's own round
  // (docs/faults.md#providers-that-come-and-go): the reference below takes a round a ring. The
  // rejoined cluster's first loss shows that it took cluster 1's state at the rejoin, not its
  // own nor the untrained one.
  auto trained = fused(cluster, 2);
  std::string where;
  const double apart = test::largest_difference(trained[0], trained[1], &where);
  INFO("clusters 0 and 1 differ by " << apart << " in " << where);
  CHECK(apart <= 1e-6);
  CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                 trained[0], &where) > 1e-3);
  CHECK(cluster.log(4).find("job finished") != std::string::npos);
  const int leaf = killed == 1 ? 4 : 1;
  const std::string losses =
      test::check_rejoined_losses(cluster.data_dir(leaf), cluster.data_dir(3), steps, rejoined_at);
  WARN("stage " << killed << " of cluster 0: rejoined after update " << rejoined_at << "; "
                << losses);
  // Exactly the reference of that sequence: each stage's ring kept cluster 0 to its own round
  // (cluster 1's nodes say which), cluster 1 alone until the rejoin, cluster 0 back from its
  // checkpoint.
  check_drop_reference(said, cluster, 2, steps, {2, 3}, trained[0]);
}

// Cut apart, the root is the one killed: its leaf, alive and holding every activation of the
// update, finishes that round with the survivor it shares a ring with while the root's rings
// fail, so the rings drop the cluster at different rounds (each as its survivors report it).
TEST_CASE("elastic: two clusters of two stages cut at different points, cluster 0's first stage "
          "killed with -9: the idle node takes that stage without a command, cluster 0 rejoins "
          "from cluster 1's checkpoint re-cut to its stages, both clusters alike at the end",
          "[elastic][stages][torch2][e_cut_apart]") {
  replaced_stage_rejoins(0, true);
}

TEST_CASE("elastic: two clusters of two stages, cluster 0's second stage killed with -9: the "
          "idle node takes that stage without a command, cluster 0 rejoins, both clusters alike "
          "at the end", "[elastic][stages][e_second_stage]") {
  replaced_stage_rejoins(1, false);
}

TEST_CASE("elastic: both nodes of one cluster of two stages killed with -9 together, one idle "
          "node: the cluster is dropped in one line without taking the idle node, the other "
          "trains to the end", "[elastic][stages][e_both_stages_one_idle]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  test::LocalCluster cluster(test::digits_model(), {cuts, cuts}, {"32x1x8x8"}, 1);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  const int steps = 600;
  const std::string said = train_losing_two(cluster, address, steps);
  WARN(change_lines(said, 1));
  // node_2 alone would have had node_4; node_3 then none: the cluster is dropped, said once.
  CHECK(count_of(said, "no idle node fits") == 1);
  CHECK(said.find("takes its place") == std::string::npos);
  CHECK(said.find("elastic: node_3 lost (no heartbeat for 3 s); no idle node fits, cluster 1 "
                  "dropped; the others train on") != std::string::npos);
  CHECK(said.find("rejoin") == std::string::npos);
  CHECK(elastic_rows(said).find(",drop_cluster,node_3,,1,\"elastic: node_3 lost") !=
        std::string::npos);
  // The plan still names node_2 and node_3, node_4 stays idle; cluster 0 trained every update.
  CHECK(plan_names(cluster.plan_dir(), 2));
  CHECK(!plan_names(cluster.plan_dir(), 4));
  CHECK(test::numbers_of_newest(cluster.data_dir(1), "losses.txt").size() ==
        static_cast<size_t>(steps));
  auto trained = fused(cluster, 1);
  std::string where;
  CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                 trained[0], &where) > 1e-3);
  // The reference of cluster 1's drop, a round for each stage's ring.
  check_drop_reference(said, cluster, 2, steps, {0, 1}, trained[0]);
}

TEST_CASE("elastic: both nodes of one cluster of two stages killed with -9 together, two idle "
          "nodes: both replaced without a command, the cluster rejoins from the other's "
          "checkpoint, both alike at the end", "[elastic][stages][e_both_stages]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  test::LocalCluster cluster(test::digits_model(), {cuts, cuts}, {"32x1x8x8"}, 2);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  // The cluster rejoined after update 222 unloaded here: 800 is more than 3 times that.
  const int steps = 800;
  const std::string said = train_losing_two(cluster, address, steps);
  WARN(change_lines(said, 1));
  CHECK(said.find("elastic: node_2 lost (no heartbeat for 3 s); node_4 takes its place in "
                  "cluster 1, which rejoins at the next update boundary") != std::string::npos);
  CHECK(said.find("elastic: node_3 lost (no heartbeat for 3 s); node_5 takes its place in "
                  "cluster 1, which rejoins at the next update boundary") != std::string::npos);
  std::smatch match;
  REQUIRE(std::regex_search(
      said, match,
      std::regex("cluster 1 rejoined after update ([0-9]+): .*cluster 1 from cluster 0's "
                 "checkpoint")));
  const int rejoined_at = std::stoi(match[1].str());
  CHECK(rejoined_at < steps);
  auto trained = fused(cluster, 2);
  std::string where;
  const double apart = test::largest_difference(trained[0], trained[1], &where);
  INFO("clusters 0 and 1 differ by " << apart << " in " << where);
  CHECK(apart <= 1e-6);
  CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                 trained[1], &where) > 1e-3);
  test::check_rejoined_losses(cluster.data_dir(5), cluster.data_dir(1), steps, rejoined_at);
  CHECK(cluster.log(4).find("job finished") != std::string::npos);
  CHECK(cluster.log(5).find("job finished") != std::string::npos);
  // The reference of cluster 1's drop (a round for each stage's ring, from cluster 0's nodes)
  // and its rejoin with both replacements.
  check_drop_reference(said, cluster, 2, steps, {0, 1}, trained[0]);
}

TEST_CASE("elastic: the relay a cluster is reached through killed with -9 and started again: "
          "the cluster dropped on the lost connection rejoins with its own node",
          "[elastic][relay][e_relay_restarted]") {
  // Two one-node clusters; node_1 is behind NAT, reached through the tracker's relay. The tracker
  // is killed with -9 once cluster 1 trains, and started again (its state, its ports) once the
  // requester dropped cluster 1: node_1 lived all along and holds its port again.
  test::LocalCluster cluster(test::digits_model(), {{}, {}}, {"32x1x8x8"});
  const std::string secret = base::read_secret(cluster.secret_file());
  const std::string address = "127.0.0.1:" + std::to_string(local::free_loopback_port());
  const std::string relay = "127.0.0.1:" + std::to_string(local::free_loopback_port());
  auto command = tracker_command(cluster, address);
  command.insert(command.end(), {"--offer-relay", relay});
  auto start_tracker = [&](const std::string& log) {
    auto process = std::make_unique<test::ChildProcess>(command, (cluster.dir() / log).string());
    for (int i = 0; i < 300 && test::read_text(cluster.dir() / log).find("relaying for daemons") ==
                                   std::string::npos;
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return process;
  };
  auto tracker = start_tracker("tracker.log");
  cluster.set_daemon_flags(0, {"--tracker", address});
  cluster.set_daemon_flags(1, {"--relay", relay, "--tracker", address});
  cluster.start_all();
  for (int i = 0; i < 150 && pool_size(address, secret) < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  REQUIRE(pool_size(address, secret) == 2);
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  // Long enough that cluster 0, alone while cluster 1 is out (about 10 s), does not finish first.
  // Cluster 1 rejoined after update 520 to 652 in runs here: 1800 is almost 3 times that.
  const int steps = 1800;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  bool dropped = false;
  auto restarter = std::thread([&] {
    cluster.wait_for_batches(1, 20);
    wait_for_following(cluster);
    tracker->kill(SIGKILL);
    tracker.reset();
    // Started again once the requester dropped cluster 1 (its marker says so): the connection
    // was lost for longer than the requester waits.
    const auto marker = cluster.dir() / "plan" / ".following";
    for (int i = 0; i < 300 && !dropped; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      dropped = fs::exists(marker) && test::read_text(marker).find("dropped 1") != std::string::npos;
    }
    tracker = start_tracker("tracker_again.log");
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  restarter.join();
  INFO(train.out << train.err << cluster.log(1));
  REQUIRE(train.exit_code == 0);
  CHECK(dropped);
  const std::string said = train.out + train.err;
  WARN(change_lines(said, 1));
  const auto drop = said.find("cluster 1 dropped (node_1 (");
  REQUIRE(drop != std::string::npos);
  CHECK(said.find(") stopped answering", drop) != std::string::npos);
  const std::string back = "elastic: cluster 1 was dropped on a lost connection and node_1 "
                           "answers again: it rejoins with its own nodes at the next update "
                           "boundary "
                           "(1 of at most 3)";
  const auto answered = said.find(back);
  REQUIRE(answered != std::string::npos);
  CHECK(answered > drop);
  std::smatch match;
  REQUIRE(std::regex_search(
      said, match,
      std::regex("cluster 1 rejoined after update ([0-9]+): .*cluster 1 from cluster 0's "
                 "checkpoint")));
  const int rejoined_at = std::stoi(match[1].str());
  CHECK(rejoined_at > 0);
  CHECK(rejoined_at < steps);
  CHECK(elastic_rows(said).find(",rejoin_link,node_1,node_1,1,\"" + back + "\"") !=
        std::string::npos);
  // No node was replaced: the plan is the one pushed.
  CHECK(said.find("takes its place") == std::string::npos);

  // Both clusters trained to the last update and averaged after each: alike, trained; the
  // rejoined cluster's first loss shows that it took cluster 0's state at the rejoin.
  auto trained = fused(cluster, 2);
  std::string where;
  const double apart = test::largest_difference(trained[0], trained[1], &where);
  INFO("clusters 0 and 1 differ by " << apart << " in " << where);
  CHECK(apart <= 1e-6);
  CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                 trained[1], &where) > 1e-3);
  const std::string losses =
      test::check_rejoined_losses(cluster.data_dir(1), cluster.data_dir(0), steps, rejoined_at);
  WARN("cluster 1 rejoined after update " << rejoined_at << "; " << losses
                                          << "; clusters apart by " << apart);
  // Exactly the reference of that sequence: cluster 1 in the rounds before the drop, cluster 0
  // alone until the rejoin, cluster 1 back from cluster 0's checkpoint on its own shard.
  check_drop_reference(said, cluster, 2, steps, {0}, trained[0]);
}

TEST_CASE("elastic: the relay a node holds its port on (--relay auto) killed with -9 for good: the "
          "node takes the other relay the tracker names, and its cluster rejoins at its new "
          "address",
          "[elastic][relay][e_relay_auto]") {
  // Two one-node clusters and two idle daemons that relay (node_2 on 127.0.0.1, node_3 on
  // 127.0.0.4); the tracker offers no relay of its own and names its members' in name order.
  // node_1 runs --relay auto, listening on 127.0.0.2 but calling the tracker from 127.0.0.1,
  // where the tracker dials it back and finds nothing (as behind a NAT): it holds its port on
  // node_2's relay, at 127.0.0.1:PORT, which is what the plan names. node_2 is killed with -9 once
  // cluster 1 trains and never comes back: node_1 takes node_3's relay, registers 127.0.0.4:PORT,
  // and the requester, which dropped cluster 1 on the lost connection, finds it there.
  test::LocalCluster cluster(test::digits_model(), {{}, {}}, {"32x1x8x8"}, 2);
  const std::string secret = base::read_secret(cluster.secret_file());
  const std::string address = "127.0.0.1:" + std::to_string(local::free_loopback_port());
  auto tracker = std::make_unique<test::ChildProcess>(tracker_command(cluster, address),
                                                      (cluster.dir() / "tracker.log").string());
  cluster.set_daemon_flags(2, {"--tracker", address, "--offer-relay", "127.0.0.1:0"});
  cluster.set_daemon_flags(3, {"--tracker", address, "--offer-relay", "127.0.0.4:0"});
  cluster.start(2);
  cluster.start(3);
  for (int i = 0; i < 150 && pool_size(address, secret) < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  REQUIRE(pool_size(address, secret) == 2);
  const std::string port = std::to_string(cluster.port(1));
  cluster.set_daemon_flags(0, {"--tracker", address});
  cluster.set_daemon_flags(1, {"--relay", "auto", "--tracker", address, "--listen",
                               "127.0.0.2:" + port});
  cluster.start(0);
  cluster.start(1);  // until its port on 127.0.0.1, which node_2's relay holds, answers
  for (int i = 0; i < 150 && pool_size(address, secret) < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  REQUIRE(pool_size(address, secret) == 4);
  {
    INFO(cluster.log(1));
    REQUIRE(std::regex_search(cluster.log(1),
                              std::regex("behind NAT: the tracker .* cannot dial port " + port +
                                         " back .*; holding it on the relay 127\\.0\\.0\\.1:")));
  }
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  // Long enough that cluster 0, alone while cluster 1 is out, does not finish first.
  // Cluster 1 rejoined after update 425 to 481 in runs here (loaded and not): 1600 is 3 times that.
  const int steps = 1600;
  test::write_text(cluster.dir() / "job.toml", job_text(steps));
  auto killer = std::thread([&] {
    cluster.wait_for_batches(1, 20);
    wait_for_following(cluster);
    cluster.kill(2, SIGKILL);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  killer.join();
  INFO(train.out << train.err << cluster.log(1) << test::read_text(cluster.dir() / "tracker.log"));
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said, 1));
  // node_1 said the switch once, from node_2's relay to node_3's.
  std::smatch switched;
  const std::string log_1 = cluster.log(1);
  REQUIRE(std::regex_search(log_1, switched,
                            std::regex("relay 127\\.0\\.0\\.1:[0-9]+ lost for [0-9]+ s: holding "
                                       "port " + port + " on the relay (127\\.0\\.0\\.4:[0-9]+) "
                                       "the tracker named instead")));
  WARN("node_1: " << switched[0].str());
  CHECK(count_of(log_1, " the tracker named instead") == 1);
  CHECK(log_1.find("registered with tracker " + address + " as node_1 at 127.0.0.4:" + port +
                   " now") != std::string::npos);
  CHECK(test::read_text(cluster.dir() / "tracker.log")
            .find("node_1 moved to 127.0.0.4:" + port + " (was 127.0.0.1:" + port) !=
        std::string::npos);
  const auto drop = said.find("cluster 1 dropped (node_1 (127.0.0.1:" + port);
  REQUIRE(drop != std::string::npos);
  const std::string moved = "elastic: node_1 answers at 127.0.0.4:" + port + " now (its relay "
                            "changed; the plan had 127.0.0.1:" + port + ")";
  const auto answered_there = said.find(moved);
  REQUIRE(answered_there != std::string::npos);
  CHECK(answered_there > drop);
  const std::string back = "elastic: cluster 1 was dropped on a lost connection and node_1 "
                           "answers again: it rejoins with its own nodes at the next update "
                           "boundary (1 of at most 3)";
  const auto answered = said.find(back);
  REQUIRE(answered != std::string::npos);
  CHECK(answered > answered_there);
  std::smatch match;
  REQUIRE(std::regex_search(
      said, match,
      std::regex("cluster 1 rejoined after update ([0-9]+): .*cluster 1 from cluster 0's "
                 "checkpoint")));
  const int rejoined_at = std::stoi(match[1].str());
  CHECK(rejoined_at > 0);
  CHECK(rejoined_at < steps);
  const std::string rows = elastic_rows(said);
  CHECK(rows.find(",moved,node_1,127.0.0.4:" + port + ",1,\"" + moved + "\"") !=
        std::string::npos);
  CHECK(rows.find(",rejoin_link,node_1,node_1,1,\"" + back + "\"") != std::string::npos);
  // The idle relay's death changed nothing else: no node was replaced, none joined.
  CHECK(said.find("takes its place") == std::string::npos);
  CHECK(said.find(" joins") == std::string::npos);

  // The plan names node_1 at its new address, in its own file and in its ring peer's.
  for (const auto& meta : requester::load_plan(cluster.plan_dir()).nodes) {
    if (meta.node_id == 1) CHECK(meta.address == "127.0.0.4:" + port);
    if (meta.node_id == 0) {
      REQUIRE(!meta.rings.empty());
      CHECK(meta.rings[0].next.address == "127.0.0.4:" + port);
    }
  }
  // The tracker's pool shows it there too.
  const auto status = test::run_command(test::binary_dir() + "/apps/ravnest/ravnest status "
                                        "--tracker " + address + " --secret-file " +
                                        cluster.secret_file());
  INFO(status.out << status.err);
  CHECK(status.out.find("127.0.0.4:" + port) != std::string::npos);
  CHECK(status.out.find("127.0.0.1:" + port) == std::string::npos);

  // `ravnest fuse` reaches node_1 at its new address; both clusters alike, and exactly the
  // reference of the drop and the rejoin.
  auto trained = fused(cluster, 2);
  std::string where;
  const double apart = test::largest_difference(trained[0], trained[1], &where);
  INFO("clusters 0 and 1 differ by " << apart << " in " << where);
  CHECK(apart <= 1e-6);
  WARN("cluster 1 rejoined at its new address after update " << rejoined_at);
  check_drop_reference(said, cluster, 2, steps, {0}, trained[0]);
}

TEST_CASE("elastic: --elastic without --tracker, --tracker alone, --elastic with --detach: one line "
          "each, exit 1", "[elastic][e_flags]") {
  const std::string ravnest = test::binary_dir() + "/apps/ravnest/ravnest";
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--elastic", "ravnest train: --elastic needs --tracker HOST:PORT"},
      {"--tracker 127.0.0.1:1", "ravnest train: --tracker is for --elastic"},
      {"--elastic --tracker 127.0.0.1:1 --detach",
       "ravnest train: --elastic follows the job; it takes no --detach"}};
  for (const auto& [flags, line] : refused) {
    auto run = test::run_command(ravnest + " train job.toml " + flags);
    INFO(flags << ": " << run.out << run.err);
    CHECK(run.exit_code == 1);
    CHECK(run.err.find(line) != std::string::npos);
  }
}

TEST_CASE("elastic: a plan of one cluster whose second stage is killed with -9 mid-job: an idle "
          "registered node takes its place and the job resumes from the newest checkpoint every "
          "node holds; the weights are the uninterrupted job's",
          "[elastic][one_cluster][e_one_cluster]") {
  // One cluster of two stages (node_0, node_1) and an idle node (node_2), all registered.
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"}, 1);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  const int steps = 200;
  // A checkpoint every 5 updates: the resume reruns at most 5 (the default is every 100).
  std::string text = job_text(steps);
  text.replace(text.find("[train]\n"), 8, "[train]\nsave_every = 5\n");
  test::write_text(cluster.dir() / "job.toml", text);
  // From the kill to the replacement's first batch: the time the job does not train.
  double back_after = -1;
  auto killer = std::thread([&cluster, &back_after] {
    cluster.wait_for_batches(1, 12);
    cluster.kill(1, SIGKILL);
    const auto killed = std::chrono::steady_clock::now();
    cluster.wait_exit(1, 10);
    // wait_for_batches asks the plan's nodes: once plan.json names node_2.
    back_after = seconds_until_training(
        cluster.plan_dir(), 2, [&cluster] { return cluster.wait_for_batches(2, 1, 120); },
        killed);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  killer.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said) << "the replacement's first batch " << back_after
                          << " s after the kill");
  CHECK(back_after > 0);
  std::smatch match;
  REQUIRE(std::regex_search(
      said, match,
      std::regex("elastic: node_1 lost \\(no heartbeat for 3 s\\); node_2 takes its place in "
                 "cluster 0, the job resumes after update ([0-9]+)")));
  const int resumed_at = std::stoi(match[1].str());
  CHECK(resumed_at >= 5);
  CHECK(resumed_at < steps);
  CHECK(said.find("resuming after update " + std::to_string(resumed_at)) != std::string::npos);
  CHECK(elastic_rows(said).find(",replace_resume,node_1,node_2,0,\"elastic: node_1 lost") !=
        std::string::npos);

  // Resumed from update U, the job reran U+1.. with the same data order: the uninterrupted job.
  auto trained = fused(cluster, 1);
  std::string where;
  const auto job = config::load_job((cluster.dir() / "job.toml").string());
  auto reference = training::train_reference_clusters(test::digits_model(), job, 1, steps);
  const double diff = test::largest_difference(reference.state, trained[0], &where);
  INFO("resumed after update " << resumed_at << ": " << diff << " from the reference in "
                               << where);
  CHECK(diff <= 1e-5);
  CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                 trained[0], &where) > 1e-3);
  CHECK(cluster.log(2).find("job finished") != std::string::npos);
  WARN("one cluster: resumed after update " << resumed_at << ": " << diff
                                            << " from the reference");
}

TEST_CASE("elastic: a plan of one cluster whose two stages are both killed with -9 mid-job, two "
          "idle nodes: each takes a stage, no slot has a checkpoint (each one's keeper was the "
          "other), and the job runs again from its start; the uninterrupted job's weights",
          "[elastic][one_cluster][e_one_cluster_both]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"}, 2);
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  const int steps = 200;
  std::string text = job_text(steps);
  text.replace(text.find("[train]\n"), 8, "[train]\nsave_every = 5\n");
  test::write_text(cluster.dir() / "job.toml", text);
  auto killer = std::thread([&cluster] {
    cluster.wait_for_batches(1, 12);
    cluster.kill(0, SIGKILL);
    cluster.kill(1, SIGKILL);
    cluster.wait_exit(0, 10);
    cluster.wait_exit(1, 10);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  killer.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said, 0));
  std::set<std::string> replacements;
  for (const std::string lost : {"node_0", "node_1"}) {
    std::smatch match;
    CHECK(std::regex_search(
        said, match,
        std::regex("elastic: " + lost + " lost \\(no heartbeat for 3 s\\); (node_[23]) takes its "
                   "place in cluster 0, the job resumes from its start \\(no checkpoint of its "
                   "slot that every other node holds\\)")));
    if (!match.empty()) replacements.insert(match[1].str());
  }
  CHECK(replacements == std::set<std::string>{"node_2", "node_3"});
  CHECK(said.find("it starts from the beginning") != std::string::npos);

  // Run again from its start: the uninterrupted job.
  auto trained = fused(cluster, 1);
  std::string where;
  const auto job = config::load_job((cluster.dir() / "job.toml").string());
  auto reference = training::train_reference_clusters(test::digits_model(), job, 1, steps);
  const double diff = test::largest_difference(reference.state, trained[0], &where);
  INFO(diff << " from the reference in " << where);
  CHECK(diff <= 1e-5);
  CHECK(cluster.log(2).find("job finished") != std::string::npos);
  CHECK(cluster.log(3).find("job finished") != std::string::npos);
}

TEST_CASE("elastic: a plan of one cluster whose second stage is killed with -9 mid-job and no idle "
          "node registered: the job fails, saying no idle node fits",
          "[elastic][one_cluster][e_one_cluster_no_idle]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  std::unique_ptr<test::ChildProcess> tracker;
  const std::string address = start_with_tracker(cluster, &tracker);
  test::write_text(cluster.dir() / "job.toml", job_text(400));
  auto killer = std::thread([&cluster] {
    cluster.wait_for_batches(1, 4);
    cluster.kill(1, SIGKILL);
    cluster.wait_exit(1, 10);
  });
  auto train = cluster.ravnest(
      "train", (cluster.dir() / "job.toml").string() + " --elastic --tracker " + address, 240);
  killer.join();
  INFO(train.out << train.err);
  CHECK(train.exit_code == 1);
  const std::string said = train.out + train.err;
  WARN(change_lines(said));
  CHECK(said.find("elastic: node_1 lost (no heartbeat for 3 s); no idle node fits its stage: the "
                  "job fails (`ravnest replace`, then `ravnest resume`, once one does)") !=
        std::string::npos);
  CHECK(said.find("ravnest: error: training failed: node_") != std::string::npos);
  CHECK(said.find("resuming") == std::string::npos);
  CHECK(elastic_rows(said).find(",fail,node_1,,0,\"elastic: node_1 lost") != std::string::npos);
}

// Issue 45's setting in network namespaces (the test_elastic_hosts_nat ctest entry runs it through
// hosts_gate.sh, which skips loudly where namespaces cannot be made; hidden from plain runs):
// `count` hosts on one bridge (scripts/wan --nat 2 --slow 3:20mbit): host 3 on a 20 Mbit/s link,
// the last two each behind a NAT of its own (iptables masquerade, no port forward: nothing reaches
// them), the others reachable. The tracker runs on this namespace's bridge address (heartbeat
// 1 s, expiry 3 s); node_2 offers a relay and registers it; every other daemon runs `--relay auto`:
// the tracker dials each back, reaches the reachable ones, and names node_2's relay to the NAT'd
// ones, which keep their outbound connection to it. Daemon i listens on host i, port 18500 + i.
struct NatHosts {
  explicit NatHosts(int count)
      : hosts(local::unique_hosts_name("rnt"), count, "1gbit", 2, "3:20mbit"),
        secret_file((dir.path() / "secret").string()),
        ravnest(test::binary_dir() + "/apps/ravnest/ravnest"),
        tracker_address(hosts.bridge_address() + ":" +
                        std::to_string(local::free_loopback_port())),
        relay_address(hosts.address(2) + ":19000"),
        tracker_log(dir.path() / "tracker.log"),
        plan_dir(dir.path() / "plan"),
        connection(" --plan " + plan_dir.string() + " --secret-file " + secret_file),
        daemons(static_cast<size_t>(count)) {
    REQUIRE(hosts.behind_nat(count - 1));
    REQUIRE(hosts.behind_nat(count - 2));
    REQUIRE(!hosts.behind_nat(3));
    REQUIRE(!hosts.bridge_address().empty());
    test::write_text(secret_file, "test-secret-nat-" + std::to_string(::getpid()) + "\n");
    fs::permissions(secret_file, fs::perms::owner_read | fs::perms::owner_write);
    secret = base::read_secret(secret_file);
    start_tracker();
  }

  void start_tracker() {
    tracker = std::make_unique<test::ChildProcess>(
        std::vector<std::string>{ravnest, "tracker", "--listen", tracker_address, "--state-dir",
                                 (dir.path() / "tracker").string(), "--secret-file", secret_file,
                                 "--heartbeat-seconds", "1", "--expiry-seconds", "3"},
        tracker_log.string());
  }
  fs::path daemon_log(int i) const {
    return dir.path() / ("daemon_" + std::to_string(i) + ".log");
  }
  std::string log(int i) const {
    return fs::exists(daemon_log(i)) ? test::read_text(daemon_log(i)) : std::string();
  }
  void start_daemon(int i) {
    const std::string port = std::to_string(18500 + i);
    std::vector<std::string> args = {"/usr/bin/env", "ip", "netns", "exec",
                                     hosts.namespace_of(i), test::binary_dir() +
                                     "/apps/ravnestd/ravnestd", "--node",
                                     "node_" + std::to_string(i), "--listen",
                                     hosts.address(i) + ":" + port, "--data-dir",
                                     (dir.path() / ("data_" + std::to_string(i))).string(),
                                     "--log-file", daemon_log(i).string(), "--log-level", "info",
                                     "--secret-file", secret_file, "--threads", "1", "--tracker",
                                     tracker_address};
    if (i == 2) args.insert(args.end(), {"--offer-relay", relay_address});
    if (i != 2) args.insert(args.end(), {"--relay", "auto"});
    daemons[static_cast<size_t>(i)] = std::make_unique<test::ChildProcess>(
        args, (dir.path() / ("daemon_" + std::to_string(i) + ".out")).string());
  }
  // node_2 first (its relay up), then `others`; returns once all of them are in the pool.
  void start_with_relay(const std::vector<int>& others) {
    start_daemon(2);
    for (int i = 0; i < 100 && log(2).find("relay") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int i : others) start_daemon(i);
    wait_pool(others.size() + 1);
  }
  std::set<std::string> pool_names() const {
    std::set<std::string> names;
    try {
      for (const auto& m : tracker::fetch_pool(tracker_address,
                                               wire::make_transport_security(secret), 5).members) {
        names.insert(m.registration.name);
      }
    } catch (const std::exception&) {
    }
    return names;
  }
  void wait_pool(size_t count) {
    for (int i = 0; i < 300 && pool_names().size() < count; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::string logs = test::read_text(tracker_log);
    for (size_t i = 0; i < daemons.size(); ++i) logs += log(static_cast<int>(i));
    INFO(logs);
    REQUIRE(pool_names().size() == count);
  }
  // The NAT'd hosts told so by the tracker's dial-back, not by a flag, and registered at the
  // relay's host with their own port; `reachable` ones reached.
  void check_reach(const std::vector<int>& reachable) {
    const auto pool = tracker::fetch_pool(tracker_address, wire::make_transport_security(secret), 5);
    const int count = static_cast<int>(daemons.size());
    for (int i : {count - 2, count - 1}) {
      const std::string port = std::to_string(18500 + i);
      CHECK(log(i).find("behind NAT: the tracker " + tracker_address + " cannot dial port " +
                        port + " back") != std::string::npos);
      CHECK(log(i).find("holding it on the relay " + relay_address + " it named") !=
            std::string::npos);
      for (const auto& m : pool.members) {
        if (m.registration.name == "node_" + std::to_string(i)) {
          CHECK(m.registration.addresses.front() == hosts.address(2) + ":" + port);
        }
      }
    }
    for (int i : reachable) {
      CHECK(log(i).find("reachable: the tracker " + tracker_address + " dialled port " +
                        std::to_string(18500 + i) + " back") != std::string::npos);
    }
  }
  // `clusterize --tracker` of `clusters` clusters of `stages` stages from the live pool (each
  // cluster cut by its nodes' measured figures), pushed.
  void plan(int clusters, int stages) {
    const std::string pool_file = (dir.path() / "node_configs.json").string();
    const std::string from = " --tracker " + tracker_address + " --secret-file " + secret_file;
    auto planned = test::run_command(
        "cd " + dir.path().string() + " && " + ravnest + " clusterize " + test::digits_model() +
            from + " --nodes " + pool_file + " --out " + plan_dir.string() +
            " --example-input 32x1x8x8:float32 --no-memory-probe --clusters " +
            std::to_string(clusters) + " --stages " + std::to_string(stages),
        300);
    INFO("clusterize: " << planned.out << planned.err);
    REQUIRE(planned.exit_code == 0);
    auto pushed = test::run_command(ravnest + " push" + connection, 300);
    INFO("push: " << pushed.out << pushed.err);
    REQUIRE(pushed.exit_code == 0);
  }
  // The tracker killed with -9 and started again on its state 3.5 s later; true once every daemon
  // of `nodes` registered again.
  bool restart_tracker(const std::vector<int>& nodes) {
    tracker->kill(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
    start_tracker();
    for (int i = 0; i < 300; ++i) {
      bool all = true;
      for (int node : nodes) all = all && count_of(log(node), "registered with tracker") >= 2;
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  test::CommandResult train(int steps) {
    test::write_text(dir.path() / "job.toml", job_text(steps));
    return test::run_command("cd " + dir.path().string() + " && " + ravnest + " train " +
                                 (dir.path() / "job.toml").string() + " --elastic --tracker " +
                                 tracker_address + connection,
                             420);
  }
  // `ravnest fuse` of clusters 0 .. count - 1: alike to 1e-6, trained. Cluster 0's.
  std::map<std::string, at::Tensor> fused_alike(int count) {
    std::vector<std::map<std::string, at::Tensor>> trained;
    for (int c = 0; c < count; ++c) {
      const auto out = dir.path() / ("trained_" + std::to_string(c));
      auto fuse = test::run_command(ravnest + " fuse --cluster " + std::to_string(c) +
                                        " --out " + out.string() + connection,
                                    300);
      INFO(fuse.out << fuse.err);
      REQUIRE(fuse.exit_code == 0);
      trained.push_back(test::load_state_dict(out / "trained_state_dict.pt"));
    }
    std::string where;
    for (int c = 1; c < count; ++c) {
      const double apart = test::largest_difference(trained[0], trained[c], &where);
      INFO("clusters 0 and " << c << " differ by " << apart << " in " << where);
      CHECK(apart <= 1e-6);
    }
    CHECK(test::largest_difference(training::state_of(torch::jit::load(test::digits_model())),
                                   trained[0], &where) > 1e-3);
    return trained[0];
  }
  // The reference of what `said` tells (drops, rejoins) and of `newcomer`'s join, the rounds
  // from the logs of `survivors`; checked against `trained`.
  void check_reference(const std::string& said, int clusters, int steps,
                       const std::vector<int>& survivors, const training::ReferenceJoin& newcomer,
                       const std::map<std::string, at::Tensor>& trained) {
    std::vector<std::string> logs;
    for (int node : survivors) logs.push_back(log(node));
    std::string why;
    const auto reference =
        test::drop_reference(said, test::digits_model(), plan_dir.string(),
                             (dir.path() / "job.toml").string(), clusters, steps, logs,
                             {newcomer}, &why);
    test::check_against_reference(reference, why, trained);
  }

  local::NamespaceHosts hosts;
  test::TempDir dir;
  std::string secret_file, secret;
  std::string ravnest, tracker_address, relay_address;
  fs::path tracker_log, plan_dir;
  std::string connection;
  std::unique_ptr<test::ChildProcess> tracker;
  std::vector<std::unique_ptr<test::ChildProcess>> daemons;
};

// "cluster C joined after update J: ... cluster C from cluster S's checkpoint": J and S.
training::ReferenceJoin join_said(const std::string& said, int cluster) {
  std::smatch match;
  const std::string c = std::to_string(cluster);
  REQUIRE(std::regex_search(said, match,
                            std::regex("cluster " + c + " joined after update ([0-9]+): .*cluster " +
                                       c + " from cluster ([0-9]+)'s checkpoint")));
  training::ReferenceJoin join;
  join.after_update = std::stoll(match[1].str());
  join.source = std::stoi(match[2].str());
  return join;
}

// Six hosts: node_2 .. node_5 register, `clusterize --tracker` plans four one-node clusters from
// the live pool, node_0 registers as an idle spare, and `train --elastic --tracker` runs: the
// tracker is killed (-9) and restarted on its state mid-job (the job goes on, every daemon
// registers again), node_4 (behind NAT) is killed with -9 (node_0 takes its place without a
// command), and node_1 registers mid-job (it joins as one more cluster). Every cluster ends with
// the same weights, trained, the reference of those events.
TEST_CASE("elastic in namespaces: hosts behind NAT and on a slow link register and train through a "
          "relay; the tracker restarted, a node killed with -9 replaced, a newcomer joined",
          "[elastic][.hosts]") {
  NatHosts setting(6);
  setting.start_with_relay({3, 4, 5});
  setting.check_reach({3});
  setting.plan(4, 1);
  setting.start_daemon(0);
  setting.wait_pool(5);

  const int steps = 600;
  const std::string plan_dir = setting.plan_dir.string();
  double back_after = -1;
  bool registered_again = false, joined = false;
  auto events = std::thread([&] {
    if (!wait_for_batches(plan_dir, setting.secret, 3, 4, 120)) return;
    registered_again = setting.restart_tracker({0, 2, 3, 4, 5});
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    // node_4 (behind NAT) killed: node_0 takes its place without a command.
    setting.daemons[4]->kill(SIGKILL);
    const auto killed = std::chrono::steady_clock::now();
    back_after = seconds_until_training(
        plan_dir, 0, [&] { return wait_for_batches(plan_dir, setting.secret, 0, 1, 120); },
        killed);
    // node_1 registers mid-job: one more cluster.
    setting.start_daemon(1);
    joined = seconds_until_training(
                 plan_dir, 1,
                 [&] { return wait_for_batches(plan_dir, setting.secret, 1, 1, 120); },
                 std::chrono::steady_clock::now()) >= 0;
  });
  auto train = setting.train(steps);
  events.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said) << "in namespaces: the replacement's first batch " << back_after
                          << " s after the kill");
  CHECK(registered_again);
  CHECK(count_of(said, "elastic: tracker " + setting.tracker_address + " answers again") == 1);
  CHECK(back_after > 0);
  CHECK(said.find("elastic: node_4 lost (no heartbeat for 3 s); node_0 takes its place") !=
        std::string::npos);
  CHECK(std::regex_search(said, std::regex("rejoined after update [0-9]+")));
  CHECK(joined);

  // Every cluster, the rejoined and the joined one too, ends with the same weights, trained:
  // exactly the reference of those events: node_4's cluster in the rounds before its drop, back
  // from a survivor's checkpoint after update U, and cluster 4 joining after update J (the data
  // dealt five ways from there, the dropped cluster counted when it joins before the rejoin).
  const auto newcomer = join_said(said, 4);
  const auto trained = setting.fused_alike(5);
  setting.check_reference(said, 4, steps, {2, 3, 5}, newcomer, trained);
  // The relay held the NAT'd nodes' ports.
  CHECK(setting.log(2).find("relay: holds port 18505") != std::string::npos);
}

// The issue's check as it is written: three reachable hosts (node_2, which relays, node_3 on the
// slow link, node_4), two behind NAT (node_5, node_6) register; `clusterize --tracker` plans two
// clusters of two stages over four of them, the fifth an idle spare; `train --elastic` runs: the
// tracker restarted mid-job, a node of the plan (one behind NAT when the plan has one) killed with
// -9 and replaced by the spare without a command, then node_0 and node_1 register mid-job and
// join as one more cluster of two stages. All three clusters end alike, exactly the reference of
// those events (each stage's ring dropping the cluster at its own round).
TEST_CASE("elastic in namespaces: two clusters of two stages over reachable, NAT'd and slow hosts; "
          "the tracker restarted, a node killed with -9 replaced, two providers joined as one more "
          "cluster", "[elastic][.hosts]") {
  NatHosts setting(7);
  setting.start_with_relay({3, 4, 5, 6});
  setting.check_reach({3, 4});
  setting.plan(2, 2);
  const auto plan = requester::load_plan(setting.plan_dir.string());
  REQUIRE(plan.nodes.size() == 4u);
  std::map<int, int> cluster_of;  // node id -> cluster
  std::map<int, std::set<std::string>> stage_at;  // position -> the stages there
  for (const auto& meta : plan.nodes) {
    cluster_of[meta.node_id] = meta.cluster;
    stage_at[meta.position].insert(meta.stage_sha256);
  }
  // The hosts measure differently, so the clusters may be cut apart: the lost cluster then
  // rejoins from the other's checkpoint re-cut (docs/faults.md#a-dropped-cluster-rejoins).
  const bool cut_apart = stage_at[0].size() > 1;
  WARN("the two clusters are cut " << (cut_apart ? "at different points" : "alike"));
  int spare = -1;
  for (int i = 2; i <= 6; ++i) {
    if (!cluster_of.count(i)) spare = i;
  }
  REQUIRE(spare >= 0);
  // The node killed: one behind NAT when the plan has one, never the relay's host.
  int victim = -1;
  for (int i : {6, 5, 4, 3}) {
    if (victim < 0 && cluster_of.count(i)) victim = i;
  }
  REQUIRE(victim >= 0);
  const int lost_cluster = cluster_of[victim];
  std::vector<int> survivors;
  for (const auto& [node, c] : cluster_of) {
    if (c != lost_cluster) survivors.push_back(node);
  }
  REQUIRE(survivors.size() == 2u);
  INFO("node_" << victim << " of cluster " << lost_cluster << " killed; node_" << spare
               << " the spare");

  const int steps = 1500;
  const std::string plan_dir = setting.plan_dir.string();
  double back_after = -1;
  bool registered_again = false, joined = false;
  auto events = std::thread([&] {
    if (!wait_for_batches(plan_dir, setting.secret, survivors[0], 4, 120)) return;
    registered_again = setting.restart_tracker({2, 3, 4, 5, 6});
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    setting.daemons[static_cast<size_t>(victim)]->kill(SIGKILL);
    const auto killed = std::chrono::steady_clock::now();
    back_after = seconds_until_training(
        plan_dir, spare,
        [&] { return wait_for_batches(plan_dir, setting.secret, spare, 1, 120); }, killed);
    // Two providers register mid-job: one more cluster of two stages.
    setting.start_daemon(0);
    setting.start_daemon(1);
    const auto started = std::chrono::steady_clock::now();
    joined = seconds_until_training(
                 plan_dir, 1,
                 [&] { return wait_for_batches(plan_dir, setting.secret, 1, 1, 120); },
                 started) >= 0 &&
             plan_names(plan_dir, 0);
  });
  auto train = setting.train(steps);
  events.join();
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const std::string said = train.out + train.err;
  WARN(change_lines(said, lost_cluster) << "in namespaces: the replacement's first batch "
                                        << back_after << " s after the kill");
  CHECK(registered_again);
  CHECK(count_of(said, "elastic: tracker " + setting.tracker_address + " answers again") == 1);
  CHECK(back_after > 0);
  CHECK(said.find("elastic: node_" + std::to_string(victim) + " lost (no heartbeat for 3 s); node_" +
                  std::to_string(spare) + " takes its place") != std::string::npos);
  CHECK(std::regex_search(said, std::regex("cluster " + std::to_string(lost_cluster) +
                                           " rejoined after update [0-9]+")));
  CHECK((said.find("cluster " + std::to_string(lost_cluster) + " from cluster " +
                   std::to_string(1 - lost_cluster) + "'s checkpoint, re-cut to its stages") !=
         std::string::npos) == cut_apart);
  CHECK(joined);
  // Cluster 2 is node_0 -> node_1 or node_1 -> node_0 (choose_join: by measured memory), and
  // the line names them in that order.
  CHECK(std::regex_search(said, std::regex("elastic: node_(0 and node_1|1 and node_0) registered; "
                                           "they join as cluster 2 at the next update boundary")));
  std::set<int> newcomers;
  for (const auto& meta : requester::load_plan(plan_dir).nodes) {
    if (meta.cluster == 2) newcomers.insert(meta.node_id);
  }
  CHECK(newcomers == std::set<int>{0, 1});

  const auto newcomer = join_said(said, 2);
  const auto trained = setting.fused_alike(3);
  setting.check_reference(said, 2, steps, survivors, newcomer, trained);
}
