// What `ravnest train` and `ravnest losses` print, from plain data: the progress line per epoch,
// the loss table, the SVG and the errors of malformed loss files; the dashboard's JSON.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "apps/ravnest/clusterize_progress_view.h"
#include "apps/ravnest/dashboard_state.h"
#include "apps/ravnest/loss_report.h"
#include "apps/ravnest/memory_view.h"
#include "apps/ravnest/progress_view.h"

using namespace ravnest;
using namespace ravnest::cli;

TEST_CASE("progress line: the epoch's batches when epochs divide the run", "[cli][progress]") {
  requester::TrainProgress p;
  p.cluster = 3;
  p.epochs = 2;
  p.total_batches = 24;
  p.batches = 13;
  p.loss = 0.5;
  p.elapsed_seconds = 13;
  const auto line = cli::progress_line(p, 12);
  INFO(line);
  CHECK(line.rfind("cluster 3 epoch 2/2 [=>          ] 1/12 loss 0.5000", 0) == 0);
  CHECK(line.find("ETA 0:11") != std::string::npos);  // from the whole run: 11 batches left

  p.batches = 12;  // the first epoch's last batch
  CHECK(progress_line(p, 12).rfind("cluster 3 epoch 1/2 [============] 12/12", 0) == 0);
  p.batches = 24;  // done
  CHECK(progress_line(p, 12).rfind("cluster 3 epoch 2/2 [============] 12/12", 0) == 0);
  p.batches = 0;
  CHECK(progress_line(p, 12).rfind("cluster 3 epoch 1/2 [            ] 0/12", 0) == 0);

  // Unknown epochs (attach, max_steps) or a total they do not divide: the whole run.
  p.epochs = 0;
  p.epoch = 1;
  p.batches = 13;
  CHECK(progress_line(p, 12).rfind("cluster 3 epoch 2 [======>     ] 13/24", 0) == 0);
  p.epochs = 5;
  CHECK(progress_line(p, 12).rfind("cluster 3 epoch 2 [======>     ] 13/24", 0) == 0);

  // The root has not said how long the run is: no 0/0.
  p.total_batches = 0;
  p.batches = 0;
  const auto starting = progress_line(p, 12);
  CHECK(starting == "cluster 3 starting [            ]");
}

TEST_CASE("progress record: one line per cluster for a pipe or a file", "[cli][progress]") {
  requester::TrainProgress p;
  p.cluster = 1;
  p.epochs = 2;
  p.total_batches = 24;
  p.batches = 13;
  p.loss = 0.25;
  p.samples_per_second = 1520.4;
  p.elapsed_seconds = 62;
  CHECK(progress_record(p) ==
        "cluster 1 epoch 2/2 batch 1/12 loss 0.2500 1520 samples/s elapsed 1:02");
  p.has_validation = true;
  p.validation_loss = 0.5;
  p.validation_accuracy = 0.875;
  p.epochs = 0;  // unknown (attach): the run's batches
  p.epoch = 1;
  CHECK(progress_record(p) == "cluster 1 epoch 2 batch 13/24 loss 0.2500 val_loss 0.5000 "
                              "val_acc 0.8750 1520 samples/s elapsed 1:02");
  p.total_batches = 0;
  CHECK(progress_record(p) == "cluster 1 starting");
}

TEST_CASE("clusterize progress: a live line and records per phase", "[cli][progress]") {
  graph::ClusterizeProgress p{"verify", 0, 6, false};
  CHECK(clusterize_live_line(p, 3, 10) == "clusterize: verify [          ] 0/6 0:03 elapsed");
  CHECK(clusterize_record(p, 0) == "clusterize: verify started");
  p.done = 2;
  // Two of six in 12 s: four more at the same rate.
  CHECK(clusterize_live_line(p, 12, 10) ==
        "clusterize: verify [===>      ] 2/6 0:12 elapsed, about 0:24 left");
  CHECK(clusterize_record(p, 12) == "clusterize: verify 2/6, 0:12 elapsed, about 0:24 left");
  p.done = 6;
  p.finished = true;
  CHECK(clusterize_record(p, 30.04) == "clusterize: verify done in 30.0 s (6/6)");
  // A phase that cannot count its work: no bar, no estimate.
  graph::ClusterizeProgress cut{"cut", 0, 0, false};
  CHECK(clusterize_live_line(cut, 65, 10) == "clusterize: cut 1:05 elapsed");
  CHECK(clusterize_record(cut, 0) == "clusterize: cut started");
  CHECK(clusterize_record(cut, 10) == "clusterize: cut, 0:10 elapsed");  // a quiet phase's tick
  cut.finished = true;
  CHECK(clusterize_record(cut, 1.24) == "clusterize: cut done in 1.2 s");
  graph::ClusterizeProgress probes{"memory probes", 3, 0, false};
  CHECK(clusterize_live_line(probes, 5, 10) == "clusterize: memory probes 3 0:05 elapsed");
}

TEST_CASE("status: a node's memory against its budget", "[cli][memory]") {
  ravnest::wire::NodeStatusData s;
  CHECK(cli::memory_line(s).empty());  // a daemon that reports no budget
  s.memory_limit_bytes = 629145600;
  s.memory_limit_source = "cgroup memory.limit_in_bytes";
  s.memory_used_bytes = 412000000;
  s.memory_peak_bytes = 530000000;
  s.memory_baseline_bytes = 163000000;
  CHECK(memory_line(s) ==
        "memory 412 MB of 629 MB (cgroup memory.limit_in_bytes), peak 530 MB, idle 163 MB");
}

TEST_CASE("loss report: table, SVG and malformed files", "[cli][losses]") {
  // "-": no accuracy (a regression), as the leaf writes it; "nan" as older leaves did.
  auto a = cli::parse_loss_history(0, "2.5\n1.5\n\n0.5\n", "3 0 0.7 0.8\n6 1 0.4 nan\n9 1 0.3 -\n",
                                   "node_2");
  REQUIRE(a.losses.size() == 3);
  REQUIRE(a.validation.size() == 3);
  CHECK(std::isnan(a.validation[2].accuracy));
  CHECK(cli::loss_table({a}).find("nan") == std::string::npos);
  CHECK(a.validation[1].updates == 6);
  CHECK(a.validation[1].epoch == 1);
  CHECK(std::isnan(a.validation[1].accuracy));
  auto b = parse_loss_history(1, "", "", "node_5");

  const auto table = cli::loss_table({a, b});
  INFO(table);
  CHECK(table.find("0               3     2.5000     0.5000     0.5000       1.5000") != std::string::npos);
  CHECK(table.find("1               0          -") != std::string::npos);
  CHECK(table.find("cluster 0 validation after 3 updates (epoch 1): loss 0.7000 accuracy 0.8000") !=
        std::string::npos);
  CHECK(table.find("cluster 0 validation after 6 updates (epoch 2): loss 0.4000\n") !=
        std::string::npos);

  const auto svg = cli::loss_svg({a, b}, "job <a&b>");
  CHECK(svg.rfind("<svg ", 0) == 0);
  CHECK(svg.find("job &lt;a&amp;b&gt;") != std::string::npos);
  CHECK(svg.find("data-cluster=\"0\"") != std::string::npos);
  CHECK(svg.find("<polyline class=\"training\" data-cluster=\"1\"") == std::string::npos);  // no losses
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");

  // A parameter server's evaluator: rounds only, named, no empty row of its own.
  auto evaluator = parse_loss_history(-1, "", "4 0 0.9 0.6\n8 1 0.6 0.7\n", "node_2");
  evaluator.name = "evaluator";
  const auto with_evaluator = loss_table({a, evaluator});
  INFO(with_evaluator);
  CHECK(with_evaluator.find("-1 ") == std::string::npos);
  CHECK(with_evaluator.find("evaluator validation after 8 updates (epoch 2): loss 0.6000 "
                            "accuracy 0.7000\n") != std::string::npos);
  const auto evaluator_svg = loss_svg({a, evaluator}, "ps");
  CHECK(evaluator_svg.find("evaluator (o validation)") != std::string::npos);
  CHECK(evaluator_svg.find("<title>evaluator, validation after 8 updates") != std::string::npos);

  auto error = [](const std::string& losses, const std::string& validation) {
    try {
      parse_loss_history(0, losses, validation, "node_2");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error("1.0\nx\n", "") == "node_2 losses.txt line 2: not a number: \"x\"");
  CHECK(error("1.0 2.0\n", "") == "node_2 losses.txt line 1: not a number: \"1.0 2.0\"");
  CHECK(error("", "3 0 0.7\n") == "node_2 validation.txt line 1: expected \"updates epoch loss accuracy\"");
  CHECK(error("", "3 0 0.7 0.8 9\n") == "node_2 validation.txt line 1: expected \"updates epoch loss accuracy\"");
}

TEST_CASE("dashboard state: plan, nodes, thinned curves, no NaN in JSON", "[cli][dashboard]") {
  requester::Plan plan;
  plan.dir = "node_data";
  for (int id = 0; id < 2; ++id) {
    ravnest::config::NodeMetadata m;
    m.node_id = id;
    m.name = "node_" + std::to_string(id);
    m.cluster = 0;
    m.position = id;
    m.address = "127.0.0.1:80" + std::to_string(id);
    m.role = id == 0 ? ravnest::config::Role::kRoot : ravnest::config::Role::kLeaf;
    m.returns_model_output = id == 1;
    plan.nodes.push_back(m);
  }
  std::vector<requester::NodeReport> reports(2);
  for (int i = 0; i < 2; ++i) {
    reports[i].node = plan.nodes[i];
    reports[i].reachable = i == 0;
    reports[i].state = i == 0 ? "training" : "unreachable";
    reports[i].error = i == 0 ? "" : "node_1 (127.0.0.1:801) stopped answering";
  }
  reports[0].status.batches = 7;
  reports[0].status.total_batches = 20;
  reports[0].status.samples_per_second = 123.5;
  reports[0].status.busy_seconds = 1;
  reports[0].status.running_seconds = 4;
  reports[0].status.traffic[ravnest::wire::TrafficKind::kActivations].bytes_sent = 1000;
  cli::LossHistory h;
  h.cluster = 0;
  for (int i = 0; i < 5000; ++i) h.losses.push_back(1.0 / (i + 1));
  h.validation.push_back({100, 0, 0.5, std::nan("")});
  const auto state = cli::dashboard_state(plan, reports, {h}, "job.toml", "[train]\n", 100);
  CHECK(state["plan"]["node_count"] == 2);
  CHECK(state["plan"]["clusters"][0]["nodes"][1]["role"] == "leaf");
  CHECK(state["nodes"][0]["state"] == "training");
  CHECK(state["nodes"][0]["total_batches"] == 20);
  CHECK(state["nodes"][0]["busy"] == 0.25);
  CHECK(state["nodes"][0]["bytes_sent"] == 1000);
  CHECK(state["nodes"][0]["loss"].is_null());  // not the leaf
  CHECK(state["nodes"][1]["error"] == "node_1 (127.0.0.1:801) stopped answering");
  const auto& curve = state["clusters"][0];
  CHECK(curve["label"] == "cluster 0");  // the page's name for it ("evaluator" for a PS's)
  CHECK(curve["batches"] == 5000);
  CHECK(curve["losses"].size() <= 101);
  CHECK(curve["losses"][0][0] == 1);
  CHECK(curve["losses"].back()[0] == 5000);  // the last point stays
  CHECK(curve["last_loss"] == 1.0 / 5000);
  CHECK(curve["validation"][0]["accuracy"].is_null());
  CHECK(state.dump().find("NaN") == std::string::npos);
  CHECK(state["job"] == "[train]\n");
}
