// `ravnest clusterize` end to end, through the binary: a good run writes a plan that chains back
// to the model; every bad input is one line on stderr naming the file and field, a non-zero exit,
// and nothing written (an existing plan stays as it was).
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "libs/config/plan/node_metadata.h"
#include "libs/config/pool/node_pool.h"
#include "ravnest_version.h"
#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

std::string ravnest_binary() { return test::binary_dir() + "/apps/ravnest/ravnest"; }
std::string model(const std::string& name) { return test::models_dir() + "/" + name + ".pt"; }

const char* kPool3 = R"({
  "0": {"IP": "127.0.0.1:18080", "benchmarks": {"ram": 8, "bandwidth": 20}},
  "1": {"IP": "127.0.0.1:18081", "benchmarks": {"ram": 8, "bandwidth": 10}},
  "2": {"IP": "127.0.0.1:18082", "benchmarks": {"ram": 8, "bandwidth": 10}}
})";

test::CommandResult clusterize(const std::string& args) {
  return test::run_command(ravnest_binary() + " clusterize " + args);
}

// One line on stderr, naming `needle`, a non-zero exit.
void expect_clear_error(const test::CommandResult& result, const std::string& needle) {
  INFO("stdout: " << result.out << "\nstderr: " << result.err);
  CHECK(result.exit_code != 0);
  CHECK(result.err.find(needle) != std::string::npos);
  CHECK(result.err.rfind("ravnest: error: ", 0) == 0);
  CHECK(std::count(result.err.begin(), result.err.end(), '\n') == 1);
}

// Runs `script` (Python that saves a TorchScript model to sys.argv[1]) and returns the model's
// path, dir/NAME.pt.
std::string saved_model(const fs::path& dir, const std::string& name, const std::string& script) {
  const fs::path source = dir / (name + ".py");
  const fs::path saved = dir / (name + ".pt");
  test::write_text(source, script);
  auto made = test::run_command(test::python() + " " + source.string() + " " + saved.string());
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  return saved.string();
}

}  // namespace

TEST_CASE("clusterize writes a plan that verifies", "[cli]") {
  test::TempDir dir;
  test::write_text(dir / "pool.json", kPool3);
  auto result = clusterize(model("small_cnn") + " --nodes " + (dir / "pool.json").string() +
                           " --example-input 4x1x8x8:float32 --verify --out " +
                           (dir / "out").string());
  INFO(result.out << result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("Node(0, Cluster(") != std::string::npos);
  CHECK(result.out.find("self.IP(127.0.0.1:18080)") != std::string::npos);
  CHECK(result.out.find("verify: largest absolute difference") != std::string::npos);
  CHECK(result.out.find("verify cluster 0 over 2 micro-batches: largest absolute difference") !=
        std::string::npos);
  // Piped, clusterize says when each phase starts and ends (issue 26), in order.
  size_t at = 0;
  for (const char* line : {"clusterize: load started", "clusterize: profile done in",
                           "clusterize: memory probes done in", "clusterize: plan done in",
                           "clusterize: cut done in", "clusterize: save done in",
                           "clusterize: verify started", "clusterize: verify done in"}) {
    INFO(line);
    at = result.out.find(line, at);
    CHECK(at != std::string::npos);
  }
  CHECK(result.out.find("\033[") == std::string::npos);  // no terminal codes in a file
  CHECK(fs::exists(dir / "out/plan.json"));
  for (int id = 0; id < 3; ++id) {
    auto meta = config::load_node_metadata(
        (dir / ("out/nodes/node_" + std::to_string(id) + ".json")).string());
    CHECK(fs::exists(dir / "out" / meta.stage_file));
  }
  // No temporary directory is left behind.
  for (const auto& entry : fs::directory_iterator(dir / "out")) {
    CHECK(entry.path().filename().string().find("tmp") == std::string::npos);
  }
}

TEST_CASE("clusterize --verify of a BatchNorm model on an example batch of 2", "[cli]") {
  // Issue 28: Inception v3 with an example batch of 2 was refused ("the whole model fails on
  // micro-batch 0": BatchNorm cannot train on one value per channel, as after its pooling here),
  // though it trains on the daemons with one micro-batch. The example is checked whole; the
  // split into micro-batches of 1 says why it is skipped.
  test::TempDir dir;
  test::write_text(dir / "pool.json", kPool3);
  const std::string bn = saved_model(dir.path(), "bn", R"(import sys, torch
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm1d(4)
        self.fc = nn.Linear(4, 3)
    def forward(self, x):
        h = nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1).flatten(1)
        return self.fc(torch.relu(self.bn(h)))
torch.jit.script(Net()).save(sys.argv[1])
)");
  auto result = clusterize(bn + " --nodes " + (dir / "pool.json").string() +
                           " --example-input 2x1x8x8:float32 --verify --no-memory-probe --out " +
                           (dir / "out").string());
  INFO(result.out << result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("verify: largest absolute difference") != std::string::npos);
  CHECK(result.out.find("verify cluster 0 over 2 micro-batches: skipped, the whole model cannot "
                        "train on micro-batches of 1 sample(s) (") != std::string::npos);
  CHECK(fs::exists(dir / "out/plan.json"));
}

TEST_CASE("clusterize reads the pool as TOML too", "[cli]") {
  test::TempDir dir;
  test::write_text(dir / "pool.toml", R"(
[0]
IP = "127.0.0.1:18080"
[0.benchmarks]
ram = 8
bandwidth = 20
)");
  auto result = clusterize(model("two_inputs") + " --nodes " + (dir / "pool.toml").string() +
                           " --example-input 4x1x8x8 --example-input 4x6:float32 --verify --out " +
                           (dir / "out").string());
  INFO(result.out << result.err);
  CHECK(result.exit_code == 0);
  CHECK(fs::exists(dir / "out/nodes/node_0.json"));
}

TEST_CASE("clusterize refuses bad input clearly and writes nothing", "[cli][errors]") {
  test::TempDir dir;
  const auto pool = (dir / "pool.json").string();
  test::write_text(pool, kPool3);
  const auto out = (dir / "out").string();
  const std::string small = model("small_cnn");
  const std::string good_input = " --example-input 4x1x8x8:float32 --out " + out;

  SECTION("missing model") {
    expect_clear_error(clusterize((dir / "nope.pt").string() + " --nodes " + pool + good_input),
                       "nope.pt");
  }
  SECTION("--device cuda: no GPU here, or a pool without gpu_memory; no device at all") {
    // Without a GPU (CI) the probes cannot run; with one, the pool declares no GPU memory.
    const auto result = clusterize(small + " --nodes " + pool + good_input + " --device cuda");
    const bool no_gpu = result.err.find("the memory probes run on this machine: device: \"cuda\" "
                                        "asks for CUDA") != std::string::npos;
    expect_clear_error(result, no_gpu ? "ravnest clusterize --device cuda"
                                      : "benchmarks.gpu_memory (GB) is needed to plan for "
                                        "--device cuda");
    expect_clear_error(clusterize(small + " --nodes " + pool + good_input + " --device tpu"),
                       "\"tpu\" is not cpu, cuda or cuda:N");
  }
  SECTION("not TorchScript") {
    test::write_text(dir / "text.pt", "hello");
    expect_clear_error(clusterize((dir / "text.pt").string() + " --nodes " + pool + good_input),
                       "not a TorchScript model");
  }
  SECTION("forward fails on the example input") {
    auto result = clusterize(small + " --nodes " + pool + " --example-input 4x3x8x8 --out " + out);
    expect_clear_error(result, "forward fails on the example input");
    CHECK(result.err.find("channels") != std::string::npos);  // torch's own message
  }
  SECTION("wrong number of example inputs") {
    expect_clear_error(clusterize(model("two_inputs") + " --nodes " + pool + good_input),
                       "forward takes 2 input(s) (image, features)");
  }
  SECTION("an input that is no tensor") {
    const std::string scaled = saved_model(dir.path(), "scaled", R"(import sys, torch
from torch import nn
class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x, times: int):
        return self.fc(x) * times
torch.jit.script(Scaled()).save(sys.argv[1])
)");
    expect_clear_error(clusterize(scaled + " --nodes " + pool +
                                  " --example-input 4x4 4x4 --out " + out),
                       "forward's input 'times' is int; every input must be a tensor");
  }
  SECTION("a layout of stages or clusters not a whole number of 1 or more") {
    // Issue 43: CLI11's PositiveNumber named its range as a 309-digit double.
    for (const std::string flag : {" --stages -1", " --clusters 0", " --stages 2.5"}) {
      const auto result = clusterize(small + " --nodes " + pool + good_input + flag);
      INFO(flag << ": " << result.err);
      CHECK(result.exit_code != 0);
      CHECK(result.err.find(flag.substr(1, flag.find(' ', 1) - 1) +
                            ": must be a whole number, 1 or more") != std::string::npos);
      CHECK(result.err.size() < 200);
    }
  }
  SECTION("malformed example input") {
    expect_clear_error(
        clusterize(small + " --nodes " + pool + " --example-input 4xAx8 --out " + out), "4xAx8");
  }
  SECTION("an example input too large to make") {
    expect_clear_error(clusterize(small + " --nodes " + pool +
                                  " --example-input 99999999999x1x8x8 --out " + out),
                       "--example-input '99999999999x1x8x8': 25599999999744 bytes, more than "
                       "an example batch may take (4 GiB)");
    expect_clear_error(clusterize(small + " --nodes " + pool +
                                  " --example-input 4611686018427387904x4 --out " + out),
                       "--example-input '4611686018427387904x4': the tensor's size overflows");
  }
  SECTION("malformed JSON") {
    test::write_text(dir / "bad.json", R"({"0": {"IP": "127.0.0.1:1", )");
    expect_clear_error(clusterize(small + " --nodes " + (dir / "bad.json").string() + good_input),
                       "bad.json");
  }
  SECTION("malformed TOML") {
    test::write_text(dir / "bad.toml", "[0\nIP = ");
    expect_clear_error(clusterize(small + " --nodes " + (dir / "bad.toml").string() + good_input),
                       "bad.toml");
  }
  SECTION("missing ram") {
    test::write_text(dir / "p.json", R"({"0": {"IP": "127.0.0.1:1", "benchmarks": {"bandwidth": 1}}})");
    expect_clear_error(clusterize(small + " --nodes " + (dir / "p.json").string() + good_input),
                       "ram");
  }
  SECTION("missing IP") {
    test::write_text(dir / "p.json", R"({"0": {"benchmarks": {"ram": 8, "bandwidth": 1}}})");
    expect_clear_error(clusterize(small + " --nodes " + (dir / "p.json").string() + good_input),
                       "IP");
  }
  SECTION("duplicate addresses") {
    test::write_text(dir / "p.json", R"({
      "0": {"IP": "127.0.0.1:5", "benchmarks": {"ram": 8, "bandwidth": 1}},
      "1": {"IP": "127.0.0.1:5", "benchmarks": {"ram": 8, "bandwidth": 1}}})");
    expect_clear_error(clusterize(small + " --nodes " + (dir / "p.json").string() + good_input),
                       "127.0.0.1:5");
  }
  SECTION("zero and negative ram") {
    for (const char* ram : {"0", "-4"}) {
      test::write_text(dir / "p.json", std::string(R"({"0": {"IP": "127.0.0.1:5", "benchmarks": {"ram": )") +
                                           ram + R"(, "bandwidth": 1}}})");
      expect_clear_error(clusterize(small + " --nodes " + (dir / "p.json").string() + good_input),
                         "ram");
    }
  }
  SECTION("a pool too small for the model") {
    test::write_text(dir / "p.json", R"({
      "0": {"IP": "127.0.0.1:5", "benchmarks": {"ram": 0.00001, "bandwidth": 1}},
      "1": {"IP": "127.0.0.1:6", "benchmarks": {"ram": 0.00001, "bandwidth": 1}}})");
    auto result = clusterize(model("resnet18") + " --nodes " + (dir / "p.json").string() +
                             " --example-input 2x3x64x64 --out " + out);
    expect_clear_error(result, "the pool has");
  }
  SECTION("a model that micro-batches in GPipe order would break") {
    // Bumping `gain` in place overwrites what the previous micro-batch's backward needs: fine
    // on the whole batch, fatal once two micro-batches are in flight.
    const std::string bumps = saved_model(dir.path(), "bumps", R"(import sys, torch
from torch import nn
class Bumps(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 4)
        self.fc2 = nn.Linear(4, 4)
        self.register_buffer("gain", torch.ones(4))
    def forward(self, x):
        h = torch.relu(self.fc1(x))
        self.gain.add_(1.0)
        return self.fc2(h * self.gain)
torch.jit.script(Bumps()).save(sys.argv[1])
)");
    auto result = clusterize(bumps + " --nodes " + pool +
                             " --example-input 4x4:float32 --verify --out " + out);
    expect_clear_error(result, "verify failed for cluster 0 over 2 micro-batches: the chain's "
                               "backward of micro-batch 0 fails");
    CHECK(result.out.find("verify cluster 0: largest absolute difference 0.0") !=
          std::string::npos);
  }
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("a model scripted by PyTorch 2.x: cut by the 2.x build, refused in one line by 1.13",
          "[cli][errors][torch2]") {
  // tests/models/fixtures/sdpa_torch2.pt calls aten::scaled_dot_product_attention, which 1.13
  // does not know (tests/models/fixtures/make_sdpa_torch2.py wrote it).
  test::TempDir dir;
  const auto pool = (dir / "pool.json").string();
  test::write_text(pool, kPool3);
  const auto out = (dir / "out").string();
  const auto version = test::run_command(ravnest_binary() + " --version");
  const std::string fixture = test::source_dir() + "/tests/models/fixtures/sdpa_torch2.pt";
  auto result = clusterize(fixture + " --nodes " + pool +
                           " --example-input 2x5x8:float32 --verify --out " + out);
  if (version.out.find("LibTorch 1.") != std::string::npos) {
    expect_clear_error(result, "sdpa_torch2.pt: written by PyTorch 2.x, which this build's "
                               "LibTorch 1.13");
    CHECK(result.err.find("scaled_dot_product_attention") != std::string::npos);
    CHECK(result.err.find("build ravnest against your PyTorch") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  } else {
    INFO(result.out << result.err);
    CHECK(result.exit_code == 0);
    CHECK(fs::exists(fs::path(out) / "plan.json"));
  }
}

TEST_CASE("a failed clusterize leaves the previous plan untouched", "[cli][errors]") {
  test::TempDir dir;
  test::write_text(dir / "pool.json", kPool3);
  const auto out = (dir / "out").string();
  auto first = clusterize(model("small_cnn") + " --nodes " + (dir / "pool.json").string() +
                          " --example-input 4x1x8x8 --out " + out);
  REQUIRE(first.exit_code == 0);
  const auto plan_before = test::read_text(dir / "out/plan.json");
  const auto node_before = test::read_text(dir / "out/nodes/node_0.json");
  auto second = clusterize(model("small_cnn") + " --nodes " + (dir / "pool.json").string() +
                           " --example-input 4x2x8x8 --out " + out);
  CHECK(second.exit_code != 0);
  CHECK(test::read_text(dir / "out/plan.json") == plan_before);
  CHECK(test::read_text(dir / "out/nodes/node_0.json") == node_before);
  CHECK(std::distance(fs::directory_iterator(dir / "out"), fs::directory_iterator{}) == 3);
}

TEST_CASE("clusterize --mode ps writes servers, workers and an evaluator", "[cli][ps]") {
  test::TempDir dir;
  const auto pool = (dir / "pool.json").string();
  // Node 3 has the widest link (the server); node 1 the fewest gflops (the evaluator).
  test::write_text(pool, R"({
  "0": {"IP": "127.0.0.1:18080", "benchmarks": {"ram": 8, "bandwidth": 100, "gflops": 10}},
  "1": {"IP": "127.0.0.1:18081", "benchmarks": {"ram": 8, "bandwidth": 100, "gflops": 2}},
  "2": {"IP": "127.0.0.1:18082", "benchmarks": {"ram": 8, "bandwidth": 100, "gflops": 10}},
  "3": {"IP": "127.0.0.1:18083", "benchmarks": {"ram": 8, "bandwidth": 1000, "gflops": 10}},
  "4": {"IP": "127.0.0.1:18084", "benchmarks": {"ram": 8, "bandwidth": 100, "gflops": 10}}
})");
  const auto out = dir / "out";
  auto result = clusterize(model("small_cnn") + " --nodes " + pool +
                           " --example-input 4x1x8x8 --mode ps --evaluator --verify --out " +
                           out.string());
  INFO(result.out << result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("1 server(s), 3 worker(s), an evaluator") != std::string::npos);
  std::map<int, config::NodeMetadata> metas;
  for (int id = 0; id < 5; ++id) {
    metas[id] = config::load_node_metadata((out / ("nodes/node_" + std::to_string(id) + ".json")).string());
    CHECK(fs::exists(out / metas[id].stage_file));
  }
  CHECK(metas[3].role == config::Role::kServer);
  CHECK(metas[1].role == config::Role::kEvaluator);
  std::vector<int> workers;
  for (int id : {0, 2, 4}) {
    CHECK(metas[id].role == config::Role::kWorker);
    workers.push_back(metas[id].cluster);
  }
  CHECK(workers == std::vector<int>{0, 1, 2});
  const auto& ps = metas[0].parameter_server;
  REQUIRE(ps.servers.size() == 1);
  CHECK(ps.servers[0].node == 3);
  CHECK(ps.servers[0].tensors == metas[3].parameters);  // one server holds the whole state
  REQUIRE(ps.evaluator);
  CHECK(ps.evaluator->node == 1);
  const std::string plan = test::read_text(out / "plan.json");
  CHECK(plan.find("\"parameter_server\"") != std::string::npos);

  SECTION("two servers share the state") {
    auto two = clusterize(model("small_cnn") + " --nodes " + pool +
                          " --example-input 4x1x8x8 --mode ps --servers 2 --out " + out.string());
    INFO(two.out << two.err);
    REQUIRE(two.exit_code == 0);
    const auto meta = config::load_node_metadata((out / "nodes/node_3.json").string());
    REQUIRE(meta.parameter_server.servers.size() == 2);
    size_t held = 0;
    for (const auto& s : meta.parameter_server.servers) held += s.tensors.size();
    CHECK(held == meta.parameters.size());
    CHECK_FALSE(meta.parameter_server.evaluator);
  }
  SECTION("bad requests are one line and leave the plan as it was") {
    expect_clear_error(clusterize(model("small_cnn") + " --nodes " + pool +
                                  " --example-input 4x1x8x8 --mode ps --servers 4 --evaluator --out " +
                                  out.string()),
                       "the pool has 5");
    expect_clear_error(clusterize(model("small_cnn") + " --nodes " + pool +
                                  " --example-input 4x1x8x8 --servers 2 --out " + out.string()),
                       "--mode ps");
    expect_clear_error(clusterize(model("small_cnn") + " --nodes " + pool +
                                  " --example-input 4x1x8x8 --mode sharded --out " + out.string()),
                       "--mode");
    expect_clear_error(clusterize(model("tied") + " --nodes " + pool +
                                  " --example-input 4x7:int64:50 --mode ps --out " + out.string()),
                       "tied weights");
    CHECK(test::read_text(out / "plan.json") == plan);
  }
}

TEST_CASE("clusterize --mode hybrid checks the tables it puts on servers", "[cli][hybrid]") {
  test::TempDir dir;
  const auto pool = (dir / "pool.json").string();
  test::write_text(pool, kPool3);
  const auto out = dir / "out";
  // causal_lm's token embedding is looked up straight from the model's input: it can be served.
  auto result = clusterize(model("causal_lm") + " --nodes " + pool +
                           " --example-input 4x8:int64:40 --mode hybrid --on-server tok --out " +
                           out.string());
  INFO(result.out << result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("1 server(s), 2 trainer(s)") != std::string::npos);
  const auto server = config::load_node_metadata((out / "nodes/node_0.json").string());
  CHECK(server.role == config::Role::kServer);  // the widest link
  REQUIRE(server.parameter_server.sparse_tables.size() == 1);
  CHECK(server.parameter_server.sparse_tables[0].weight == "tok.weight");
  CHECK(server.parameter_server.sparse_tables[0].index_input == 0);
  CHECK(server.parameter_server.sparse_tables[0].shape == std::vector<int64_t>{40, 16});
  const auto trainer = config::load_node_metadata((out / "nodes/node_1.json").string());
  CHECK(trainer.role == config::Role::kWorker);
  CHECK(std::find(trainer.parameters.begin(), trainer.parameters.end(), "tok.weight") ==
        trainer.parameters.end());
  CHECK_FALSE(trainer.rings.empty());  // the dense part averages between the trainers
  const std::string plan = test::read_text(out / "plan.json");
  CHECK(plan.find("\"mode\": \"hybrid\"") != std::string::npos);

  const std::string tied = model("tied") + " --nodes " + pool + " --example-input 4x7:int64:50 ";
  expect_clear_error(clusterize(tied + "--mode hybrid --on-server embedding --out " + out.string()),
                     "--on-server embedding: its weight is tied to decoder.weight");
  expect_clear_error(clusterize(tied + "--mode hybrid --on-server proj --out " + out.string()),
                     "--on-server proj: is a Linear, not an nn.Embedding or nn.EmbeddingBag");
  expect_clear_error(clusterize(tied + "--mode hybrid --on-server nope --out " + out.string()),
                     "--on-server nope: the model has no submodule nope");
  expect_clear_error(clusterize(tied + "--mode hybrid --out " + out.string()),
                     "--mode hybrid needs --on-server");
  expect_clear_error(clusterize(tied + "--on-server embedding --out " + out.string()),
                     "--on-server needs --mode hybrid");
  expect_clear_error(
      clusterize(tied + "--mode hybrid --on-server embedding --evaluator --out " + out.string()),
      "--evaluator: a hybrid plan has none");
  expect_clear_error(
      clusterize(model("causal_lm") + " --nodes " + pool +
                 " --example-input 4x8:int64:40 --mode hybrid --on-server tok --servers 3 --out " +
                 out.string()),
      "the pool has 3");
  CHECK(test::read_text(out / "plan.json") == plan);  // the refusals wrote nothing
}

TEST_CASE("clusterize plans for a schedule and a codec", "[cli][planning]") {
  test::TempDir dir;
  const auto pool = (dir / "pool.json").string();
  test::write_text(pool, kPool3);
  const auto out = dir / "out";
  const std::string base = model("small_cnn") + " --nodes " + pool +
                           " --example-input 4x1x8x8 --out " + out.string() + " ";
  auto result = clusterize(base + "--schedule async --compression fp16");
  INFO(result.out << result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("planned for schedule async") != std::string::npos);
  const std::string plan = test::read_text(out / "plan.json");
  CHECK(plan.find("\"schedule\": \"async\"") != std::string::npos);
  CHECK(plan.find("\"activations\": \"fp16\"") != std::string::npos);
  expect_clear_error(clusterize(base + "--schedule slow"), "--schedule must be gpipe, 1f1b or async");
  expect_clear_error(clusterize(base + "--compression int4"), "--compression must be none, fp16");
  expect_clear_error(clusterize(base + "--max-in-flight 2"), "--max-in-flight needs --schedule async");
  expect_clear_error(clusterize(base + "--schedule gpipe --micro-batches 0"),
                     "--micro-batches must be at least 1");
  expect_clear_error(clusterize(base + "--mode ps --schedule async"),
                     "--schedule and --compression plan pipelines");
  CHECK(test::read_text(out / "plan.json") == plan);
}

TEST_CASE("both binaries say their version and the commit they were built from", "[cli][version]") {
  for (std::string name : {"ravnest", "ravnestd"}) {
    auto result = test::run_command(test::binary_dir() + "/apps/" + name + "/" + name + " --version");
    INFO(name << ": " << result.out << result.err);
    CHECK(result.exit_code == 0);
    // "ravnest 0.1.0 (commit 1a2b3c4d5e6f, LibTorch 1.13.0, CPU only)": the version from
    // CMakeLists.txt, a commit or "unknown", and the LibTorch built against
    CHECK(result.out.rfind(name + " " RAVNEST_VERSION " (commit ", 0) == 0);
    CHECK(result.out.find(RAVNEST_COMMIT ", LibTorch ") != std::string::npos);
  }
}

TEST_CASE("clusterize --stages and --clusters lay out the plan as asked", "[cli][layout]") {
  test::TempDir dir;
  const auto pool = (dir / "pool.json").string();
  test::write_text(pool, kPool3);
  const auto out = dir / "out";
  const std::string base = model("small_cnn") + " --nodes " + pool +
                           " --example-input 4x1x8x8 --no-memory-probe --out " + out.string() + " ";
  auto three = clusterize(base + "--stages 3");
  INFO(three.out << three.err);
  REQUIRE(three.exit_code == 0);
  CHECK(three.out.find("1 cluster(s), 3 node(s)") != std::string::npos);
  auto copies = clusterize(base + "--clusters 3 --verify");
  INFO(copies.out << copies.err);
  REQUIRE(copies.exit_code == 0);
  CHECK(copies.out.find("3 cluster(s), 3 node(s)") != std::string::npos);
  // Three clusters cut alike share one stage file (issue 26: stages written once).
  size_t stage_files = 0;
  for (const auto& entry : fs::directory_iterator(out / "stages")) stage_files += entry.is_regular_file();
  CHECK(stage_files == 1);
  for (int id = 0; id < 3; ++id) {
    const auto meta = config::load_node_metadata((out / "nodes" / ("node_" + std::to_string(id) + ".json")).string());
    CHECK(meta.stage_file == "stages/node_0.pt");
  }
  // The same from a [plan] block; the flags win over the file.
  const auto plan_toml = (dir / "layout.toml").string();
  test::write_text(plan_toml, "[plan]\nstages = 3\n");
  auto from_file = clusterize(base + "--plan-file " + plan_toml);
  INFO(from_file.out << from_file.err);
  REQUIRE(from_file.exit_code == 0);
  CHECK(from_file.out.find("1 cluster(s), 3 node(s)") != std::string::npos);
  auto flag_wins = clusterize(base + "--plan-file " + plan_toml + " --stages 1");
  INFO(flag_wins.out << flag_wins.err);
  REQUIRE(flag_wins.exit_code == 0);
  CHECK(flag_wins.out.find("3 cluster(s), 3 node(s)") != std::string::npos);
  const std::string plan = test::read_text(out / "plan.json");
  expect_clear_error(clusterize(base + "--stages 3 --clusters 2"),
                     "2 clusters of 3 stages need 6 nodes; the pool has 3");
  expect_clear_error(clusterize(base + "--mode ps --stages 2"),
                     "--stages and --clusters lay out pipelines, not --mode ps");
  CHECK(test::read_text(out / "plan.json") == plan);
}

TEST_CASE("pool add and remove replan only the cluster a removed node was in", "[cli][pool]") {
  // Issue 26: two clusters of one stage each and a spare; a node added is a spare (nothing of
  // the plan changes), a planned node removed is replaced by the best spare, and every stage file
  // and the other cluster's node (but for its ring peers) stay byte for byte.
  test::TempDir dir;
  const std::string pool = (dir / "pool.json").string();
  const std::string out = (dir / "out").string();
  test::write_text(pool, kPool3);
  auto made = clusterize(model("small_cnn") + " --nodes " + pool + " --no-memory-probe " +
                         "--example-input 4x1x8x8:float32 --stages 1 --clusters 2 --out " + out);
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  auto files = [&] {
    std::map<std::string, std::string> bytes;
    for (const auto& entry : fs::recursive_directory_iterator(out)) {
      if (entry.is_regular_file()) bytes[fs::relative(entry.path(), out).string()] =
          test::read_text(entry.path());
    }
    return bytes;
  };
  const auto before = files();
  auto pool_cmd = [&](const std::string& args) {
    return test::run_command(ravnest_binary() + " pool " + args + " --nodes " + pool +
                             " --plan " + out);
  };
  auto added = pool_cmd("add node_3 --ip 127.0.0.1:18083 --ram 8 --bandwidth 1000");
  INFO(added.out << added.err);
  REQUIRE(added.exit_code == 0);
  CHECK(added.out.find("node_3 is a spare") != std::string::npos);
  CHECK(files() == before);
  CHECK(config::load_node_pool(pool).size() == 4);

  // One line each, nothing written.
  expect_clear_error(pool_cmd("add node_3 --ip 127.0.0.1:18090 --ram 8 --bandwidth 10"),
                     "node_3 is already in the pool");
  expect_clear_error(pool_cmd("add node_4 --ip 127.0.0.1:18083 --ram 8 --bandwidth 10"),
                     "the address 127.0.0.1:18083 is node_3's");
  expect_clear_error(pool_cmd("add node_4 --ip 127.0.0.1:18084 --ram 0 --bandwidth 10"),
                     "--ram (GB) must be a positive number");
  expect_clear_error(pool_cmd("remove node_9"), "node_9 is not in the pool");
  CHECK(config::load_node_pool(pool).size() == 4);

  const auto plan_nodes = [&] {
    std::map<int, config::NodeMetadata> by_id;
    for (const auto& entry : fs::directory_iterator(fs::path(out) / "nodes")) {
      auto meta = config::load_node_metadata(entry.path().string());
      by_id[meta.node_id] = meta;
    }
    return by_id;
  };
  const auto planned = plan_nodes();
  REQUIRE(planned.size() == 2);
  const int gone = planned.begin()->first;
  const int kept = std::next(planned.begin())->first;
  auto removed = pool_cmd("remove node_" + std::to_string(gone));
  INFO(removed.out << removed.err);
  REQUIRE(removed.exit_code == 0);
  // node_3 has the most bandwidth of the spares.
  CHECK(removed.out.find("node_3 takes its stage") != std::string::npos);
  const auto after = plan_nodes();
  CHECK(after.count(gone) == 0);
  REQUIRE(after.count(3) == 1);
  CHECK(after.at(3).cluster == planned.at(gone).cluster);
  CHECK(after.at(3).address == "127.0.0.1:18083");
  auto without_rings = [](config::NodeMetadata meta) {
    meta.rings.clear();
    return config::to_json(meta);
  };
  CHECK(without_rings(after.at(kept)) == without_rings(planned.at(kept)));
  const auto now = files();
  for (const auto& [path, bytes] : before) {
    if (path.rfind("stages/", 0) != 0 || !now.count(path)) continue;
    INFO(path);
    CHECK(now.at(path) == bytes);
  }
  CHECK(config::load_node_pool(pool).size() == 3);
}

TEST_CASE("pool add and remove at the same moment: every edit counts", "[cli][pool]") {
  // Issue 43: 20 `ravnest pool add` at once all said they added their node, and the file kept 8
  // (each read the pool, added its node and wrote it back over the others'). Each round runs 20
  // adds, then 10 removes, at once; the pool keeps exactly what they leave.
  test::TempDir dir;
  const std::string pool = (dir / "pool.json").string();
  test::write_text(pool, kPool3);
  const std::string no_plan = (dir / "no_plan").string();  // no plan to replan
  auto at_once = [](const std::vector<std::string>& commands) {
    std::vector<test::CommandResult> results(commands.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < commands.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = test::run_command(commands[i]); });
    }
    for (auto& t : threads) t.join();
    for (const auto& r : results) {
      INFO(r.out << r.err);
      CHECK(r.exit_code == 0);
    }
  };
  std::set<int> expected = {0, 1, 2};
  for (int round = 0; round < 3; ++round) {
    std::vector<std::string> adds, removes;
    for (int i = 0; i < 20; ++i) {
      const int id = 100 + round * 100 + i;
      adds.push_back(ravnest_binary() + " pool add " + std::to_string(id) + " --ip 127.0.0.1:" +
                     std::to_string(20000 + id) + " --ram 4 --bandwidth 10 --nodes " + pool +
                     " --plan " + no_plan);
      expected.insert(id);
    }
    at_once(adds);
    for (int i = 0; i < 20; i += 2) {
      const int id = 100 + round * 100 + i;
      removes.push_back(ravnest_binary() + " pool remove " + std::to_string(id) + " --nodes " +
                        pool + " --plan " + no_plan);
      expected.erase(id);
    }
    at_once(removes);
    std::set<int> kept;
    for (const auto& node : config::load_node_pool(pool)) kept.insert(node.id);
    INFO("round " << round);
    CHECK(kept == expected);
  }
}
