// Metrics files: CRC-32C against published vectors, TensorBoard event files read back by an
// independent reader (tests/python/read_tfevents.py: its own CRC and protobuf decoding) and by
// TensorBoard's own EventAccumulator when the venv has tensorboard, the CSV, and how
// MetricsFiles routes a job's events to clusters and the evaluator.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "libs/base/crc32c.h"
#include "libs/base/tensorboard_writer.h"
#include "libs/requester/metrics_csv.h"
#include "libs/requester/metrics_files.h"
#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

// The one event file in `dir`.
fs::path event_file(const fs::path& dir) {
  fs::path found;
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      found = entry.path();
      ++count;
    }
  }
  REQUIRE(count == 1);
  return found;
}

nlohmann::json read_events(const fs::path& file) {
  const auto run = test::run_command(test::python() + " " + test::source_dir() +
                                     "/tests/python/read_tfevents.py " + file.string());
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  return nlohmann::json::parse(run.out);
}

wire::NodeEvent event(wire::EventKind kind, int cluster, uint32_t epoch, uint64_t step, double loss,
                      uint64_t samples = 0, double accuracy = 0, double lr = std::nan("")) {
  wire::NodeEvent e;
  e.cluster = cluster;
  e.event.kind = kind;
  e.event.epoch = epoch;
  e.event.step = step;
  e.event.loss = loss;
  e.event.samples = samples;
  e.event.accuracy = accuracy;
  e.event.lr = lr;
  return e;
}

}  // namespace

TEST_CASE("crc32c: the published check values (RFC 3720 B.4, the iSCSI CRC)") {
  CHECK(base::crc32c("") == 0);
  CHECK(base::crc32c("123456789") == 0xE3069283u);
  CHECK(base::crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(base::crc32c(std::string(32, '\xFF')) == 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending += static_cast<char>(i);
    descending += static_cast<char>(31 - i);
  }
  CHECK(base::crc32c(ascending) == 0x46DD794Eu);
  CHECK(base::crc32c(descending) == 0x113FDB5Cu);
  // The mask TFRecord applies.
  const uint32_t crc = 0xE3069283u;
  CHECK(base::masked_crc32c("123456789") == ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST_CASE("TensorBoard event file: version first, then scalars, read back exactly") {
  test::TempDir dir;
  {
    base::TensorBoardWriter writer((dir / "run").string(), 1700000000.25);
    writer.add_scalar("train/loss", 1, 2.5, 1700000001.5);
    writer.add_scalar("train/lr", 1, 0.001, 1700000001.5);
    writer.add_scalar("val/loss", 300, 0.1, 1700000002.0);  // a step of two varint bytes
    writer.add_scalar("big", int64_t{1} << 40, -3.25, 1700000003.0);
  }
  const fs::path file = event_file(dir / "run");
  CHECK(file.filename().string().rfind("events.out.tfevents.1700000000.", 0) == 0);
  const auto events = read_events(file);
  REQUIRE(events.size() == 5);
  CHECK(events[0]["file_version"] == "brain.Event:2");
  CHECK(events[0]["wall_time"].get<double>() == 1700000000.25);
  CHECK(events[1]["tag"] == "train/loss");
  CHECK(events[1]["step"] == 1);
  CHECK(events[1]["value"].get<double>() == 2.5);
  CHECK(events[1]["wall_time"].get<double>() == 1700000001.5);
  CHECK(events[2]["value"].get<double>() == static_cast<double>(0.001f));  // a float, as TensorBoard keeps it
  CHECK(events[3]["step"] == 300);
  CHECK(events[4]["step"].get<int64_t>() == int64_t{1} << 40);
  CHECK(events[4]["value"].get<double>() == -3.25);

  // TensorBoard's own reader, where the venv has it (scripts/venv installs it).
  const char* venv = std::getenv("RAVNEST_VENV");
  const fs::path python = fs::path(venv ? venv : std::string(std::getenv("HOME")) + "/.cache/ravnest/venv-torch2") /
                          "bin/python";
  if (!fs::exists(python) ||
      test::run_command(python.string() + " -c 'import tensorboard'").exit_code != 0) {
    WARN("tensorboard is not installed in " << python << ": its reader is not tried");
    return;
  }
  const std::string script =
      "import json, sys\n"
      "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
      "a = EventAccumulator(sys.argv[1]); a.Reload()\n"
      "print(json.dumps({t: [[s.step, s.value] for s in a.Scalars(t)] for t in a.Tags()['scalars']}))\n";
  test::write_text(dir / "tb.py", script);
  const auto run = test::run_command(python.string() + " " + (dir / "tb.py").string() + " " +
                                     (dir / "run").string());
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto scalars = nlohmann::json::parse(run.out);
  CHECK(scalars["train/loss"] == nlohmann::json::parse("[[1, 2.5]]"));
  CHECK(scalars["val/loss"][0][0] == 300);
  CHECK(scalars["val/loss"][0][1].get<double>() == static_cast<double>(0.1f));
  CHECK(scalars["big"][0][0].get<int64_t>() == int64_t{1} << 40);
}

TEST_CASE("metrics CSV: a header once, rows appended, empty cells for what a row lacks") {
  test::TempDir dir;
  const auto path = (dir / "m.csv").string();
  requester::MetricsRow train;
  train.wall_time = 10.5;
  train.step = 3;
  train.epoch = 1;
  train.loss = 0.1;
  train.lr = 0.01;
  requester::MetricsRow validation;
  validation.wall_time = 11;
  validation.step = 4;
  validation.epoch = 1;
  validation.val_loss = 0.25;
  { requester::MetricsCsv(path).append(train); }
  { requester::MetricsCsv(path).append(validation); }  // reopened: no second header
  CHECK(test::read_text(path) ==
        "wall_time,step,epoch,loss,lr,val_loss,val_accuracy\n"
        "10.5,3,1,0.10000000000000001,0.01,,\n"
        "11,4,1,,,0.25,\n");
}

TEST_CASE("MetricsFiles: each cluster and the evaluator in its own folder, steps in batches") {
  test::TempDir dir;
  requester::MetricsFiles files((dir / "job_1").string(), /*update_frequency=*/2);
  using wire::EventKind;
  files.record(event(EventKind::kStep, 0, 0, 0, 1.5, /*samples=*/1, 0, 0.04), 100);
  files.record(event(EventKind::kStep, 1, 0, 0, 1.25, 1), 100);  // no lr known
  files.record(event(EventKind::kStep, 0, 0, 1, 1.0, 2, 0, 0.02), 101);
  files.record(event(EventKind::kValidation, 0, 0, /*updates=*/1, 0.75, 0, 0.5), 102);
  files.record(event(EventKind::kValidation, 1, 0, 1, 0.5, 0, std::nan("")), 102);
  files.record(event(EventKind::kValidation, -1, 0, 7, 0.25, 0, 0.875), 103);
  files.record(event(EventKind::kFinished, 0, 0, 0, 0), 104);  // not a metric

  CHECK(test::read_text(dir / "job_1/cluster_0/metrics.csv") ==
        "wall_time,step,epoch,loss,lr,val_loss,val_accuracy\n"
        "100,1,0,1.5,0.040000000000000001,,\n"
        "101,2,0,1,0.02,,\n"
        "102,2,0,,,0.75,0.5\n");
  CHECK(test::read_text(dir / "job_1/cluster_1/metrics.csv") ==
        "wall_time,step,epoch,loss,lr,val_loss,val_accuracy\n"
        "100,1,0,1.25,,,\n"
        "102,2,0,,,0.5,\n");
  CHECK(test::read_text(dir / "job_1/evaluator/metrics.csv") ==
        "wall_time,step,epoch,loss,lr,val_loss,val_accuracy\n"
        "103,7,0,,,0.25,0.875\n");

  const auto events = read_events(event_file(dir / "job_1/cluster_0"));
  REQUIRE(events.size() == 7);  // version, 2 x (loss, lr), val loss and accuracy
  CHECK(events[1]["tag"] == "train/loss");
  CHECK(events[2]["tag"] == "train/lr");
  CHECK(events[2]["value"].get<double>() == static_cast<double>(0.04f));
  CHECK(events[5]["tag"] == "val/loss");
  CHECK(events[5]["step"] == 2);
  CHECK(events[6]["tag"] == "val/accuracy");
  const auto evaluator = read_events(event_file(dir / "job_1/evaluator"));
  REQUIRE(evaluator.size() == 3);
  CHECK(evaluator[1]["step"] == 7);
}
