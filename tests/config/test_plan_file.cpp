// PlanFile (libs/config/plan/plan_file.h): plan.json's one reader and writer. The bytes a plan
// was written with read back to the same bytes; a hand-written plan loads; errors name the field.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "libs/base/config_error.h"
#include "libs/config/plan/plan_file.h"

using namespace ravnest::config;

namespace {

// As the writers before PlanFile dumped it: nlohmann's sorted keys, two spaces, a final newline.
std::string as_written(const nlohmann::json& json) { return json.dump(2) + "\n"; }

std::string error_of(const std::string& text) {
  try {
    plan_file_from_json(text, "plan.json");
  } catch (const ravnest::base::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a pipeline plan reads and writes back to its bytes", "[plan_file]") {
  const std::string text = as_written(nlohmann::json::parse(R"({
    "format": "ravnest.plan/1", "model": "/m/model.pt", "model_sha256": "ab12", "seed": 7,
    "example_inputs": ["32x1x8x8"], "samples_per_second": 1234.5,
    "planning": {"schedule": "1f1b", "micro_batches": 4, "max_in_flight": 0,
                 "activations": "none", "gradients": "fp16"},
    "clusters": [{"id": 0, "samples_per_second": 617.25, "nodes": [0, 1, 2]},
                 {"id": 3, "samples_per_second": 617.25, "nodes": [3, 4, 5]}],
    "rings": [{"id": 0, "parameters": ["a.weight", "a.bias"], "nodes": [0, 3]},
              {"id": 1, "parameters": [], "nodes": [2, 5]}]})"));
  const PlanFile plan = plan_file_from_json(text, "plan.json");
  CHECK(plan.model == "/m/model.pt");
  CHECK(plan.seed == 7);
  REQUIRE(plan.planning.has_value());
  CHECK(plan.planning->gradients == "fp16");
  REQUIRE(plan.clusters.size() == 2);
  CHECK(plan.clusters[1].nodes == std::vector<int>{3, 4, 5});
  CHECK(plan.rings[0].parameters == std::vector<std::string>{"a.weight", "a.bias"});
  CHECK_FALSE(plan.parameter_server.has_value());
  CHECK(plan.node_ids() == std::vector<int>{0, 1, 2, 3, 4, 5});
  CHECK(to_json(plan) == text);
}

TEST_CASE("a parameter-server plan reads and writes back to its bytes", "[plan_file]") {
  const std::string text = as_written(nlohmann::json::parse(R"({
    "format": "ravnest.plan/1", "model": "/m/model.pt", "model_sha256": "ab12", "seed": 0,
    "example_inputs": [], "mode": "hybrid", "samples_per_second": 10.0, "step_seconds": 0.3049,
    "clusters": [{"id": 0, "samples_per_second": 5.0, "nodes": [2]},
                 {"id": 1, "samples_per_second": 5.0, "nodes": [3]}],
    "rings": [{"id": 0, "parameters": ["fc.weight"], "nodes": [2, 3]}],
    "parameter_server": {
      "servers": [{"node": 0, "tensors": 8, "bytes": 1724320, "exchange_seconds": 0.0828}],
      "evaluator": 1,
      "sparse_tables": [{"weight": "emb.weight", "server": 0, "index_input": 0,
                         "shape": [1000, 16]}]},
    "unplaced_nodes": [9]})"));
  const PlanFile plan = plan_file_from_json(text, "plan.json");
  CHECK(plan.mode == "hybrid");
  REQUIRE(plan.parameter_server.has_value());
  CHECK(plan.parameter_server->servers[0].bytes == 1724320);
  CHECK(plan.parameter_server->evaluator == 1);
  REQUIRE(plan.parameter_server->sparse_tables.has_value());
  CHECK(plan.parameter_server->sparse_tables->at(0).shape == std::vector<int64_t>{1000, 16});
  // The servers and the evaluator belong to no cluster, and come after the workers.
  CHECK(plan.node_ids() == std::vector<int>{2, 3, 0, 1});
  CHECK(to_json(plan) == text);
}

TEST_CASE("a hand-written plan needs only its format and clusters", "[plan_file]") {
  const auto plan = plan_file_from_json(
      R"({"format": "ravnest.plan/1", "clusters": [{"id": 0, "nodes": [0, 1]}]})", "plan.json");
  CHECK(plan.node_ids() == std::vector<int>{0, 1});
  CHECK(plan.rings.empty());
}

TEST_CASE("plan.json errors name the file and the field", "[plan_file][errors]") {
  CHECK(error_of(R"({"format": "ravnest.plan/2", "clusters": []})") ==
        "plan.json: format: expected \"ravnest.plan/1\", got \"ravnest.plan/2\"");
  CHECK(error_of(R"({"format": "ravnest.plan/1"})") == "plan.json: clusters: is missing");
  CHECK(error_of(R"({"format": "ravnest.plan/1", "clusters": [{"id": 0, "nodes": ["a"]}]})") ==
        "plan.json: clusters[0].nodes[0]: must be an integer, got a string");
  CHECK(error_of("{").find("plan.json: malformed JSON") == 0);
}
