// `ravnest losses`: each cluster's training losses (the leaf's losses.txt, one per batch) and
// validation rounds (its validation.txt), as a table or as an SVG plot written directly (no
// library: a few hundred bytes of markup per curve). Pure: texts in, texts out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ravnest::cli {

struct LossHistory {
  int cluster = 0;
  std::string name;  // how the table and the plot call it; empty: "cluster <cluster>"
  std::string label() const { return name.empty() ? "cluster " + std::to_string(cluster) : name; }
  std::vector<double> losses;  // per batch, in order
  struct Round {
    uint64_t updates = 0;
    uint32_t epoch = 0;
    double loss = 0;
    double accuracy = 0;  // NaN: the task has no classes
  };
  std::vector<Round> validation;
};

// Parses losses.txt and validation.txt as the leaf writes them (leaf_metrics.h); throws
// std::runtime_error naming `what` and the line when one is malformed.
LossHistory parse_loss_history(int cluster, const std::string& losses,
                               const std::string& validation, const std::string& what);

// Per cluster: batches, first, last, lowest loss and the mean of the last 10 (no row for a
// history of validation rounds only: a parameter server's evaluator); then every validation
// round.
std::string loss_table(const std::vector<LossHistory>& clusters);

// An SVG document: training loss per batch for each cluster, validation losses as dots on the
// same axes (at the batch where the round ran, from its number of updates), a legend.
std::string loss_svg(const std::vector<LossHistory>& clusters, const std::string& title);

}  // namespace ravnest::cli
