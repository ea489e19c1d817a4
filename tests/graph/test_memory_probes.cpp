// What clusterize's measured plan costs besides the probes themselves (libs/graph/
// memory_planning.h): each distinct stage is probed once however many clusters hold it, and a
// round cuts and writes only the clusters it probes, not the whole pool's plan (1,000 one-stage
// clusters wrote 1,000 node files of every ring member to probe one stage). The probe is a
// stand-in with fixed figures: what is counted is the work around it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "libs/graph/clusterize.h"
#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMB = 1000 * 1000;

size_t files_in(const fs::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

}  // namespace

TEST_CASE("clusterize probes each distinct stage once and writes only the clusters it probes",
          "[graph][memory]") {
  test::TempDir dir;
  constexpr int kNodes = 40;
  std::string pool = "{";
  for (int i = 0; i < kNodes; ++i) {
    pool += std::string(i ? "," : "") + "\"" + std::to_string(i) + "\": {\"IP\": \"127.0.0.1:" +
            std::to_string(9100 + i) + "\", \"benchmarks\": {\"ram\": 8, \"bandwidth\": 1000}}";
  }
  test::write_text(dir / "pool.json", pool + "}");
  graph::ClusterizeOptions options;
  options.model_path = test::models_dir() + "/small_cnn.pt";
  options.nodes_path = (dir / "pool.json").string();
  options.example_inputs = {"4x1x8x8:float32"};
  options.out_dir = (dir / "plan").string();
  std::vector<size_t> node_files;  // per probe: the node files its round wrote
  options.memory_probe = [&](const graph::StageProbe& probe) {
    // stage_path is ROUND/stages/node_N.pt; the round's node files are ROUND/nodes/.
    node_files.push_back(files_in(fs::path(probe.stage_path).parent_path().parent_path() / "nodes"));
    graph::StageMemory m;
    m.baseline_bytes = 150 * kMB;
    m.peak_bytes = 300 * kMB;
    m.peak_phase = "train";
    m.phases = {{"load", 200 * kMB}, {"train", 300 * kMB}};
    return m;
  };
  const auto result = graph::clusterize(options, [](const std::string&) {});
  // Every node alike, the model small: clusters of one shape over the whole pool.
  REQUIRE(result.plan.clusters.size() > 1);
  size_t planned_stages = 0;
  for (const auto& cluster : result.plan.clusters) planned_stages += cluster.stages.size();
  CHECK(planned_stages == kNodes);
  const size_t shape = result.plan.clusters.front().stages.size();
  INFO(result.plan.clusters.size() << " clusters of " << shape << " stage(s)");
  // One probe for each stage of the one shape (not one for each cluster)...
  CHECK(node_files.size() == shape);
  // ... and its round wrote the node files of the cluster it probed, not the pool's.
  for (size_t written : node_files) CHECK(written == shape);
}
