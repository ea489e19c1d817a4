// Liveness without anybody attached: the daemons of a running job watch each other (PeerWatch),
// so a frozen or dead peer is named by its neighbours within seconds, a frozen node that
// continues learns that its job is over, and nobody keeps "training" forever. A requester that
// dies leaves its job running; `ravnest train --attach` follows it again.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <regex>
#include <thread>

#include "libs/base/secret.h"
#include "libs/requester/requester.h"
#include "tests/support/local_cluster.h"

using namespace ravnest;

namespace {

std::string long_job() {
  return "[train]\nepochs = 500\nbatch_size = 32\nseed = 3\n\n[data]\nformat = \"csv\"\ntrain = \"" +
         (test::digits_dir() / "digits_train.csv").string() +
         "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\n"
         "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\nname = \"sgd\"\n"
         "lr = 0.01\n";
}

// Polls every node's status until `done` says so; returns the seconds it took, or -1 after
// `limit` seconds.
double wait_until(const test::LocalCluster& cluster, double limit,
                  const std::function<bool(const std::vector<requester::NodeReport>&)>& done) {
  requester::Requester requester(requester::load_plan(cluster.plan_dir()),
                               base::read_secret(cluster.secret_file()));
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done(requester.status())) return seconds;
    if (seconds > limit) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

const requester::NodeReport& report_of(const std::vector<requester::NodeReport>& reports, int node) {
  for (const auto& r : reports) {
    if (r.node.node_id == node) return r;
  }
  throw std::runtime_error("no node " + std::to_string(node));
}

}  // namespace

TEST_CASE("a frozen peer is named by its neighbours with nobody attached", "[daemon][faults]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 3)}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  test::write_text(cluster.dir() / "job.toml", long_job());
  auto train = cluster.ravnest("train", (cluster.dir() / "job.toml").string() + " --detach");
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  REQUIRE(wait_until(cluster, 30, [](const auto& reports) {
            return report_of(reports, 0).status.batches >= 3;
          }) >= 0);

  cluster.kill(2, SIGSTOP);
  std::string said;
  const double named = wait_until(cluster, 20, [&](const auto& reports) {
    const auto& r = report_of(reports, 1);
    said = r.state + ": " + r.error;
    return r.state == "failed";
  });
  INFO("node_1 says " << said);
  CHECK(named >= 0);
  CHECK(named < 10);
  CHECK(said.find("node_2") != std::string::npos);

  // Continued, the frozen node learns from its peers that the job is over.
  cluster.kill(2, SIGCONT);
  const double learned = wait_until(cluster, 20, [&](const auto& reports) {
    const auto& r = report_of(reports, 2);
    said = r.state + ": " + r.error;
    return r.reachable && r.state != "training";
  });
  INFO("node_2 says " << said);
  CHECK(learned >= 0);
  CHECK(learned < 10);
}

TEST_CASE("a dead peer is named by every node with nobody attached", "[daemon][faults]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 3)}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  test::write_text(cluster.dir() / "job.toml", long_job());
  REQUIRE(cluster.ravnest("train", (cluster.dir() / "job.toml").string() + " --detach").exit_code ==
          0);
  REQUIRE(wait_until(cluster, 30, [](const auto& reports) {
            return report_of(reports, 0).status.batches >= 3;
          }) >= 0);
  cluster.kill(0, SIGKILL);
  std::string said;
  const double named = wait_until(cluster, 20, [&](const auto& reports) {
    said.clear();
    bool all = true;
    for (int n : {1, 2}) {
      const auto& r = report_of(reports, n);
      said += r.node.name + " " + r.state + ": " + r.error + "; ";
      all = all && r.state == "failed" && r.error.find("node_0") != std::string::npos;
    }
    return all;
  });
  INFO(said);
  CHECK(named >= 0);
  CHECK(named < 10);
}

TEST_CASE("a requester killed mid-job leaves it running, and train --attach finds it",
          "[requester][faults]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);

  // Nothing runs: attach says so, in one line.
  auto none = cluster.ravnest("train", "--attach");
  CHECK(none.exit_code != 0);
  CHECK(none.err == "ravnest: error: no job runs on the plan's nodes; `ravnest status` shows them\n");

  // A short job (about ten seconds here), its requester killed once the job trains.
  std::string job = long_job();
  job.replace(job.find("epochs = 500"), 12, "epochs = 40");
  test::write_text(cluster.dir() / "job.toml", job);
  const std::string ravnest = test::binary_dir() + "/apps/ravnest/ravnest";
  const std::string flags =
      " --plan " + cluster.plan_dir() + " --secret-file " + cluster.secret_file();
  auto killed = test::run_command(
      ravnest + " train " + (cluster.dir() / "job.toml").string() + flags +
          " >/dev/null 2>&1 & p=$!; for i in $(seq 300); do " + ravnest + " status" + flags +
          " | grep -q 'node_1 .* training' && break; sleep 0.1; done; kill -9 $p; wait $p; "
          "echo rc=$?",
      120);
  INFO(killed.out << killed.err);
  REQUIRE(killed.out.find("rc=137") != std::string::npos);

  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto status = cluster.ravnest("status");
  INFO(status.out);
  CHECK(status.out.find("node_0") != std::string::npos);
  const bool still_running = status.out.find("training") != std::string::npos;
  CHECK(still_running);

  auto attached = cluster.ravnest("train", "--attach");
  INFO(attached.out << attached.err);
  CHECK(attached.exit_code == 0);
  CHECK(attached.out.find("attached to job ") != std::string::npos);
  CHECK(attached.out.find("training finished in") != std::string::npos);
  // The job ran to its end on every node: fuse takes it.
  auto fused = cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string());
  INFO(fused.out << fused.err);
  CHECK(fused.exit_code == 0);
}

TEST_CASE("train --attach: Ctrl-C detaches and the job goes on; piped, progress records",
          "[requester][cli]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  // About ten seconds here, validated every epoch.
  std::string job = long_job();
  job.replace(job.find("epochs = 500"), 12, "epochs = 30");
  job.replace(job.find("\nlabel_column"), 0,
              "\nvalidation = \"" + (test::digits_dir() / "digits_val.csv").string() + "\"");
  test::write_text(cluster.dir() / "job.toml", job);
  auto started = cluster.ravnest("train", (cluster.dir() / "job.toml").string() + " --detach");
  INFO(started.out << started.err);
  REQUIRE(started.exit_code == 0);

  // Attached with stdout in a file: a record per cluster every second; SIGINT once one came.
  const std::string ravnest = test::binary_dir() + "/apps/ravnest/ravnest";
  const std::string flags =
      " --plan " + cluster.plan_dir() + " --secret-file " + cluster.secret_file();
  const auto out = (cluster.dir() / "attach.out").string();
  auto attached = test::run_command(
      ravnest + " train --attach --progress-every 1" + flags + " >" + out + " 2>&1 & p=$!; " +
          "for i in $(seq 300); do grep -q 'batch [0-9]*/' " + out +
          " && break; sleep 0.1; done; kill -INT $p; wait $p; echo rc=$?; cat " + out,
      120);
  INFO(attached.out << attached.err);
  CHECK(attached.out.find("rc=0") != std::string::npos);
  CHECK(std::regex_search(attached.out,
                          std::regex("cluster 0 epoch [0-9]+ batch [0-9]+/[0-9]+ loss [0-9.]+ "
                                     "(val_loss [0-9.]+ val_acc [0-9.]+ )?[0-9]+ samples/s "
                                     "elapsed [0-9:]+\n")));
  CHECK(std::regex_search(attached.out,
                          std::regex("ravnest: detached from job [0-9]+; it goes on: `ravnest "
                                     "stop` stops it, `ravnest train --attach` follows it again")));
  CHECK(attached.out.find("stopped") == std::string::npos);

  // Not stopped: it trains on, and attached again it runs to its end.
  auto status = cluster.ravnest("status");
  INFO(status.out);
  CHECK(std::regex_search(status.out, std::regex("node_1 .* training")));
  auto again = cluster.ravnest("train", "--attach");
  INFO(again.out << again.err);
  CHECK(again.exit_code == 0);
  CHECK(again.out.find("training finished in") != std::string::npos);
  // Every validation line says its epoch.
  CHECK(std::regex_search(again.out, std::regex("cluster 0 validation: loss [0-9.]+, accuracy "
                                                "[0-9.]+ \\(epoch [0-9]+\\)\n")));
}
