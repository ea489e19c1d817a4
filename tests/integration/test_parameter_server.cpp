// Parameter-server training on real daemons (docs/parameter-server.md): servers holding shards of
// the model, workers training on their shards of the data, an evaluator. Synchronous training is
// compared with the same training emulated in one process (runtime::train_reference_clusters:
// one process stepping on the average of the workers' gradients).
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>

#include <torch/csrc/jit/serialization/import.h>

#include "libs/config/job_spec.h"
#include "libs/config/node_metadata.h"
#include "libs/config/plan_layout.h"
#include "libs/config/secret.h"
#include "libs/requester/requester.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

// Turns a LocalCluster plan of one-node clusters into a parameter-server plan: the first
// `servers` nodes serve (the state dict dealt out in turn), the next `workers` train, and a last
// node, if `evaluator`, scores.
void as_parameter_server_plan(const test::LocalCluster& cluster, int servers, int workers,
                              bool evaluator) {
  const config::PlanLayout layout(cluster.plan_dir());
  const int nodes = servers + workers + (evaluator ? 1 : 0);
  std::vector<config::NodeMetadata> metas;
  for (int n = 0; n < nodes; ++n) metas.push_back(config::load_node_metadata(layout.node_file(n)));
  config::ParameterServerPlan plan;
  for (int s = 0; s < servers; ++s) plan.servers.push_back({s, metas[s].address, {}});
  const auto& names = metas[0].parameters;
  for (size_t i = 0; i < names.size(); ++i) {
    plan.servers[i % static_cast<size_t>(servers)].tensors.push_back(names[i]);
  }
  for (int w = 0; w < workers; ++w) plan.workers.push_back({servers + w, metas[servers + w].address});
  if (evaluator) plan.evaluator = config::PsPeer{nodes - 1, metas[nodes - 1].address};
  for (int n = 0; n < nodes; ++n) {
    auto& m = metas[n];
    m.rings.clear();
    m.parameter_server = plan;
    m.addresses = {{m.node_id, m.address}};
    m.pipeline = {m.node_id};
    if (n < servers) {
      m.role = config::Role::kServer;
      m.cluster = -1;
    } else if (n < servers + workers) {
      m.role = config::Role::kWorker;
      m.cluster = n - servers;
    } else {
      m.role = config::Role::kEvaluator;
      m.cluster = -1;
    }
    m.cluster_count = workers;
    test::write_text(layout.node_file(n), config::to_json(m));
  }
}

std::string job_text(int epochs, int max_steps, const std::string& ps, bool validation) {
  std::string text = "[train]\nepochs = " + std::to_string(epochs) +
                     "\nbatch_size = 32\nmicro_batches = 2\nseed = 5\n";
  if (max_steps > 0) text += "max_steps = " + std::to_string(max_steps) + "\n";
  text += "\n[data]\nformat = \"csv\"\ntrain = \"" +
          (test::digits_dir() / "digits_train.csv").string() + "\"\n";
  if (validation) {
    text += "validation = \"" + (test::digits_dir() / "digits_val.csv").string() + "\"\n";
  }
  text += "label_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\nnum_classes = 10\n"
          "\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\nname = \"adam\"\nlr = 0.01\n"
          "\n[scheduler]\nname = \"step\"\nstep_size = 1\ngamma = 0.5\nper = \"epoch\"\n" +
          ps;
  return text;
}


}  // namespace

TEST_CASE("synchronous parameter servers equal one process on the workers' average gradient",
          "[ps][exact]") {
  // 2 servers (the state dealt out between them), 3 workers, an evaluator; 2 epochs with an LR
  // step at each epoch's end, so the servers' schedules are checked too.
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}, {}, {}, {}}, {"32x1x8x8"});
  as_parameter_server_plan(cluster, 2, 3, true);
  cluster.start_all();
  auto push = cluster.ravnest("push");
  INFO(push.out << push.err);
  REQUIRE(push.exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path, job_text(2, 0, "\n[ps]\nmode = \"sync\"\neval_freq = 4\n", true));
  auto train = cluster.ravnest("train", job_path.string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  // The evaluator scored the servers' weights along the way and at the end.
  CHECK(std::regex_search(train.out, std::regex("evaluator: the servers' weights after 4 updates")));
  CHECK(std::regex_search(train.out, std::regex("val_acc 0\\.[0-9]+")));

  auto fuse = cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string());
  INFO(fuse.out << fuse.err);
  REQUIRE(fuse.exit_code == 0);
  const auto trained = test::load_state_dict(cluster.dir() / "trained" / "trained_state_dict.pt");
  // One process stepping on the average of the workers' gradients: data parallelism that
  // reduces gradients.
  auto as_one_process = config::load_job(job_path.string());
  as_one_process.train.reduce = config::ReduceMode::kGradients;
  const auto reference = runtime::train_reference_clusters(test::digits_model(), as_one_process, 3);
  std::string where;
  const double diff = test::largest_difference(reference.state, trained, &where);
  INFO("largest difference from one process: " << diff << " in " << where);
  for (const auto& [name, t] : reference.state) {
    const double d = (t.to(at::kDouble) - trained.at(name).to(at::kDouble)).abs().max().item<double>();
    if (d > 1e-5) UNSCOPED_INFO(name << " differs by " << d << ": " << t.flatten().slice(0, 0, 3) << " vs " << trained.at(name).flatten().slice(0, 0, 3));
  }
  CHECK(diff <= 1e-5);
  const double moved =
      test::largest_difference(runtime::state_of(torch::jit::load(test::digits_model())), trained, &where);
  CHECK(moved > 1e-3);


  auto status = cluster.ravnest("status");
  INFO(status.out);
  CHECK(std::regex_search(status.out, std::regex("node_0 .* server +finished")));
  CHECK(std::regex_search(status.out, std::regex("node_3 .* worker +finished")));
  CHECK(std::regex_search(status.out, std::regex("node_5 .* evaluator +finished")));
}

// Backup workers and asynchronous updates are not exact: they must train, drop what their rule
// says (counted in the servers' logs) and end with a model the evaluator scored.
TEST_CASE("backup workers and asynchronous updates train and count what they drop", "[ps]") {
  test::LocalCluster cluster(test::digits_model(), {{}, {}, {}, {}, {}}, {"32x1x8x8"});
  as_parameter_server_plan(cluster, 1, 3, true);
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  for (const std::string mode : {"mode = \"backup\"\nbackup = 2", "mode = \"async\"\nmax_staleness = 1"}) {
    INFO(mode);
    const auto job_path = cluster.dir() / "job.toml";
    test::write_text(job_path, job_text(3, 0, "\n[ps]\n" + mode + "\n", true));
    auto train = cluster.ravnest("train", job_path.string());
    INFO(train.out << train.err);
    REQUIRE(train.exit_code == 0);
    std::smatch accuracy;
    REQUIRE(std::regex_search(train.out, accuracy, std::regex("val_acc (0\\.[0-9]+)")));
    CHECK(std::stod(accuracy[1]) > 0.8);
    auto fuse = cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string());
    INFO(fuse.out << fuse.err);
    CHECK(fuse.exit_code == 0);
  }
  const std::string log = cluster.log(0);
  INFO(log);
  CHECK(std::regex_search(log, std::regex("[0-9]+ gradient pushes dropped \\(late\\)")));
}
