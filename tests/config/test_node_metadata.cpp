// node_<id>.json: exact round trips, strict reading, and atomic files.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "libs/base/atomic_file.h"
#include "libs/base/config_error.h"
#include "libs/config/plan/node_metadata.h"

using namespace ravnest;
using namespace ravnest::config;
using namespace ravnest::base;

namespace {

NodeMetadata full_metadata() {
  NodeMetadata m;
  m.node_id = 4;
  m.name = "node_4";
  m.address = "10.1.2.3:8084";
  m.cluster = 1;
  m.position = 1;
  m.cluster_size = 3;
  m.cluster_count = 2;
  m.role = Role::kStem;
  m.stage_file = "stages/node_4.pt";
  m.stage_sha256 = std::string(64, 'a');
  m.tls_fingerprints["10.1.2.3:8084"] = std::string(64, 'c');

  StageInput a;
  a.value = "x.7";
  a.type = "Tensor";
  a.from_node = 3;
  a.from_output = 0;
  StageInput b;
  b.value = "mask";
  b.type = "Tensor";
  b.from_node = 3;
  b.from_output = 1;
  StageInput c;
  c.value = "n";
  c.type = "int";
  c.model_input = 2;  // the reader checks types, not roles
  m.inputs = {a, b, c};

  StageOutput out0;
  out0.value = "x.12";
  out0.type = "Tensor";
  out0.to_nodes = {5};
  StageOutput out1;
  out1.value = "skip";
  out1.type = "List[Tensor]";
  out1.to_nodes = {5, 6};
  m.outputs = {out0, out1};
  m.returns_model_output = false;
  m.pipeline = {3, 4, 5, 6};
  m.addresses = {{3, "10.0.0.3:8080"}, {4, "10.0.0.4:8080"}, {5, "[::1]:9"}, {6, "h:1"}};
  m.forward_neighbours = {5, 6};
  m.backward_neighbours = {3};
  m.parameters = {"layer2.weight", "layer2.bias", "embed.weight", "bn.running_mean"};
  m.shared_parameters = {{"embed.weight", {3, 4}}, {"z.tied", {4, 6}}};
  m.tied_parameters = {{"head.weight", "embed.weight"}, {"lm.bias", "embed.bias"}};
  m.random_nodes = {3, 4};

  RingMembership ring;
  ring.id = 2;
  ring.parameters = {"layer2.weight", "layer2.bias"};
  ring.size = 3;
  ring.position = 1;
  ring.next = {9, 2, "10.1.2.9:8089"};
  ring.prev = {1, 0, "10.1.2.1:8081"};
  RingMembership ring2 = ring;
  ring2.id = 3;
  ring2.parameters = {"embed.weight", "bn.running_mean"};
  m.rings = {ring, ring2};

  m.estimates.parameter_count = 12345678901LL;
  m.estimates.parameter_bytes = 49382715604LL;
  m.estimates.memory_bytes = 1.2345678901234567e10;
  m.estimates.step_seconds = 0.1 + 0.2;  // not a short decimal
  m.estimates.forward_bytes_per_sample = 3.0e-5 / 7;
  m.estimates.peak_memory_bytes = 652000000;
  m.estimates.daemon_baseline_bytes = 163000000;
  m.estimates.node_ram_bytes = 8000000000;
  m.estimates.device_peak_memory_bytes = 9100000000;
  m.estimates.node_gpu_memory_bytes = 16000000000;
  return m;
}

void require_equal(const NodeMetadata& a, const NodeMetadata& b) {
  CHECK(a.format == b.format);
  CHECK(a.node_id == b.node_id);
  CHECK(a.name == b.name);
  CHECK(a.address == b.address);
  CHECK(a.tls_fingerprints == b.tls_fingerprints);
  CHECK(a.cluster == b.cluster);
  CHECK(a.position == b.position);
  CHECK(a.cluster_size == b.cluster_size);
  CHECK(a.cluster_count == b.cluster_count);
  CHECK(a.role == b.role);
  CHECK(a.stage_file == b.stage_file);
  CHECK(a.stage_sha256 == b.stage_sha256);
  REQUIRE(a.inputs.size() == b.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    CHECK(a.inputs[i].value == b.inputs[i].value);
    CHECK(a.inputs[i].type == b.inputs[i].type);
    CHECK(a.inputs[i].model_input == b.inputs[i].model_input);
    CHECK(a.inputs[i].from_node == b.inputs[i].from_node);
    if (a.inputs[i].from_node) CHECK(a.inputs[i].from_output == b.inputs[i].from_output);
  }
  REQUIRE(a.outputs.size() == b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    CHECK(a.outputs[i].value == b.outputs[i].value);
    CHECK(a.outputs[i].type == b.outputs[i].type);
    CHECK(a.outputs[i].to_nodes == b.outputs[i].to_nodes);
  }
  CHECK(a.returns_model_output == b.returns_model_output);
  CHECK(a.pipeline == b.pipeline);
  CHECK(a.addresses == b.addresses);
  CHECK(a.forward_neighbours == b.forward_neighbours);
  CHECK(a.backward_neighbours == b.backward_neighbours);
  CHECK(a.parameters == b.parameters);
  CHECK(a.shared_parameters == b.shared_parameters);
  CHECK(a.tied_parameters == b.tied_parameters);
  CHECK(a.random_nodes == b.random_nodes);
  REQUIRE(a.rings.size() == b.rings.size());
  for (size_t i = 0; i < a.rings.size(); ++i) {
    CHECK(a.rings[i].id == b.rings[i].id);
    CHECK(a.rings[i].parameters == b.rings[i].parameters);
    CHECK(a.rings[i].size == b.rings[i].size);
    CHECK(a.rings[i].position == b.rings[i].position);
    for (auto peer : {&RingMembership::next, &RingMembership::prev}) {
      CHECK((a.rings[i].*peer).node == (b.rings[i].*peer).node);
      CHECK((a.rings[i].*peer).cluster == (b.rings[i].*peer).cluster);
      CHECK((a.rings[i].*peer).address == (b.rings[i].*peer).address);
    }
  }
  CHECK(a.estimates.parameter_count == b.estimates.parameter_count);
  CHECK(a.estimates.parameter_bytes == b.estimates.parameter_bytes);
  CHECK(a.estimates.memory_bytes == b.estimates.memory_bytes);  // bit-exact
  CHECK(a.estimates.step_seconds == b.estimates.step_seconds);
  CHECK(a.estimates.forward_bytes_per_sample == b.estimates.forward_bytes_per_sample);
  CHECK(a.estimates.peak_memory_bytes == b.estimates.peak_memory_bytes);
  CHECK(a.estimates.daemon_baseline_bytes == b.estimates.daemon_baseline_bytes);
  CHECK(a.estimates.node_ram_bytes == b.estimates.node_ram_bytes);
  CHECK(a.estimates.device_peak_memory_bytes == b.estimates.device_peak_memory_bytes);
  CHECK(a.estimates.node_gpu_memory_bytes == b.estimates.node_gpu_memory_bytes);
}

std::string error_of(const std::string& text, const std::string& origin = "nodes/node_4.json") {
  try {
    node_metadata_from_json(text, origin);
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    CHECK(message.find('\n') == std::string::npos);
    return message;
  }
  FAIL("expected a ConfigError");
  return "";
}

// Replaces the first occurrence of `from` in `text`.
std::string edit(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string temp_dir() {
  char pattern[] = "/tmp/ravnest_test_metadata_XXXXXX";
  const char* made = ::mkdtemp(pattern);
  REQUIRE(made != nullptr);
  return made;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

}  // namespace

TEST_CASE("role names", "[metadata]") {
  for (Role role : {Role::kRoot, Role::kStem, Role::kLeaf, Role::kRootLeaf, Role::kServer,
                    Role::kWorker, Role::kEvaluator}) {
    CHECK(role_from_name(role_name(role)) == role);
  }
  CHECK(role_name(Role::kRootLeaf) == "root+leaf");
  CHECK_THROWS_AS(role_from_name("trunk"), ConfigError);
}

TEST_CASE("metadata round-trips exactly with every field populated", "[metadata]") {
  const NodeMetadata original = full_metadata();
  const std::string text = to_json(original);
  const NodeMetadata back = node_metadata_from_json(text, "mem");
  require_equal(original, back);
  CHECK(to_json(back) == text);  // stable
}

TEST_CASE("a root+leaf and a root with model inputs round-trip", "[metadata]") {
  NodeMetadata m;
  m.node_id = 0;
  m.name = "node_0";
  m.address = "h:1";
  m.role = Role::kRootLeaf;
  m.returns_model_output = true;
  StageInput in;
  in.value = "x";
  in.type = "Tensor";
  in.model_input = 0;
  m.inputs = {in};
  const NodeMetadata back = node_metadata_from_json(to_json(m), "mem");
  require_equal(m, back);
  CHECK(back.outputs.empty());
  CHECK(back.rings.empty());
  CHECK(back.shared_parameters.empty());
  CHECK(back.tied_parameters.empty());
}

TEST_CASE("the JSON is pretty, with the documented keys in order", "[metadata]") {
  const std::string text = to_json(full_metadata());
  CHECK(text.rfind("{\n  \"format\": \"ravnest.node/1\",\n  \"node_id\": 4,", 0) == 0);
  CHECK(contains(text, "\"from\": {\n"));
  CHECK(contains(text, "\"node\": 3,"));
  CHECK(contains(text, "\"model_input\": 2"));
  CHECK(contains(text, "\"role\": \"stem\""));
  // Absent sources are omitted, not written as null.
  CHECK(!contains(text, "null"));
  const auto order = {"\"format\"", "\"node_id\"", "\"name\"", "\"address\"", "\"cluster\"",
                      "\"position\"", "\"cluster_size\"", "\"cluster_count\"", "\"role\"", "\"stage_file\"",
                      "\"stage_sha256\"", "\"inputs\"", "\"outputs\"", "\"returns_model_output\"",
                      "\"pipeline\"", "\"addresses\"", "\"forward_neighbours\"", "\"backward_neighbours\"", "\"parameters\"",
                      "\"shared_parameters\"", "\"tied_parameters\"", "\"random_nodes\"", "\"rings\"",
                      "\"tls_fingerprints\"", "\"estimates\""};
  size_t at = 0;
  for (const char* key : order) {
    const auto found = text.find(std::string("\n  ") + key, at);
    CHECK(found != std::string::npos);
    at = found;
  }
}

TEST_CASE("strict reading names the origin and the field", "[metadata][errors]") {
  const std::string good = to_json(full_metadata());

  CHECK(contains(error_of("{", "x.json"), "x.json: malformed JSON"));
  CHECK(contains(error_of("[]"), "nodes/node_4.json: (top level): must be an object"));
  CHECK(error_of(edit(good, "ravnest.node/1", "ravnest.node/2")) ==
        "nodes/node_4.json: format: expected \"ravnest.node/1\", got \"ravnest.node/2\"");
  CHECK(error_of(edit(good, "\"node_id\": 4", "\"node_id\": \"4\"")) ==
        "nodes/node_4.json: node_id: must be an integer, got a string");
  CHECK(error_of(edit(good, "\"node_id\": 4", "\"node_id\": 4.5")) ==
        "nodes/node_4.json: node_id: must be an integer, got a fractional number");
  CHECK(error_of(edit(good, "\"node_id\": 4,", "")) == "nodes/node_4.json: node_id: is missing");
  CHECK(error_of(edit(good, "\"cluster_size\": 3", "\"cluster_size\": 99999999999")) ==
        "nodes/node_4.json: cluster_size: is out of range");
  CHECK(contains(error_of(edit(good, "\"stem\"", "\"trunk\"")),
                 "nodes/node_4.json: role: unknown role \"trunk\""));
  CHECK(error_of(edit(good, "\"returns_model_output\": false", "\"returns_model_output\": 0")) ==
        "nodes/node_4.json: returns_model_output: must be true or false, got a number");
  CHECK(error_of(edit(good, "\"node\": 3,", "\"node\": \"3\",")) ==
        "nodes/node_4.json: inputs[0].from.node: must be an integer, got a string");
  CHECK(error_of(edit(good, "\"output\": 1", "\"outpt\": 1")) ==
        "nodes/node_4.json: inputs[1].from.output: is missing");
  CHECK(error_of(edit(good, "\"model_input\": 2", "\"model_inputs\": 2")) ==
        "nodes/node_4.json: inputs[2]: needs exactly one of \"model_input\" and \"from\"");
  CHECK(error_of(edit(good, "\"to_nodes\": [\n        5\n      ]", "\"to_nodes\": 5")) ==
        "nodes/node_4.json: outputs[0].to_nodes: must be an array, got a number");
  CHECK(error_of(edit(good, "\"layer2.bias\",\n    \"embed", "7,\n    \"embed")) ==
        "nodes/node_4.json: parameters[1]: must be a string, got a number");
  CHECK(error_of(edit(good, "\"address\": \"10.1.2.9:8089\"", "\"addr\": \"10.1.2.9:8089\"")) ==
        "nodes/node_4.json: rings[0].next.address: is missing");
  CHECK(error_of(edit(good, "\"size\": 3", "\"size\": null")) ==
        "nodes/node_4.json: rings[0].size: must be an integer, got null");
  CHECK(error_of(edit(good, "\"size\": 3", "\"size\": 1")) ==
        "nodes/node_4.json: rings[0].position: must be below size (0 to 0), got 1");
  CHECK(error_of(edit(good, "\"z.tied\": [", "\"z.tied\": [\"x\", ")) ==
        "nodes/node_4.json: shared_parameters.z.tied[0]: must be an integer, got a string");
  CHECK(error_of(edit(good, "\"head.weight\": \"embed.weight\"", "\"head.weight\": 3")) ==
        "nodes/node_4.json: tied_parameters.head.weight: must be a string, got a number");
  CHECK(error_of(edit(good, "\"random_nodes\": [", "\"random_nodes\": [\"x\", ")) ==
        "nodes/node_4.json: random_nodes[0]: must be an integer, got a string");
  // Plans written before the random stream was chained have no random_nodes: none draw together.
  CHECK(node_metadata_from_json(edit(good, "\"random_nodes\": [", "\"random_nodes_old\": ["),
                                "nodes/node_4.json")
            .random_nodes.empty());
  CHECK(error_of(edit(good, "\"tied_parameters\": {", "\"tied\": {")) ==
        "nodes/node_4.json: tied_parameters: is missing");
  CHECK(error_of(edit(good, "\"step_seconds\": ", "\"step_seconds\": \"fast\", \"x\": ")) ==
        "nodes/node_4.json: estimates.step_seconds: must be a number, got a string");
  CHECK(error_of(edit(good, "\"estimates\": {", "\"estimatez\": {")) ==
        "nodes/node_4.json: estimates: is missing");
}

TEST_CASE("files are written atomically and read back", "[metadata][atomic_file]") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/node_4.json";
  const NodeMetadata m = full_metadata();
  base::write_file_atomically(path, to_json(m));
  require_equal(m, load_node_metadata(path));
  write_file_atomically(path, "replaced");
  CHECK(base::read_file(path) == "replaced");
  CHECK(list_dir(dir) == std::vector<std::string>{"node_4.json"});  // no temporaries left

  const std::string binary("a\0b\xff", 4);
  write_file_atomically(dir + "/bin", binary);
  CHECK(read_file(dir + "/bin") == binary);
  write_file_atomically(dir + "/empty", "");
  CHECK(read_file(dir + "/empty").empty());
}

TEST_CASE("a failed write throws, names the path and leaves nothing behind", "[atomic_file]") {
  const std::string dir = temp_dir();
  CHECK_THROWS_WITH(base::write_file_atomically(dir + "/no/such/dir/file", "x"),
                    Catch::Contains(dir + "/no/such/dir/file: cannot write"));
  // Renaming over a directory fails after the temporary was written: it must be removed.
  const std::string target = dir + "/occupied";
  base::write_file_atomically(dir + "/occupied_probe", "x");
  REQUIRE(::mkdir(target.c_str(), 0755) == 0);
  write_file_atomically(target + "/inner", "y");  // non-empty, so rename(2) cannot replace it
  CHECK_THROWS_WITH(write_file_atomically(target, "z"),
                    Catch::Contains(target + ": cannot write"));
  const auto names = list_dir(dir);
  CHECK(names.size() == 2);  // occupied_probe and occupied
  for (const auto& name : names) CHECK(name.find(".tmp.") == std::string::npos);
}

TEST_CASE("read_file names unreadable paths", "[atomic_file]") {
  CHECK_THROWS_WITH(base::read_file("/nonexistent/ravnest/x.json"),
                    "/nonexistent/ravnest/x.json: cannot read: No such file or directory");
  CHECK_THROWS_AS(load_node_metadata("/nonexistent/ravnest/x.json"), ConfigError);
}

TEST_CASE("pinned certificates: absent when none, and checked when read", "[metadata][errors]") {
  NodeMetadata m = full_metadata();
  m.tls_fingerprints.clear();
  CHECK(!contains(to_json(m), "tls_fingerprints"));  // plans without pins read as before
  CHECK(node_metadata_from_json(to_json(m), "mem").tls_fingerprints.empty());
  std::string text = to_json(full_metadata());
  const std::string pin = std::string(64, 'c');
  text.replace(text.find(pin), pin.size(), "not a fingerprint");
  try {
    node_metadata_from_json(text, "node_4.json");
    FAIL("accepted");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == "node_4.json: tls_fingerprints.10.1.2.3:8084: must be the "
                                   "SHA-256 of a certificate (64 hex digits)");
  }
}

TEST_CASE("a parameter-server plan round-trips; its roles need it", "[metadata][ps]") {
  NodeMetadata m;
  m.node_id = 3;
  m.name = "node_3";
  m.address = "h:3";
  m.role = Role::kWorker;
  m.cluster = 1;
  m.cluster_count = 2;
  m.parameter_server.servers = {{0, "h:0", {"fc.weight", "fc.bias"}}, {1, "h:1", {"emb.weight"}}};
  m.parameter_server.workers = {{2, "h:2"}, {3, "h:3"}};
  m.parameter_server.evaluator = PsPeer{4, "h:4"};
  const std::string text = to_json(m);
  CHECK(contains(text, "\"parameter_server\": {"));
  const NodeMetadata back = node_metadata_from_json(text, "mem");
  REQUIRE(back.parameter_server.servers.size() == 2);
  CHECK(back.parameter_server.servers[1].tensors == std::vector<std::string>{"emb.weight"});
  CHECK(back.parameter_server.servers[0].address == "h:0");
  REQUIRE(back.parameter_server.workers.size() == 2);
  CHECK(back.parameter_server.workers[1].node == 3);
  REQUIRE(back.parameter_server.evaluator);
  CHECK(back.parameter_server.evaluator->address == "h:4");
  CHECK(to_json(back) == text);
  // A pipeline plan has none, and writes none.
  CHECK(!contains(to_json(full_metadata()), "parameter_server"));

  // A worker's cluster is its index among the workers.
  NodeMetadata wrong = m;
  wrong.cluster = 0;
  CHECK(contains(error_of(to_json(wrong)),
                 "cluster: must be this worker's index in parameter_server.workers"));
  // A server without the plan.
  NodeMetadata alone = m;
  alone.role = Role::kServer;
  alone.parameter_server = {};
  CHECK(contains(error_of(to_json(alone)), "parameter_server: a server needs the plan's"));
  // A stem in a parameter-server plan.
  NodeMetadata stem = m;
  stem.role = Role::kStem;
  CHECK(contains(error_of(to_json(stem)), "role: must be server, worker or evaluator"));
}

TEST_CASE("a hybrid plan's sparse tables round-trip and are checked", "[metadata][ps][hybrid]") {
  NodeMetadata m;
  m.node_id = 2;
  m.name = "node_2";
  m.address = "h:2";
  m.role = Role::kWorker;
  m.cluster = 0;
  m.cluster_count = 2;
  m.parameter_server.servers = {{0, "h:0", {"emb.weight"}}, {1, "h:1", {"tags.weight"}}};
  m.parameter_server.workers = {{2, "h:2"}, {3, "h:3"}};
  m.parameter_server.sparse_tables = {{"emb.weight", 0, 0, {100, 16}},
                                      {"tags.weight", 1, 1, {50, 4, 2}}};
  const std::string text = to_json(m);
  const NodeMetadata back = node_metadata_from_json(text, "mem");
  REQUIRE(back.parameter_server.hybrid());
  REQUIRE(back.parameter_server.sparse_tables.size() == 2);
  CHECK(back.parameter_server.sparse_tables[1].weight == "tags.weight");
  CHECK(back.parameter_server.sparse_tables[1].server == 1);
  CHECK(back.parameter_server.sparse_tables[1].index_input == 1);
  CHECK(back.parameter_server.sparse_tables[1].shape == std::vector<int64_t>{50, 4, 2});
  CHECK(to_json(back) == text);
  // A plain parameter-server plan writes none.
  NodeMetadata plain = m;
  plain.parameter_server.sparse_tables.clear();
  CHECK(!contains(to_json(plain), "sparse_tables"));

  NodeMetadata elsewhere = m;
  elsewhere.parameter_server.sparse_tables[0].server = 1;
  CHECK(contains(error_of(to_json(elsewhere)),
                 "parameter_server.sparse_tables[0].server: must be a server whose tensors include "
                 "emb.weight"));
  NodeMetadata flat = m;
  flat.parameter_server.sparse_tables[0].shape = {100};
  CHECK(contains(error_of(to_json(flat)), "sparse_tables[0].shape: must have at least 2"));
  NodeMetadata empty_rows = m;
  empty_rows.parameter_server.sparse_tables[0].shape = {0, 16};
  CHECK(contains(error_of(to_json(empty_rows)), "sparse_tables[0].shape[0]: must be >= 1"));
  NodeMetadata scored = m;
  scored.parameter_server.evaluator = PsPeer{4, "h:4"};
  CHECK(contains(error_of(to_json(scored)), "a hybrid plan has no evaluator"));
}

TEST_CASE("rings of plans written before: every member listed, read down to the neighbours",
          "[metadata][rings]") {
  std::string text = to_json(full_metadata());
  // This version's ring, as earlier versions wrote it: every member, in cluster order.
  const std::string now = text.substr(text.find("\"size\": 3"),
                                      text.find("\"next_node\"") - text.find("\"size\": 3"));
  const std::string before =
      "\"peers\": [{\"node\": 1, \"cluster\": 0, \"address\": \"10.1.2.1:8081\"}, "
      "{\"node\": 4, \"cluster\": 1, \"address\": \"10.1.2.3:8084\"}, "
      "{\"node\": 9, \"cluster\": 2, \"address\": \"10.1.2.9:8089\"}], \"position\": 1, ";
  text = edit(text, now, before);
  REQUIRE(text.find("\"peers\"") != std::string::npos);
  const auto old = node_metadata_from_json(text, "old.json");
  const auto& ring = old.rings.at(0);
  CHECK(ring.size == 3);
  CHECK(ring.position == 1);
  CHECK(ring.next.node == 9);
  CHECK(ring.next.cluster == 2);
  CHECK(ring.next.address == "10.1.2.9:8089");
  CHECK(ring.prev.node == 1);
  CHECK(ring.prev.address == "10.1.2.1:8081");
  // Written again, it is this version's file.
  CHECK(to_json(old) == to_json(full_metadata()));
  // The old checks still hold: this node at `position`.
  CHECK(error_of(edit(text, "\"position\": 1, ", "\"position\": 2, ")) ==
        "nodes/node_4.json: rings[0].position: must be the index of this node (node_id 4) in "
        "peers");
}
