// A daemon's memory budget on real daemons (docs/daemon.md#memory): a pushed stage whose
// measured peak (written into the plan's node file, as clusterize writes it) does not fit is
// refused in one line and nothing is stored, the daemon goes on serving; a stage without a
// measured peak is accepted as before; `ravnest status` shows the budget; a job above 90 % of it
// warns once and still finishes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

// Sets (or, with peak 0, removes) a node file's measured peak, as clusterize would write it.
void set_measured_peak(const test::LocalCluster& cluster, int node, int64_t peak,
                       int64_t baseline) {
  const fs::path file = fs::path(cluster.plan_dir()) / "nodes" / ("node_" + std::to_string(node) + ".json");
  auto json = nlohmann::json::parse(test::read_text(file));
  auto& estimates = json["estimates"];
  if (peak > 0) {
    estimates["peak_memory_bytes"] = peak;
    estimates["daemon_baseline_bytes"] = baseline;
  } else {
    estimates.erase("peak_memory_bytes");
    estimates.erase("daemon_baseline_bytes");
  }
  test::write_text(file, json.dump(2) + "\n");
}

std::string digits_job(int epochs) {
  return "[train]\nepochs = " + std::to_string(epochs) +
         "\nbatch_size = 32\nmicro_batches = 4\nseed = 3\n\n[data]\nformat = \"csv\"\ntrain = \"" +
         (test::digits_dir() / "digits_train.csv").string() +
         "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\n"
         "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\nname = \"sgd\"\n"
         "lr = 0.05\n";
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("memory: a stage that does not fit the budget is refused at push", "[daemon][memory]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  // 600 MiB for node_1; node_0's budget is its cgroup's or the machine's.
  cluster.set_daemon_flags(1, {"--memory-limit", "600MiB"});
  cluster.start_all();
  // node_1's stage measured at 2 GB, 100 MB of it clusterize's idle daemon; node_0's not measured.
  set_measured_peak(cluster, 1, 2000000000, 100000000);

  auto push = cluster.ravnest("push");
  INFO(push.out << push.err);
  CHECK(push.exit_code != 0);
  // One line: the node, then the need, its parts and the budget with its source.
  const std::regex refusal(
      "ravnest: error: node_1 \\(127\\.0\\.0\\.1:" + std::to_string(cluster.port(1)) +
      "\\): push stage: the stage needs [0-9.]+ GB at its peak \\(1\\.90 GB measured for the "
      "stage by clusterize, [0-9.]+ MB this daemon's own\\), more than this daemon's memory "
      "budget of 629 MB \\(memory_limit\\); not stored\n");
  CHECK(std::regex_search(push.err, refusal));
  CHECK(std::count(push.err.begin(), push.err.end(), '\n') == 1);
  // Nothing stored on node_1; node_0's stage, without a measured peak, was accepted as before.
  CHECK_FALSE(fs::exists(cluster.data_dir(1) / "stage.pt"));
  CHECK_FALSE(fs::exists(cluster.data_dir(1) / "metadata.json"));
  CHECK(fs::exists(cluster.data_dir(0) / "stage.pt"));
  CHECK(cluster.log(1).find(": pushStage: the stage needs") != std::string::npos);

  // node_1 goes on serving, and says its budget.
  REQUIRE(cluster.running(1));
  auto status = cluster.ravnest("status");
  INFO(status.out << status.err);
  CHECK(status.exit_code == 0);
  CHECK(std::regex_search(
      status.out, std::regex("\n +memory [0-9.]+ [kMG]B of 629 MB \\(memory_limit\\), peak "
                             "[0-9.]+ [kMG]B, idle [0-9.]+ [kMG]B\n")));
  CHECK(std::regex_search(
      status.out, std::regex("\n +memory [0-9.]+ [kMG]B of [0-9.]+ [kMGT]B \\((cgroup "
                             "memory.limit_in_bytes|cgroup memory.max|MemTotal)\\), peak")));

  // Without a measured peak, or with one that fits, node_1 takes the stage.
  SECTION("not measured") { set_measured_peak(cluster, 1, 0, 0); }
  SECTION("measured, and fits") { set_measured_peak(cluster, 1, 300000000, 150000000); }
  push = cluster.ravnest("push");
  INFO(push.out << push.err);
  CHECK(push.exit_code == 0);
  CHECK(fs::exists(cluster.data_dir(1) / "stage.pt"));
}

TEST_CASE("memory: a job above 90 % of the budget warns once and goes on", "[daemon][memory]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  // Below what an idle daemon holds with LibTorch loaded: the job is above 90 % from its start.
  cluster.set_daemon_flags(1, {"--memory-limit", "40MiB"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  test::write_text(cluster.dir() / "job.toml", digits_job(2));
  auto train = cluster.ravnest("train", (cluster.dir() / "job.toml").string());
  INFO(train.out << train.err);
  CHECK(train.exit_code == 0);
  CHECK(train.out.find("training finished") != std::string::npos);
  CHECK(std::regex_search(
      train.out, std::regex("warning: node_1: memory at [0-9]+ % of its budget \\([0-9.]+ [kMG]B "
                            "of 41.9 MB, memory_limit\\)\n")));
  CHECK(count(train.out, "warning: node_1: memory at") == 1);
  CHECK(count(train.out, "warning: node_0") == 0);
  const std::string log = cluster.log(1);
  INFO(log);
  CHECK(count(log, "node_1: memory at") == 1);
}
