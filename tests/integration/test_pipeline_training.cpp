// Pipeline training on real daemons (127.0.0.1, free ports): push, train, fuse; synchronous
// training equals one process; bad input and a daemon killed mid-training.
#include <catch2/catch.hpp>

#include <cstdio>
#include <sstream>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <thread>

#include <torch/cuda.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/base/secret.h"
#include "libs/requester/requester.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"
#include "tests/support/zoo.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

std::string job_text(const std::string& optimizer, int epochs, int max_steps,
                     int update_frequency, const std::string& schedule, bool validation) {
  std::string text = "[train]\nepochs = " + std::to_string(epochs) +
                     "\nbatch_size = 32\nmicro_batches = 4\nupdate_frequency = " +
                     std::to_string(update_frequency) + "\nseed = 3\nschedule = \"" + schedule +
                     "\"\n";
  if (max_steps > 0) text += "max_steps = " + std::to_string(max_steps) + "\n";
  text += "\n[data]\nformat = \"csv\"\ntrain = \"" + (test::digits_dir() / "digits_train.csv").string() +
          "\"\n";
  if (validation) text += "validation = \"" + (test::digits_dir() / "digits_val.csv").string() + "\"\n";
  text += "label_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\nnum_classes = 10\n"
          "\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\n" + optimizer + "\n";
  return text;
}


}  // namespace

TEST_CASE("push, train, fuse and evaluate on three daemons", "[daemon][pipeline]") {
  test::LocalCluster cluster(test::digits_model(), {test::LocalCluster::even_cuts(test::digits_model(), 3)},
                             {"32x1x8x8"});
  cluster.start_all();
  auto push = cluster.ravnest("push");
  INFO(push.out << push.err);
  REQUIRE(push.exit_code == 0);
  test::write_text(cluster.dir() / "job.toml",
                   job_text("name = \"adam\"\nlr = 0.003", 4, 0, 1, "1f1b", true));
  auto train = cluster.ravnest("train", (cluster.dir() / "job.toml").string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  CHECK(train.out.find("validation: loss") != std::string::npos);
  CHECK(train.out.find("training finished") != std::string::npos);

  // The leaf wrote one loss per batch.
  const auto losses = test::read_text(cluster.data_dir(2) / "losses.txt");
  CHECK(std::count(losses.begin(), losses.end(), '\n') == 4 * 45);  // 1437 samples / 32 -> 45

  auto status = cluster.ravnest("status");
  INFO(status.out);
  CHECK(status.exit_code == 0);
  CHECK(status.out.find("finished") != std::string::npos);
  // Only the root knows the run's batches and samples/s, only the leaf the loss: "-" elsewhere.
  CHECK(std::regex_search(status.out, std::regex("node_0 [^\n]* 180/180 +- +[0-9.]+\n")));
  CHECK(std::regex_search(status.out, std::regex("node_2 [^\n]* 180 +[0-9]+\\.[0-9]{4} +-\n")));

  // `ravnest losses` fetches them from the leaf, with the validation rounds (one per epoch and
  // val_freq 0), and plots them.
  const auto rounds = test::read_text(cluster.data_dir(2) / "validation.txt");
  CHECK(std::count(rounds.begin(), rounds.end(), '\n') == 4);
  auto table = cluster.ravnest("losses", "--plot " + (cluster.dir() / "losses.svg").string());
  INFO(table.out << table.err);
  REQUIRE(table.exit_code == 0);
  std::istringstream first_loss(losses);
  double first = 0;
  first_loss >> first;
  char expected[64];
  std::snprintf(expected, sizeof expected, "%-8d %8d %10.4f", 0, 180, first);  // the table's row
  CHECK(table.out.find(expected) != std::string::npos);
  CHECK(table.out.find("cluster 0 validation after 180 updates (epoch 4): loss ") != std::string::npos);
  const auto svg = test::read_text(cluster.dir() / "losses.svg");
  CHECK(svg.rfind("<svg ", 0) == 0);
  CHECK(svg.find("<polyline class=\"training\" data-cluster=\"0\"") != std::string::npos);
  size_t dots = 0;
  for (size_t at = svg.find("class=\"validation\""); at != std::string::npos;
       at = svg.find("class=\"validation\"", at + 1)) {
    ++dots;
  }
  CHECK(dots == 4);
  auto png = cluster.ravnest("losses", "--plot " + (cluster.dir() / "losses.png").string());
  CHECK(png.exit_code != 0);
  CHECK(png.err.find("only .svg plots") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(cluster.dir() / "losses.png"));
  auto missing = cluster.ravnest("losses", "--cluster 7");
  CHECK(missing.exit_code != 0);
  CHECK(missing.err.find("--cluster 7: no such cluster") != std::string::npos);

  auto fuse = cluster.ravnest("fuse", "--cluster 0 --out " + (cluster.dir() / "trained").string());
  INFO(fuse.out << fuse.err);
  REQUIRE(fuse.exit_code == 0);
  auto load = test::run_command(test::python() + " " + test::source_dir() +
                                "/tests/python/load_fused.py " +
                                (cluster.dir() / "trained/trained_state_dict.pt").string() + " " +
                                test::digits_model());
  INFO(load.out << load.err);
  CHECK(load.exit_code == 0);

  auto evaluate = test::run_command(test::binary_dir() + "/apps/ravnest/ravnest evaluate " +
                                    (cluster.dir() / "trained/model.pt").string() + " " +
                                    (cluster.dir() / "job.toml").string());
  INFO(evaluate.out << evaluate.err);
  REQUIRE(evaluate.exit_code == 0);
  std::smatch match;
  REQUIRE(std::regex_search(evaluate.out, match, std::regex("accuracy ([0-9.]+)")));
  CHECK(std::stod(match[1]) > 0.9);
}

TEST_CASE("synchronous pipeline training equals one process", "[daemon][pipeline][exact]") {
  struct Case {
    int stages;
    std::string optimizer;
    int update_frequency;
    std::string schedule;
  };
  const std::vector<Case> cases = {
      {2, "name = \"adam\"\nlr = 0.01", 1, "gpipe"},
      {3, "name = \"adam\"\nlr = 0.01", 2, "1f1b"},
      {2, "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9", 1, "1f1b"},
      {3, "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9\nnesterov = true", 1, "gpipe"},
  };
  // The hosts mode (test_pipeline_training_hosts_*: each daemon in a namespace of its own) runs
  // the three-stage 1F1B case alone, to keep CI short.
  const auto chosen = test::LocalCluster::hosts_mode_requested()
                          ? std::vector<Case>{cases[1]}
                          : cases;
  for (const auto& c : chosen) {
    INFO(c.stages << " stages, " << c.optimizer << ", update_frequency " << c.update_frequency
                  << ", " << c.schedule);
    test::LocalCluster cluster(test::digits_model(),
                               {test::LocalCluster::even_cuts(test::digits_model(), c.stages)},
                               {"32x1x8x8"});
    cluster.start_all();
    REQUIRE(cluster.ravnest("push").exit_code == 0);
    const auto job_path = cluster.dir() / "job.toml";
    test::write_text(job_path, job_text(c.optimizer, 2, 20, c.update_frequency, c.schedule, false));
    auto train = cluster.ravnest("train", job_path.string());
    INFO(train.out << train.err);
    REQUIRE(train.exit_code == 0);
    REQUIRE(cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string()).exit_code ==
            0);

    auto trained = test::load_state_dict(cluster.dir() / "trained/trained_state_dict.pt");
    auto reference = training::train_reference(test::digits_model(), config::load_job(job_path.string()), 20);
    REQUIRE(trained.size() == reference.state.size());
    double worst = 0;
    std::string worst_name;
    for (const auto& [name, tensor] : reference.state) {
      REQUIRE(trained.count(name) == 1);
      const double diff =
          (trained[name].to(at::kDouble) - tensor.to(at::kDouble)).abs().max().item<double>();
      if (diff > worst) {
        worst = diff;
        worst_name = name;
      }
    }
    INFO("largest difference " << worst << " in " << worst_name);
    CHECK(worst <= 1e-5);
    // Training moved the weights: the comparison is not between two untouched copies.
    CHECK(reference.updates == 20 / c.update_frequency);
  }
}

TEST_CASE("bad input is refused clearly and nothing is stored", "[daemon][errors]") {
  test::LocalCluster cluster(test::digits_model(), {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  cluster.start_all();

  SECTION("a wrong secret") {
    test::write_text(cluster.dir() / "wrong", "not-the-secret\n");
    auto result = test::run_command(test::binary_dir() + "/apps/ravnest/ravnest push --plan " +
                                    cluster.plan_dir() + " --secret-file " +
                                    (cluster.dir() / "wrong").string());
    CHECK(result.exit_code != 0);
    INFO(result.err);
    // One line naming the node; the TLS handshake refused the other secret's certificate.
    CHECK(result.err.find("node_0 (127.0.0.1:" + std::to_string(cluster.port(0)) +
                          "): push stage: refused: wrong secret") != std::string::npos);
    CHECK(std::count(result.err.begin(), result.err.end(), '\n') == 1);
    CHECK_FALSE(fs::exists(cluster.data_dir(0) / "stage.pt"));
    // Logged by the daemon, once, with the peer's address.
    const std::string log = cluster.log(0);
    INFO(log);
    const auto at = log.find("refused 127.0.0.1:");
    CHECK(at != std::string::npos);
    CHECK(log.find("wrong secret") != std::string::npos);
    CHECK(log.find("refused 127.0.0.1:", at + 1) == std::string::npos);
  }
  SECTION("a stage whose checksum fails") {
    const auto meta = cluster.plan_dir() + "/nodes/node_0.json";
    auto text = test::read_text(meta);
    const auto at = text.find("\"stage_sha256\": \"") + 17;
    text[at] = text[at] == '0' ? '1' : '0';
    test::write_text(meta, text);
    auto result = cluster.ravnest("push");
    CHECK(result.exit_code != 0);
    CHECK(result.err.find("checksum") != std::string::npos);
    CHECK_FALSE(fs::exists(cluster.data_dir(0) / "stage.pt"));
  }
  SECTION("a daemon serving another node") {
    cluster.kill(1, SIGTERM);
    REQUIRE(cluster.wait_exit(1, 10) == 0);
    // node_1's port, but the daemon was told it is node_0.
    auto result = test::run_command(
        test::binary_dir() + "/apps/ravnestd/ravnestd --node node_0 --listen 127.0.0.1:" +
        std::to_string(cluster.port(1)) + " --data-dir " + (cluster.dir() / "other").string() +
        " --secret-file " + cluster.secret_file() + " & pid=$!; sleep 3; " + test::binary_dir() +
        "/apps/ravnest/ravnest push --plan " + cluster.plan_dir() + " --secret-file " +
        cluster.secret_file() + "; code=$?; kill $pid; wait $pid; exit $code", 60);
    CHECK(result.exit_code != 0);
    CHECK(result.err.find("the stage is for node_1, this daemon serves node_0") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(cluster.dir() / "other/stage.pt"));
  }
  SECTION("a job naming an unknown loss or optimizer") {
    REQUIRE(cluster.ravnest("push").exit_code == 0);
    auto text = job_text("name = \"adamw2\"\nlr = 0.1", 1, 2, 1, "gpipe", false);
    test::write_text(cluster.dir() / "job.toml", text);
    auto result = cluster.ravnest("train", (cluster.dir() / "job.toml").string());
    CHECK(result.exit_code != 0);
    CHECK(result.err.find("optimizer.name") != std::string::npos);
    text = job_text("name = \"sgd\"\nlr = 0.1", 1, 2, 1, "gpipe", false);
    text.replace(text.find("cross_entropy"), 13, "hinge");
    test::write_text(cluster.dir() / "job.toml", text);
    result = cluster.ravnest("train", (cluster.dir() / "job.toml").string());
    CHECK(result.exit_code != 0);
    CHECK(result.err.find("loss.name") != std::string::npos);
    CHECK(fs::is_empty(cluster.data_dir(0) / "datasets"));
  }
  SECTION("a dataset with the wrong number of columns or labels out of range") {
    REQUIRE(cluster.ravnest("push").exit_code == 0);
    const auto csv = cluster.dir() / "bad.csv";
    auto rows = test::read_text(test::digits_dir() / "digits_train.csv");
    test::write_text(csv, rows.substr(0, rows.find('\n', rows.find('\n') + 1) + 1) + "1,2,3\n");
    auto text = job_text("name = \"sgd\"\nlr = 0.1", 1, 2, 1, "gpipe", false);
    text.replace(text.find((test::digits_dir() / "digits_train.csv").string()),
                 (test::digits_dir() / "digits_train.csv").string().size(), csv.string());
    test::write_text(cluster.dir() / "job.toml", text);
    auto result = cluster.ravnest("train", (cluster.dir() / "job.toml").string());
    CHECK(result.exit_code != 0);
    CHECK(result.err.find("bad.csv") != std::string::npos);
    CHECK(fs::is_empty(cluster.data_dir(0) / "datasets"));

    auto header_end = rows.find('\n');
    auto first_row_end = rows.find('\n', header_end + 1);
    std::string row = rows.substr(header_end + 1, first_row_end - header_end - 1);
    row = row.substr(0, row.rfind(',')) + ",12";
    test::write_text(csv, rows.substr(0, header_end + 1) + row + "\n");
    result = cluster.ravnest("train", (cluster.dir() / "job.toml").string());
    CHECK(result.exit_code != 0);
    CHECK(result.err.find("bad.csv") != std::string::npos);
    CHECK(result.err.find("12") != std::string::npos);
  }
}

TEST_CASE("a daemon killed mid-training is named within 10 s", "[daemon][faults]") {
  test::LocalCluster cluster(test::digits_model(), {test::LocalCluster::even_cuts(test::digits_model(), 3)},
                             {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  test::write_text(cluster.dir() / "job.toml",
                   job_text("name = \"sgd\"\nlr = 0.01", 500, 0, 1, "gpipe", false));
  // Killed once training runs (however slowly the machine starts the daemons).
  std::chrono::steady_clock::time_point killed_at;
  auto killer = std::thread([&cluster, &killed_at] {
    cluster.wait_for_batches(0, 2);
    killed_at = std::chrono::steady_clock::now();
    cluster.kill(1, SIGKILL);
  });
  auto train = cluster.ravnest("train", (cluster.dir() / "job.toml").string(), 60);
  const auto ended = std::chrono::steady_clock::now();
  killer.join();
  const double seconds = std::chrono::duration<double>(ended - killed_at).count();
  INFO(train.out << train.err);
  CHECK(train.exit_code != 0);
  CHECK(train.err.find("node_1") != std::string::npos);
  CHECK(seconds < 10);  // from the kill to the named failure
  // The others went back to idle and still serve.
  auto status = cluster.ravnest("status");
  INFO(status.out);
  std::smatch match;
  CHECK(std::regex_search(status.out, match, std::regex("node_0 .* idle")));
  CHECK(std::regex_search(status.out, match, std::regex("node_2 .* idle")));
}

// A model that returns a dict (torchvision's segmentation models: {"out", "aux"}): trained per
// pixel on "out", and predicted as a dict of joined tensors, through the daemons and in one
// process, equal to PyTorch's forward of the fused weights.
TEST_CASE("a dict output trains and predicts", "[daemon][predict]") {
  const test::ModelFiles files = test::model_files("segmentation");
  test::LocalCluster cluster(files.model, {test::LocalCluster::even_cuts(files.model, 3)},
                             files.example_inputs);
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto dir = cluster.dir();
  test::write_text(dir / "job.toml", "[train]\nepochs = 2\nbatch_size = 6\nmicro_batches = 2\n"
                                     "[data]\nformat = \"tensors\"\ntrain = \"" + files.train_file +
                                         "\"\nvalidation = \"" + files.train_file +
                                         "\"\n[loss]\nname = \"" + files.loss +
                                         "\"\n[optimizer]\nname = \"adam\"\nlr = 0.01\n");
  REQUIRE(files.loss == "cross_entropy");
  auto train = cluster.ravnest("train", (dir / "job.toml").string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  // Validation's accuracy is pixel accuracy: the last round's, on the trained weights, is
  // checked against PyTorch below.
  const std::regex val_acc("val_acc ([0-9.]+)");
  std::string accuracy;
  for (auto it = std::sregex_iterator(train.out.begin(), train.out.end(), val_acc);
       it != std::sregex_iterator(); ++it) {
    accuracy = (*it)[1].str();
  }
  REQUIRE_FALSE(accuracy.empty());
  REQUIRE(cluster.ravnest("fuse", "--out " + (dir / "trained").string()).exit_code == 0);
  auto piped = cluster.ravnest("predict", cluster.plan_dir() + " " + files.train_file +
                                              " --batch-size 5 --out " + (dir / "piped.pt").string());
  INFO(piped.out << piped.err);
  REQUIRE(piped.exit_code == 0);
  auto local = test::run_command(test::binary_dir() + "/apps/ravnest/ravnest predict " +
                                 (dir / "trained/model.pt").string() + " " + files.train_file +
                                 " --job " + (dir / "job.toml").string() + " --out " +
                                 (dir / "local.pt").string());
  INFO(local.out << local.err);
  REQUIRE(local.exit_code == 0);
  test::write_text(dir / "check.py", R"(import sys, torch
model_path, state_path, data_path, val_acc = sys.argv[1:5]
model = torch.jit.load(model_path)
model.load_state_dict(torch.load(state_path), strict=True)
model.eval()
inputs, labels = torch.load(data_path)
with torch.no_grad():
    expected = model(inputs)
pixel_accuracy = (expected["out"].argmax(1) == labels).double().mean().item()
assert abs(pixel_accuracy - float(val_acc)) <= 6e-5, (pixel_accuracy, val_acc)
for path in sys.argv[5:]:
    got = torch.load(path)
    assert isinstance(got, dict) and list(got) == ["out", "aux"], (path, type(got))
    worst = max((got[k] - expected[k]).abs().max().item() for k in expected)
    assert worst <= 1e-5, (path, worst)
print("ok")
)");
  auto check = test::run_command(test::python() + " " + (dir / "check.py").string() + " " +
                                 files.model + " " + (dir / "trained/trained_state_dict.pt").string() +
                                 " " + files.train_file + " " + accuracy + " " +
                                 (dir / "piped.pt").string() + " " +
                                 (dir / "local.pt").string());
  INFO(check.out << check.err);
  CHECK(check.out == "ok\n");
}

// `ravnest predict`: through the daemons' pipeline (a plan) and in one process (the fused model),
// both equal to PyTorch's own forward of the fused weights; nothing of training is disturbed.
TEST_CASE("predict through the pipeline equals the fused model in PyTorch", "[daemon][predict]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 3)}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto dir = cluster.dir();
  const std::string val = (test::digits_dir() / "digits_val.csv").string();
  // Before any training: nothing to default the job to, and the leaf holds no predictions.
  auto untrained = cluster.ravnest("predict", cluster.plan_dir() + " " + val);
  CHECK(untrained.exit_code != 0);
  CHECK(untrained.err.find("no job was trained with the plan") != std::string::npos);

  // A loss that does not take the model's output against the labels: one line at the requester,
  // naming [loss] and both shapes, before anything is shipped (docs/job-file.md [loss]).
  std::string mse = job_text("name = \"adam\"\nlr = 0.003", 1, 12, 1, "1f1b", false);
  mse.replace(mse.find("cross_entropy"), 13, "mse");
  test::write_text(dir / "mse.toml", mse);
  auto refused = cluster.ravnest("train", (dir / "mse.toml").string());
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("mse.toml: [loss] loss mse: ") != std::string::npos);
  CHECK(refused.err.find("[1, 10]") != std::string::npos);
  CHECK(!std::filesystem::exists(cluster.data_dir(2) / "losses.txt"));

  test::write_text(dir / "job.toml", job_text("name = \"adam\"\nlr = 0.003", 1, 12, 1, "1f1b", true));
  auto train = cluster.ravnest("train", (dir / "job.toml").string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  const auto losses = test::read_text(cluster.data_dir(2) / "losses.txt");
  auto fuse = cluster.ravnest("fuse", "--out " + (dir / "trained").string());
  REQUIRE(fuse.exit_code == 0);

  // digits_val's 360 samples in batches of 20, each in the job's 4 micro-batches (of 5).
  auto piped = cluster.ravnest("predict", cluster.plan_dir() + " " + val + " --batch-size 20 --out " +
                                              (dir / "piped.pt").string());
  INFO(piped.out << piped.err);
  REQUIRE(piped.exit_code == 0);
  CHECK(piped.out.find("data to predict on: ") != std::string::npos);
  auto local = test::run_command(test::binary_dir() + "/apps/ravnest/ravnest predict " +
                                 (dir / "trained/model.pt").string() + " " + val + " --job " +
                                 (dir / "job.toml").string() + " --out " +
                                 (dir / "local.pt").string());
  INFO(local.out << local.err);
  REQUIRE(local.exit_code == 0);
  auto check = test::run_command(test::python() + " " + test::source_dir() +
                                 "/tests/python/check_predictions.py " + test::digits_model() + " " +
                                 (dir / "trained/trained_state_dict.pt").string() + " " + val + " " +
                                 (dir / "piped.pt").string() + " " + (dir / "local.pt").string());
  INFO(check.out << check.err);
  CHECK(check.exit_code == 0);
  CHECK(check.out.rfind("ok ", 0) == 0);

  // Without labels: the same file less its label column (the last) predicts the same, through
  // the daemons and in one process.
  {
    std::istringstream lines(test::read_text(val));
    std::string line, unlabeled;
    while (std::getline(lines, line)) unlabeled += line.substr(0, line.rfind(',')) + "\n";
    test::write_text(dir / "unlabeled.csv", unlabeled);
  }
  auto piped_bare = cluster.ravnest("predict", cluster.plan_dir() + " " +
                                                   (dir / "unlabeled.csv").string() +
                                                   " --batch-size 20 --out " +
                                                   (dir / "piped_bare.pt").string());
  INFO(piped_bare.out << piped_bare.err);
  REQUIRE(piped_bare.exit_code == 0);
  CHECK(test::read_text(dir / "piped_bare.pt") == test::read_text(dir / "piped.pt"));
  auto local_bare = test::run_command(test::binary_dir() + "/apps/ravnest/ravnest predict " +
                                      (dir / "trained/model.pt").string() + " " +
                                      (dir / "unlabeled.csv").string() + " --job " +
                                      (dir / "job.toml").string() + " --out " +
                                      (dir / "local_bare.pt").string());
  INFO(local_bare.out << local_bare.err);
  REQUIRE(local_bare.exit_code == 0);
  CHECK(test::read_text(dir / "local_bare.pt") == test::read_text(dir / "local.pt"));

  // Training's results are untouched: the leaf's losses, the trained stages (fuse again, the
  // last job on every node counts as finished), and the next training job starts as before.
  CHECK(test::read_text(cluster.data_dir(2) / "losses.txt") == losses);
  auto refuse = cluster.ravnest("fuse", "--out " + (dir / "trained_again").string());
  INFO(refuse.out << refuse.err);
  CHECK(refuse.exit_code == 0);
  CHECK(test::read_text(dir / "trained_again/trained_state_dict.pt") ==
        test::read_text(dir / "trained/trained_state_dict.pt"));

  // Errors: one line, nothing written.
  auto no_cluster = cluster.ravnest("predict", cluster.plan_dir() + " " + val + " --cluster 3 --out " +
                                                   (dir / "x.pt").string());
  CHECK(no_cluster.exit_code != 0);
  CHECK(no_cluster.err.find("--cluster 3: no such cluster") != std::string::npos);
  auto no_data = cluster.ravnest("predict", cluster.plan_dir() + " " + (dir / "nope.csv").string() +
                                                " --out " + (dir / "x.pt").string());
  CHECK(no_data.exit_code != 0);
  CHECK(no_data.err.find("nope.csv: no such file") != std::string::npos);
  test::write_text(dir / "bad.csv", "label,a\n1,2\n");
  auto bad_data = cluster.ravnest("predict", cluster.plan_dir() + " " + (dir / "bad.csv").string() +
                                                 " --out " + (dir / "x.pt").string());
  CHECK(bad_data.exit_code != 0);
  CHECK(bad_data.err.find("bad.csv") != std::string::npos);
  auto zero = cluster.ravnest("predict", cluster.plan_dir() + " " + val + " --batch-size 0 --out " +
                                             (dir / "x.pt").string());
  CHECK(zero.exit_code != 0);
  CHECK(zero.err.find("--batch-size: must be at least 1") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "x.pt"));
}

TEST_CASE("a daemon whose port is taken says so in one line", "[daemon][errors]") {
  test::LocalCluster cluster(test::digits_model(), {{}}, {"32x1x8x8"});
  cluster.start(0);
  auto second = test::run_command(test::binary_dir() + "/apps/ravnestd/ravnestd --node node_0 --listen 127.0.0.1:" +
                                  std::to_string(cluster.port(0)) + " --data-dir " +
                                  (cluster.dir() / "other").string(), 30);
  CHECK(second.exit_code != 0);
  CHECK(second.err.find("ravnestd: error: cannot listen on 127.0.0.1:" +
                        std::to_string(cluster.port(0)) + ": Address already in use\n") !=
        std::string::npos);
  CHECK(second.err.find("stack:") == std::string::npos);
}

TEST_CASE("a daemon asked for CUDA on a CPU-only LibTorch says so in one line at start",
          "[daemon][errors][device]") {
  if (torch::cuda::is_available()) return;  // a CUDA build: nothing to refuse
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ravnest_device_" + std::to_string(::getpid()));
  auto run = test::run_command(test::binary_dir() +
                                   "/apps/ravnestd/ravnestd --node node_0 --listen 127.0.0.1:9"
                                   " --device cuda:0 --data-dir " + dir.string(),
                               30);
  std::filesystem::remove_all(dir);
  CHECK(run.exit_code != 0);
  CHECK(run.err.find("ravnestd: error: device: \"cuda:0\" asks for CUDA") != std::string::npos);
  // The error is the last line, whole (the log lines before it are the daemon's warnings).
  const auto error = run.err.find("ravnestd: error:");
  CHECK(run.err.find('\n', error) == run.err.size() - 1);
  auto typo = test::run_command(test::binary_dir() +
                                    "/apps/ravnestd/ravnestd --node node_0 --device gpu", 30);
  CHECK(typo.exit_code != 0);
  CHECK(typo.err == "ravnestd: error: flags: device: \"gpu\" is not cpu, cuda or cuda:N\n");
}

TEST_CASE("SIGTERM stops a daemon cleanly", "[daemon]") {
  test::LocalCluster cluster(test::digits_model(), {{}}, {"32x1x8x8"});
  cluster.start(0);
  cluster.kill(0, SIGTERM);
  CHECK(cluster.wait_exit(0, 10) == 0);
  CHECK(cluster.log(0).find("stopped") != std::string::npos);
}

namespace {

void write_idx(const fs::path& path, uint32_t magic, const std::vector<uint32_t>& dims,
               const std::vector<uint8_t>& bytes) {
  std::string out;
  auto put = [&](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  out.append(bytes.begin(), bytes.end());
  test::write_text(path, out);
}

// MNIST's idx files with 8x8 images, so that the digits CNN takes them.
void write_tiny_mnist(const fs::path& dir) {
  fs::create_directories(dir);
  for (const char* prefix : {"train", "t10k"}) {
    const uint32_t count = std::string(prefix) == "train" ? 96 : 32;
    std::vector<uint8_t> pixels(count * 64), labels(count);
    for (uint32_t i = 0; i < count; ++i) {
      labels[i] = static_cast<uint8_t>(i % 10);
      for (uint32_t p = 0; p < 64; ++p) pixels[i * 64 + p] = static_cast<uint8_t>((i * 7 + p * labels[i]) % 256);
    }
    write_idx(dir / (std::string(prefix) + "-images-idx3-ubyte"), 0x803, {count, 8, 8}, pixels);
    write_idx(dir / (std::string(prefix) + "-labels-idx1-ubyte"), 0x801, {count}, labels);
  }
}

}  // namespace

TEST_CASE("a dataset directory (MNIST idx files) is shipped file by file", "[daemon][data]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  write_tiny_mnist(cluster.dir() / "mnist");
  test::write_text(cluster.dir() / "job.toml",
                   "[train]\nepochs = 2\nbatch_size = 16\nmicro_batches = 2\n\n"
                   "[data]\nformat = \"mnist\"\ntrain = \"mnist\"\nvalidation = \"mnist\"\n"
                   "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n"
                   "[optimizer]\nname = \"sgd\"\nlr = 0.01\n");
  auto train = cluster.ravnest("train", (cluster.dir() / "job.toml").string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  CHECK(train.out.find("shipped train-images-idx3-ubyte to node_0") != std::string::npos);
  CHECK(train.out.find("validation: loss") != std::string::npos);
  // Each split's images and labels, in a bundle of their own (docs/faults.md).
  auto shipped = [](const fs::path& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file()) names.push_back(it->path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  CHECK(shipped(cluster.data_dir(0) / "datasets") ==
        std::vector<std::string>{"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
                                 "train-images-idx3-ubyte", "train-labels-idx1-ubyte"});
  CHECK(shipped(cluster.data_dir(1) / "datasets").empty());  // root only
}

TEST_CASE("a detached job is followed with ravnest status", "[daemon]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 2)},
                             {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  test::write_text(cluster.dir() / "job.toml",
                   job_text("name = \"sgd\"\nlr = 0.05", 2, 0, 1, "gpipe", false));
  auto train = cluster.ravnest("train", (cluster.dir() / "job.toml").string() + " --detach");
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  CHECK(train.out.find("runs detached") != std::string::npos);
  std::string status;
  for (int attempt = 0; attempt < 240; ++attempt) {
    status = cluster.ravnest("status").out;
    if (std::count(status.begin(), status.end(), '\n') >= 3 &&
        status.find("training") == std::string::npos && status.find("ready") == std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  INFO(status);
  std::smatch match;
  CHECK(std::regex_search(status, match, std::regex("node_0 .* finished .* 90/90")));
  CHECK(std::regex_search(status, match, std::regex("node_1 .* finished")));
}

TEST_CASE("a module used in two stages trains as the whole model does", "[daemon][pipeline][exact]") {
  const std::string model = test::models_dir() + "/reused.pt";
  test::LocalCluster cluster(model, {test::LocalCluster::even_cuts(model, 2)}, {"4x16"});
  // The cut separates the two uses of the shared Linear: both stages hold it.
  auto root = config::load_node_metadata(cluster.plan_dir() + "/nodes/node_0.json");
  REQUIRE(root.shared_parameters.count("shared.weight") == 1);

  auto data = test::run_command(
      test::python() + " -c \"import torch; g = torch.Generator().manual_seed(1); "
      "x = torch.randn(256, 16, generator=g); "
      "torch.save((x, torch.tanh(x.flip(1))), '" + (cluster.dir() / "pairs.pt").string() + "')\"");
  INFO(data.out << data.err);
  REQUIRE(data.exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path,
                   "[train]\nepochs = 1\nbatch_size = 32\nmicro_batches = 2\nmax_steps = 8\n\n"
                   "[data]\nformat = \"tensors\"\ntrain = \"pairs.pt\"\n\n"
                   "[loss]\nname = \"mse\"\n\n[optimizer]\nname = \"adam\"\nlr = 0.01\n");
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  auto train = cluster.ravnest("train", job_path.string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);
  auto fuse = cluster.ravnest("fuse", "--out " + (cluster.dir() / "trained").string());
  INFO(fuse.out << fuse.err);
  REQUIRE(fuse.exit_code == 0);  // fuse also checks that both copies of the Linear agree

  auto trained = test::load_state_dict(cluster.dir() / "trained/trained_state_dict.pt");
  auto reference = training::train_reference(model, config::load_job(job_path.string()), 8);
  double worst = 0;
  for (const auto& [name, tensor] : reference.state) {
    REQUIRE(trained.count(name) == 1);
    worst = std::max(worst, (trained[name] - tensor).abs().max().item<double>());
  }
  INFO("largest difference " << worst);
  CHECK(worst <= 1e-5);
  const auto original = training::state_of(torch::jit::load(model));
  CHECK((trained["shared.weight"] - original.at("shared.weight")).abs().max().item<double>() > 1e-3);
}


TEST_CASE("compressed activations and gradients train as well as uncompressed ones",
          "[daemon][pipeline][compression]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 3)}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  std::map<std::string, std::string> losses;
  auto accuracy_with = [&](const std::string& codec) {
    const auto job = cluster.dir() / ("job_" + codec + ".toml");
    test::write_text(job, job_text("name = \"adam\"\nlr = 0.003", 4, 0, 1, "1f1b", true) +
                              "\n[compression]\nactivations = \"" + codec +
                              "\"\ngradients = \"" + codec + "\"\n");
    auto train = cluster.ravnest("train", job.string());
    INFO(codec << ": " << train.out << train.err);
    REQUIRE(train.exit_code == 0);
    const auto out = cluster.dir() / ("trained_" + codec);
    REQUIRE(cluster.ravnest("fuse", "--cluster 0 --out " + out.string()).exit_code == 0);
    auto evaluate = test::run_command(test::binary_dir() + "/apps/ravnest/ravnest evaluate " +
                                      (out / "model.pt").string() + " " + job.string());
    INFO(evaluate.out << evaluate.err);
    REQUIRE(evaluate.exit_code == 0);
    std::smatch match;
    REQUIRE(std::regex_search(evaluate.out, match, std::regex("accuracy ([0-9.]+)")));
    losses[codec] = test::read_text(cluster.data_dir(2) / "losses.txt");
    return std::stod(match[1]);
  };
  const double plain = accuracy_with("none");
  const double fp16 = accuracy_with("fp16");
  const double int8 = accuracy_with("int8");
  // Measured: none 0.975, fp16 0.967, int8 0.975 (240 validation digits, 4 epochs).
  INFO("validation accuracy: none " << plain << ", fp16 " << fp16 << ", int8 " << int8);
  CHECK(plain > 0.9);
  CHECK(fp16 >= plain - 0.02);
  CHECK(int8 >= plain - 0.02);
  // The codecs were applied: each run's losses differ from the uncompressed one's.
  CHECK(losses["fp16"] != losses["none"]);
  CHECK(losses["int8"] != losses["none"]);
  CHECK(losses["int8"] != losses["fp16"]);
}

// The demo's job (configs/job_digits.toml: 15 epochs, batches of 64 in 4 micro-batches, Adam with
// a cosine schedule) on the demo's three stages, asynchronous: no flush, up to 3 micro-batches in
// flight, weight stashing. It reaches what the synchronous demo does.
TEST_CASE("the asynchronous schedule trains the digits demo to 97 %", "[daemon][pipeline][async]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 3)}, {"64x1x8x8"});
  cluster.start_all();
  std::string job = test::read_text(fs::path(test::source_dir()) / "configs/job_digits.toml");
  auto replace = [&](const std::string& from, const std::string& to) {
    const auto at = job.find(from);
    REQUIRE(at != std::string::npos);
    job.replace(at, from.size(), to);
  };
  replace("schedule = \"1f1b\"", "schedule = \"async\"");
  replace("\"digits_train.csv\"", "\"" + (test::digits_dir() / "digits_train.csv").string() + "\"");
  replace("\"digits_val.csv\"", "\"" + (test::digits_dir() / "digits_val.csv").string() + "\"");
  const auto job_path = cluster.dir() / "job_async.toml";
  test::write_text(job_path, job);
  requester::Requester requester(requester::load_plan(cluster.plan_dir()),
                               base::read_secret(cluster.secret_file()));
  requester.push([](const std::string&) {});
  const auto result = requester.train(job_path.string(), {});
  REQUIRE(result.clusters.size() == 1);
  const auto& progress = result.clusters[0];
  REQUIRE(progress.has_validation);
  INFO("validation accuracy " << progress.validation_accuracy << ", loss "
                              << progress.validation_loss);
  CHECK(progress.validation_accuracy >= 0.97);
  CHECK(progress.batches == progress.total_batches);
  // Every stage says how long it computed and ran (bench/pipeline.sh's busy fractions).
  const auto reports = requester.status();
  REQUIRE(reports.size() == 3);
  for (const auto& r : reports) {
    INFO(r.status.node << " busy " << r.status.busy_seconds << " of " << r.status.running_seconds);
    CHECK(r.status.busy_seconds > 0);
    CHECK(r.status.running_seconds >= r.status.busy_seconds);
    CHECK(r.status.running_seconds <= result.seconds + 1);
  }
}

// What a node counts as sent equals what its consumer counts as received, and both are the
// tensors' bytes as the codec sends them plus a bounded envelope per message (wire_traffic.h).
TEST_CASE("bytes on the wire are counted per node and kind, as the tensors' sizes say",
          "[daemon][pipeline][traffic]") {
  test::LocalCluster cluster(test::digits_model(),
                             {test::LocalCluster::even_cuts(test::digits_model(), 3)}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  // What stage 0 sends for one micro-batch of 8 digits, in float32 values.
  int64_t values = 0;
  {
    auto stage = torch::jit::load((fs::path(cluster.plan_dir()) / "stages/node_0.pt").string());
    const auto out = stage.forward({torch::zeros({8, 1, 8, 8})});
    for (const auto& v : out.toTupleRef().elements()) values += v.toTensor().numel();
  }
  REQUIRE(values > 1000);
  constexpr uint64_t kMicroBatches = 5 * 4;  // max_steps 5, 4 micro-batches a batch
  constexpr uint64_t kEnvelope = 1024;       // per message, at most
  for (const std::string codec : {"none", "fp16", "int8"}) {
    INFO("codec " << codec);
    const auto job = cluster.dir() / ("job_traffic_" + codec + ".toml");
    test::write_text(job, job_text("name = \"sgd\"\nlr = 0.01", 1, 5, 1, "1f1b", false) +
                              "\n[compression]\nactivations = \"" + codec +
                              "\"\ngradients = \"" + codec + "\"\n");
    auto train = cluster.ravnest("train", job.string());
    INFO(train.out << train.err);
    REQUIRE(train.exit_code == 0);
    CHECK(train.out.find("bytes on the wire since the job was loaded") != std::string::npos);

    requester::Requester requester(requester::load_plan(cluster.plan_dir()),
                                 base::read_secret(cluster.secret_file()));
    const auto reports = requester.status();
    REQUIRE(reports.size() == 3);
    const auto& root = reports[0].status.traffic;
    const auto& stem = reports[1].status.traffic;
    const auto& leaf = reports[2].status.traffic;
    using K = wire::TrafficKind;
    // Each kind's messages: one a micro-batch each way, nothing over rings.
    CHECK(root[K::kActivations].messages_sent == kMicroBatches);
    CHECK(stem[K::kActivations].messages_received == kMicroBatches);
    CHECK(stem[K::kActivations].messages_sent == kMicroBatches);
    CHECK(leaf[K::kGradients].messages_sent == kMicroBatches);
    CHECK(root[K::kGradients].messages_received == kMicroBatches);
    CHECK(root[K::kGradients].bytes_sent == 0);
    CHECK(leaf[K::kActivations].bytes_sent == 0);
    for (const auto& r : reports) CHECK(r.status.traffic[K::kRings].bytes_sent == 0);
    CHECK(root[K::kOther].messages_sent >= kMicroBatches);  // the labels, to the leaf
    // Sender and receiver agree to the byte.
    CHECK(root[K::kActivations].bytes_sent == stem[K::kActivations].bytes_received);
    CHECK(stem[K::kActivations].bytes_sent == leaf[K::kActivations].bytes_received);
    CHECK(leaf[K::kGradients].bytes_sent == stem[K::kGradients].bytes_received);
    CHECK(stem[K::kGradients].bytes_sent == root[K::kGradients].bytes_received);
    CHECK(root[K::kOther].bytes_sent == leaf[K::kOther].bytes_received);
    // Root -> stem: stage 0's outputs, as the codec sends them; stem -> root: their gradients.
    const uint64_t per_micro_batch =
        codec == "none" ? values * 4
        : codec == "fp16" ? values * 2
                          : values + 4 * ((values + 255) / 256);
    const uint64_t payload = per_micro_batch * kMicroBatches;
    INFO("payload " << payload << ", activations sent " << root[K::kActivations].bytes_sent
                    << ", gradients received " << root[K::kGradients].bytes_received);
    CHECK(root[K::kActivations].bytes_sent >= payload);
    CHECK(root[K::kActivations].bytes_sent <= payload + kMicroBatches * kEnvelope);
    CHECK(root[K::kGradients].bytes_received >= payload);
    CHECK(root[K::kGradients].bytes_received <= payload + kMicroBatches * kEnvelope);
  }
  auto status = cluster.ravnest("status");
  INFO(status.out << status.err);
  CHECK(status.out.find("bytes on the wire since the job was loaded") != std::string::npos);
  CHECK(std::regex_search(status.out, std::regex("node_0 +[0-9.]+ kB / 0 B")));
}
