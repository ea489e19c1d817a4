// graph::plan_layout_line: the plan's first line says what the nodes became and why, from node
// metadata alone.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "libs/graph/plan_report.h"

using ravnest::config::NodeMetadata;

namespace {

NodeMetadata node(int id, int cluster, int cluster_size) {
  NodeMetadata n;
  n.node_id = id;
  n.cluster = cluster;
  n.cluster_size = cluster_size;
  n.estimates.peak_memory_bytes = 210'000'000;
  n.estimates.node_ram_bytes = 8'000'000'000;
  return n;
}

}  // namespace

TEST_CASE("plan layout line: copies, one node, pipelines") {
  const std::string copies =
      ravnest::graph::plan_layout_line({node(0, 0, 1), node(1, 1, 1), node(2, 2, 1)});
  INFO(copies);
  CHECK(copies.rfind("3 data-parallel copies of the whole model, not a pipeline: ", 0) == 0);
  CHECK(copies.find("fits one node") != std::string::npos);
  CHECK(copies.find("stages=N") != std::string::npos);
  CHECK(ravnest::graph::plan_layout_line({node(0, 0, 1)}).rfind("one node, no pipeline", 0) == 0);
  CHECK(ravnest::graph::plan_layout_line({node(0, 0, 3), node(1, 0, 3), node(2, 0, 3)}) ==
        "1 pipeline of 3 stages (one cluster): the planner's fastest estimate for this pool and "
        "model");
  CHECK(ravnest::graph::plan_layout_line({node(0, 0, 2), node(1, 0, 2), node(2, 1, 1)})
            .rfind("2 pipelines of 2, 1 stages", 0) == 0);
}
