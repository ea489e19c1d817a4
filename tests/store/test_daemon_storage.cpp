// What a daemon writes and keeps, in one process: NodeStore (shipped files by bundle, paths of a
// job, temporaries a dead daemon left), the last job's outcome, losses.txt, trained stages
// saved atomically (a size limit standing in for a full disk), and failures as one line.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>

#include "libs/base/config_error.h"
#include "libs/base/sha256.h"
#include "libs/store/last_job.h"
#include "libs/worker/pipeline/leaf_metrics.h"
#include "libs/store/node_store.h"
#include "libs/daemon/rpc/thread_bridge.h"
#include "libs/torch_support/module_file.h"
#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

// A stored stage for `node`: the metadata is all NodeStore reads.
void store_stage(store::NodeStore& store, const std::string& node, int position, bool leaf) {
  config::NodeMetadata meta;
  meta.name = node;
  meta.node_id = 0;
  meta.position = position;
  meta.returns_model_output = leaf;
  meta.pipeline = {0};
  const std::string stage = "not really TorchScript";
  meta.stage_sha256 = base::sha256_hex(stage);
  store.store_stage(config::to_json(meta), stage, meta.stage_sha256);
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& e) {
    return e.what();
  }
  FAIL("expected an error");
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string kBundle(64, 'a');

class NullPort final : public worker::WorkerPort {
 public:
  void send(wire::TransferMessage) override {}
  void event(const wire::ProgressEventData& e) override { events.push_back(e); }
  void defer(std::function<void()>) override {}
  void reduce_rings(uint64_t, std::vector<RingWork>&, bool) override {}
  std::vector<wire::ProgressEventData> events;
};

// Lowers this process's file size limit (soft only, so it can be raised again) while alive;
// SIGXFSZ is ignored meanwhile, so a write past the limit fails with EFBIG.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previous_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lower = saved_;
    lower.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lower);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, previous_);
  }

 private:
  rlimit saved_{};
  sighandler_t previous_;
};

}  // namespace

TEST_CASE("NodeStore keeps shipped files by bundle and finds a job's paths there",
          "[daemon][store]") {
  test::TempDir dir;
  store::NodeStore store(dir / "data", "node_0");
  store_stage(store, "node_0", 0, false);

  const auto [where, file] = store.shipped_file(kBundle + "/MNIST/raw/train-images-idx3-ubyte");
  CHECK(where == dir / "data" / "datasets" / kBundle / "MNIST" / "raw");
  CHECK(file == "train-images-idx3-ubyte");
  CHECK(fs::is_directory(where));
  for (const char* bad : {"d.csv", "abc/d.csv", "../d.csv", "", "/etc/passwd"}) {
    INFO(bad);
    CHECK_THROWS_AS(store.shipped_file(bad), base::ConfigError);
  }
  CHECK_THROWS_AS(store.shipped_file(kBundle + "/../../x"), base::ConfigError);
  CHECK_THROWS_AS(store.shipped_file(kBundle + "/"), base::ConfigError);
  fs::create_directories(dir / "elsewhere");
  fs::create_directory_symlink(dir / "elsewhere", dir / "data" / "datasets" / std::string(64, 'b'));
  CHECK(contains(error_of([&] { store.shipped_file(std::string(64, 'b') + "/d.csv"); }),
                 "is a symlink"));

  // The root reads data.train and data.validation where they were shipped; two files of the
  // same name stay apart.
  const std::string other(64, 'c');
  test::write_text(dir / "data" / "datasets" / kBundle / "d.csv", "train");
  fs::create_directories(dir / "data" / "datasets" / other);
  test::write_text(dir / "data" / "datasets" / other / "d.csv", "validation");
  config::JobSpec job;
  job.data.train = {"s1/d.csv", "/requester/s1/d.csv"};
  job.data.validation = {"s2/d.csv", "/requester/s2/d.csv"};
  const auto located = store.locate_shipped(
      job, {{"data.train", kBundle + "/d.csv"}, {"data.validation", other + "/d.csv"}});
  CHECK(located.data.train.resolved == (dir / "data" / "datasets" / kBundle / "d.csv").string());
  CHECK(located.data.validation.resolved ==
        (dir / "data" / "datasets" / other / "d.csv").string());
  CHECK(contains(error_of([&] { store.locate_shipped(job, {{"data.train", kBundle + "/d.csv"}}); }),
                 "data.validation (s2/d.csv) was not shipped to node_0"));
  CHECK(contains(error_of([&] {
                   store.locate_shipped(job, {{"data.train", kBundle + "/e.csv"},
                                              {"data.validation", other + "/d.csv"}});
                 }),
                 "its files did not arrive"));
  CHECK_THROWS_AS(store.locate_shipped(job, {{"data.train", "../../etc/passwd"},
                                             {"data.validation", other + "/d.csv"}}),
                  base::ConfigError);

  // A stem reads none of them: nothing the requester's machine names is opened.
  store::NodeStore stem_store(dir / "stem", "node_1");
  store_stage(stem_store, "node_1", 1, false);
  const auto stem = stem_store.locate_shipped(job, {});
  CHECK(stem.data.train.resolved != job.data.train.resolved);
  CHECK_FALSE(fs::exists(stem.data.train.resolved));
}

TEST_CASE("NodeStore removes what unfinished writes left behind", "[daemon][store]") {
  test::TempDir dir;
  {
    store::NodeStore store(dir / "data", "node_0");
    store_stage(store, "node_0", 0, false);
  }
  const auto data = dir / "data";
  fs::create_directories(data / "datasets" / kBundle);
  for (const char* stale : {"trained.pt.tmp", "trained.pt.tmp.123.4", "losses.txt.tmp.9.0"}) {
    test::write_text(data / stale, "half");
  }
  test::write_text(data / "datasets" / kBundle / ".d.csv.AbC123.part", "half");
  test::write_text(data / "datasets" / kBundle / "d.tmp", "a shipped file named so");
  test::write_text(data / "trained.pt", "whole");
  store::NodeStore reopened(data, "node_0");
  CHECK_FALSE(fs::exists(data / "trained.pt.tmp"));
  CHECK_FALSE(fs::exists(data / "trained.pt.tmp.123.4"));
  CHECK_FALSE(fs::exists(data / "losses.txt.tmp.9.0"));
  CHECK_FALSE(fs::exists(data / "datasets" / kBundle / ".d.csv.AbC123.part"));
  CHECK(fs::exists(data / "datasets" / kBundle / "d.tmp"));
  CHECK(fs::exists(data / "trained.pt"));
  CHECK(reopened.has_stage());
}

TEST_CASE("one NodeStore per data directory at a time", "[daemon][store][lock]") {
  // Issue 28's probe: a second ravnestd started on a directory in use, and its start-up cleanup
  // deleted a temporary named after the live daemon's pid.
  test::TempDir dir;
  const auto data = dir / "data";
  {
    store::NodeStore first(data, "node_0");
    test::write_text(data / ("trained.pt.tmp." + std::to_string(::getpid()) + ".1"), "being written");
    CHECK_THROWS_WITH(store::NodeStore(data, "node_0"),
                      "data directory " + data.string() + " is in use by another ravnestd (pid " +
                          std::to_string(::getpid()) + "); give each daemon its own --data-dir");
    CHECK(fs::exists(data / ("trained.pt.tmp." + std::to_string(::getpid()) + ".1")));
    store::NodeStore other(dir / "other", "node_1");  // another directory: no conflict
    // Issue 43: with the lock file deleted, a second daemon locked a new one.
    fs::remove(data / "lock");
    CHECK_THROWS_WITH(store::NodeStore(data, "node_0"),
                      "data directory " + data.string() + " is in use by another ravnestd (its "
                      "lock file was deleted or replaced); give each daemon its own --data-dir");
  }
  store::NodeStore again(data, "node_0");  // released with the first
  CHECK(again.node_name() == "node_0");
}

TEST_CASE("the last job's outcome survives in a file; a new stage forgets it", "[daemon][store]") {
  test::TempDir dir;
  store::NodeStore store(dir / "data", "node_0");
  CHECK_FALSE(store::load_last_job(store.last_job_path()).has_value());
  store::save_last_job(store.last_job_path(),
                         {42, store::LastJob::Outcome::kFailed, "node_1 stopped answering"});
  auto job = store::load_last_job(store.last_job_path());
  REQUIRE(job.has_value());
  CHECK(job->job_id == 42);
  CHECK(job->outcome == store::LastJob::Outcome::kFailed);
  CHECK(job->error == "node_1 stopped answering");
  store::save_last_job(store.last_job_path(), {43, store::LastJob::Outcome::kFinished, ""});
  CHECK(store::load_last_job(store.last_job_path())->outcome ==
        store::LastJob::Outcome::kFinished);
  test::write_text(store.last_job_path(), "{\"job_id\": 1, \"outcome\": \"bored\"}");
  CHECK(contains(error_of([&] { store::load_last_job(store.last_job_path()); }),
                 "last_job.json: unreadable: unknown outcome \"bored\""));
  store_stage(store, "node_0", 0, true);
  CHECK_FALSE(fs::exists(store.last_job_path()));
}

TEST_CASE("losses.txt is replaced, never written through a symlink", "[daemon][store]") {
  test::TempDir dir;
  test::write_text(dir / "outside.txt", "precious\n");
  fs::create_symlink(dir / "outside.txt", dir / "losses.txt");
  NullPort port;
  worker::LeafMetrics metrics((dir / "losses.txt").string(), port);
  CHECK_FALSE(fs::is_symlink(dir / "losses.txt"));
  wire::MicroBatchTag batch;
  batch.samples = batch.batch_samples = 4;
  batch.count = 1;
  metrics.add_training(batch, 0.5, 1.0);
  metrics.batch_finished(batch, 1);
  batch.step = 1;
  batch.last = true;
  metrics.add_training(batch, 0.25, 1.0);
  metrics.batch_finished(batch, 2);
  CHECK(test::read_text(dir / "losses.txt") == "0.5\n0.25\n");
  CHECK(test::read_text(dir / "outside.txt") == "precious\n");
  CHECK(port.events.size() == 2);
}

TEST_CASE("a trained stage that cannot be written fails in one line and leaves nothing",
          "[daemon][store]") {
  test::TempDir dir;
  torch::jit::Module module("m");
  module.register_parameter("w", at::randn({4096}), false);
  const std::string path = (dir / "trained.pt").string();
  test::write_text(path, "the previous one");
  std::string error;
  {
    FileSizeLimit limit(2000);  // below the module's size: a disk that is full
    error = error_of([&] { torch_support::save_module_atomically(module, path); });
  }
  CHECK(error == path + ": cannot write (write): File too large");
  CHECK(test::read_text(path) == "the previous one");
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    (void)entry;
    ++files;
  }
  CHECK(files == 1);  // no temporary left
  // A symlink at the target is replaced, not followed.
  test::write_text(dir / "outside.pt", "keep");
  fs::remove(path);
  fs::create_symlink(dir / "outside.pt", path);
  torch_support::save_module_atomically(module, path);
  CHECK_FALSE(fs::is_symlink(path));
  CHECK(test::read_text(dir / "outside.pt") == "keep");
}

TEST_CASE("a failure crossing to the requester is its message alone", "[daemon][errors]") {
  CHECK(std::string(daemon::rejection(std::runtime_error("busy: a job is running"))
                        .getDescription()
                        .cStr()) == "busy: a job is running");
  try {
    at::ones({2}).view({3});
    FAIL("view should have thrown");
  } catch (const std::exception& e) {
    const std::string text = daemon::rejection(e).getDescription().cStr();
    INFO(text);
    CHECK(contains(text, "shape '[3]' is invalid for input of size 2"));
    CHECK_FALSE(contains(text, "frame #"));
    CHECK(text.find('\n') == std::string::npos);
  }
}

TEST_CASE("new metadata for the stored stage replaces metadata.json alone, or nothing",
          "[daemon][store]") {
  test::TempDir dir;
  store::NodeStore store(dir / "data", "node_0");
  config::NodeMetadata meta;
  meta.name = "node_0";
  meta.pipeline = {0};
  meta.stage_sha256 = base::sha256_hex("not really TorchScript");
  auto replaced = meta;
  replaced.cluster_count = 3;
  // No stage yet: refused.
  CHECK(contains(error_of([&] { store.replace_metadata(config::to_json(replaced)); }),
                 "no stage stored: push the stage"));
  store_stage(store, "node_0", 0, false);
  store::save_last_job(store.last_job_path(), {7, store::LastJob::Outcome::kFinished, ""});
  const std::string stage_before = test::read_text(store.stage_path());
  store.replace_metadata(config::to_json(replaced));
  CHECK(store.metadata().cluster_count == 3);
  CHECK(test::read_text(store.stage_path()) == stage_before);
  CHECK(store::load_last_job(store.last_job_path())->job_id == 7);  // the last job stays
  // Another stage's metadata, another node's, or one the budget refuses: nothing changes.
  auto other_stage = replaced;
  other_stage.cluster_count = 4;
  other_stage.stage_sha256 = base::sha256_hex("another stage");
  CHECK(contains(error_of([&] { store.replace_metadata(config::to_json(other_stage)); }),
                 ": push the stage"));
  auto other_node = replaced;
  other_node.cluster_count = 4;
  other_node.name = "node_1";
  CHECK(contains(error_of([&] { store.replace_metadata(config::to_json(other_node)); }),
                 "this daemon serves node_0"));
  auto refused = replaced;
  refused.cluster_count = 4;
  CHECK(contains(error_of([&] {
                   store.replace_metadata(config::to_json(refused), [](const auto&) {
                     throw std::runtime_error("over the budget");
                   });
                 }),
                 "over the budget"));
  CHECK(store.metadata().cluster_count == 3);
  // A stage.pt of another size than pushed (truncated): refused, naming it.
  test::write_text(store.stage_path(), "short");
  CHECK(contains(error_of([&] { store.replace_metadata(config::to_json(other_node)); }),
                 "push the stage"));
}
