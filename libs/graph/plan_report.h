// The plan's report: what `ravnest clusterize` prints once a plan is written, from the nodes'
// metadata alone (pure: no files, no torch). Its first line says what the nodes became and why;
// then Ravnest's Node(...) lines per node and a table of each node's stage, memory and step.
#pragma once

#include <string>
#include <vector>

#include "libs/config/plan/node_metadata.h"

namespace ravnest::graph {

// The per-node report Ravnest prints, then the table (also used by `ravnest plan`-like views),
// after plan_layout_line.
std::vector<std::string> describe_plan(const std::vector<config::NodeMetadata>& nodes);

// The plan's first line: what the nodes became and why. Copies of the whole model, one node a
// cluster, are said to be data-parallel copies rather than a pipeline, the model's peak beside a
// node's RAM, and how to ask for stages; otherwise the clusters' pipelines and their stages.
std::string plan_layout_line(const std::vector<config::NodeMetadata>& nodes);

// A byte count in decimal units, as the report writes it: "512 B", "1.5 MB".
std::string human_bytes(double bytes);

}  // namespace ravnest::graph
