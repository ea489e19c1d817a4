// clusterize for daemons that train on a GPU (--device cuda): the probes are asked to run there,
// every node declares its GPU memory, a node offers the smaller of its RAM and its GPU memory,
// and the node files carry the card's peak beside the host's. The probe here is a stand-in with
// fixed figures (this machine has no GPU): what is tested is the planning around it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>

#include "libs/base/config_error.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/graph/clusterize.h"
#include "libs/planner/cluster_plan.h"
#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMB = 1000 * 1000;

std::string pool_json(const std::string& gpu_memory) {
  std::string text = "{";
  for (int i = 0; i < 3; ++i) {
    text += std::string(i ? "," : "") + "\"" + std::to_string(i) + "\": {\"IP\": \"127.0.0.1:" +
            std::to_string(9100 + i) + "\", \"benchmarks\": {\"ram\": 8, \"bandwidth\": 1000" +
            (gpu_memory.empty() ? "" : ", \"gpu_memory\": " + gpu_memory) + "}}";
  }
  return text + "}";
}

graph::ClusterizeOptions options_for(const test::TempDir& dir, const std::string& gpu_memory,
                                     std::set<std::string>* devices) {
  test::write_text(dir / "pool.json", pool_json(gpu_memory));
  graph::ClusterizeOptions options;
  options.model_path = test::models_dir() + "/small_cnn.pt";
  options.nodes_path = (dir / "pool.json").string();
  options.example_inputs = {"4x1x8x8:float32"};
  options.out_dir = (dir / "plan").string();
  options.device = "cuda";
  // On the card: a context of 500 MB and 700 MB more at the peak; on the host 300 MB.
  options.memory_probe = [devices](const graph::StageProbe& probe) {
    devices->insert(probe.device);
    graph::StageMemory m;
    m.baseline_bytes = 150 * kMB;
    m.peak_bytes = 300 * kMB;
    m.peak_phase = "train";
    m.phases = {{"load", 200 * kMB}, {"train", 300 * kMB}};
    m.device_baseline_bytes = 500 * kMB;
    m.device_peak_bytes = 1200 * kMB;
    m.device_phases = {{"load", 600 * kMB}, {"train", 1200 * kMB}};
    return m;
  };
  return options;
}

}  // namespace

TEST_CASE("clusterize --device cuda plans each node's smaller memory, host or card",
          "[graph][memory][gpu]") {
  test::TempDir dir;
  std::set<std::string> devices;
  auto quiet = [](const std::string&) {};

  SECTION("every stage fits its card: the node files carry both peaks") {
    const auto options = options_for(dir, "2", &devices);
    const auto result = graph::clusterize(options, quiet);
    CHECK(devices == std::set<std::string>{"cuda"});
    REQUIRE(!result.nodes.empty());
    for (const auto& node : result.nodes) {
      const auto written = config::load_node_metadata(
          (dir / "plan" / "nodes" / (node.name + ".json")).string());
      INFO(node.name);
      CHECK(written.estimates.peak_memory_bytes == 300 * kMB);  // the host's, for its budget
      CHECK(written.estimates.daemon_baseline_bytes == 150 * kMB);
      CHECK(written.estimates.device_peak_memory_bytes == 1200 * kMB);
      CHECK(written.estimates.node_gpu_memory_bytes == 2000 * kMB);
      CHECK(written.estimates.node_ram_bytes == 8000 * kMB);
    }
  }
  SECTION("a card smaller than the measured peak x the margin: refused, saying why") {
    const auto options = options_for(dir, "1.2", &devices);
    try {
      graph::clusterize(options, quiet);
      FAIL("a plan was made");
    } catch (const planner::PoolTooSmall& e) {
      CHECK_THAT(e.what(), Catch::Contains("the smaller of its ram and its gpu_memory"));
    }
    CHECK_FALSE(fs::exists(dir / "plan" / "nodes"));
  }
  SECTION("a node without gpu_memory: one line naming the file, the node and the field") {
    const auto options = options_for(dir, "", &devices);
    try {
      graph::clusterize(options, quiet);
      FAIL("a plan was made");
    } catch (const base::ConfigError& e) {
      CHECK(std::string(e.what()) == (dir / "pool.json").string() +
                                         ": node \"0\": benchmarks.gpu_memory (GB) is needed to "
                                         "plan for --device cuda");
    }
    CHECK(devices.empty());
  }
  SECTION("a device that is none: refused before anything") {
    auto options = options_for(dir, "2", &devices);
    options.device = "tpu";
    CHECK_THROWS_WITH(graph::clusterize(options, quiet),
                      "--device: \"tpu\" is not cpu, cuda or cuda:N");
    CHECK(devices.empty());
  }
}
