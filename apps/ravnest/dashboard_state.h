// `ravnest dashboard`'s data: what the page shows, as one JSON document built from plain data
// (the plan, each node's status report, each cluster's loss history, the job's text). Pure: the
// server (dashboard_server.h) gathers the inputs, the page (dashboard_page.h) draws the output.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/ravnest/loss_report.h"
#include "libs/requester/requester.h"

namespace ravnest::cli {

// {"plan": {"dir", "clusters": [{"id", "nodes": [...]}], "rings": [{"id", "nodes"}]},
//  "nodes": [{"name", "id", "cluster", "position", "role", "address", "state", "error", "job_id",
//             "epoch", "batches", "total_batches", "loss", "samples_per_second", "busy",
//             "resident_bytes", "bytes_sent", "bytes_received", "traffic": {kind: [sent, received]}}],
//  "clusters": [{"id", "batches", "last_loss", "losses": [[batch, loss]...], "validation": [...]}],
//  "job": "<the job file's text>", "job_path": "..."}
// Losses beyond `max_points` per cluster are thinned evenly; the first and last stay.
nlohmann::json dashboard_state(const requester::Plan& plan, const std::vector<requester::NodeReport>& reports,
                               const std::vector<LossHistory>& histories,
                               const std::string& job_path, const std::string& job_text,
                               size_t max_points = 2000);

}  // namespace ravnest::cli
